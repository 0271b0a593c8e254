package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	evictionv1 "github.com/unitlet/unitlet/proto/unitlet/eviction/v1"
	"github.com/unitlet/unitlet/shared/daemon"
	"github.com/unitlet/unitlet/shared/envconfig"
)

// fakeEviction is unitlet-eviction answering GetState with state(the time of the call),
// and keeping the last state it sent in sent.
type fakeEviction struct {
	evictionv1.UnimplementedEvictionServiceServer
	state func(now time.Time) *evictionv1.State
	sent  chan *evictionv1.State
}

func (f fakeEviction) GetState(context.Context, *evictionv1.GetStateRequest) (*evictionv1.GetStateResponse, error) {
	st := f.state(time.Now())
	select {
	case <-f.sent:
	default:
	}
	f.sent <- st
	return &evictionv1.GetStateResponse{State: st}, nil
}

// fakeEvictionState has a node under memory pressure: memory.available below its hard
// threshold (met), nodefs.available below its soft threshold for part of its grace period,
// imagefs not observed, and one pod evicted and one whose eviction failed. Its times are
// half a second further back than the ages the table is to show: unitletctl takes its
// now just before the call, a little before the service's.
func fakeEvictionState(now time.Time) *evictionv1.State {
	ts := func(d time.Duration) *timestamppb.Timestamp { return timestamppb.New(now.Add(-d - time.Second/2)) }
	return &evictionv1.State{
		Observed: ts(3 * time.Second),
		Signals: []*evictionv1.Signal{
			{Name: "memory.available", Observed: true, Available: "80Mi", Capacity: "2Gi", Thresholds: []*evictionv1.Threshold{
				{Kind: "hard", Value: "100Mi", Resolved: "100Mi", Crossed: true, Met: true, MinimumReclaim: "50Mi"},
			}},
			{Name: "nodefs.available", Observed: true, Available: "3Gi", Capacity: "40Gi", Thresholds: []*evictionv1.Threshold{
				{Kind: "hard", Value: "5%", Resolved: "2Gi"},
				{Kind: "soft", Value: "10%", Resolved: "4Gi", Crossed: true, FirstCrossed: ts(30 * time.Second), GracePeriod: "1m30s"},
			}},
			{Name: "imagefs.available", Error: "ImageFsInfo: rpc error: code = Unavailable\ndesc = connection refused"},
		},
		Conditions: []*evictionv1.Condition{
			{Type: "MemoryPressure", Status: "True", Reason: "KubeletHasInsufficientMemory", Message: "memory.available below 100Mi", LastTransitionTime: ts(2 * time.Minute)},
			{Type: "DiskPressure", Status: "False", Reason: "KubeletHasNoDiskPressure", LastTransitionTime: ts(3 * time.Hour)},
		},
		Evictions: []*evictionv1.Eviction{
			{Time: ts(time.Minute), PodUid: "uid-1", Namespace: "default", Name: "hog", Signal: "memory.available",
				Message: "The node was low on resource: memory. Threshold quantity: 100Mi, available: 80Mi.", GracePeriodSeconds: 0},
			{Time: ts(90 * time.Second), PodUid: "uid-2", Namespace: "kube-system", Name: "other", Signal: "memory.available",
				GracePeriodSeconds: 30, Error: "podsync: pod uid-2 not found"},
		},
	}
}

// serveFake runs a real daemon for service in a temp socket dir, with its API registered
// by register, and returns the socket dir.
func serveFake(t *testing.T, service string, register func(d *daemon.Daemon)) string {
	t.Helper()
	dir := t.TempDir()
	var s daemon.Settings
	if err := envconfig.Parse(&s, map[string]string{"UNITLET_SOCKET_DIR": dir}); err != nil {
		t.Fatal(err)
	}
	d := daemon.New(daemon.Options{Service: service, Settings: s, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	register(d)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(filepath.Join(dir, service+".sock")); err == nil {
			return dir
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("the fake %s service did not start", service)
	return ""
}

// serveEviction serves a fake unitlet-eviction; sent has the last state it answered.
func serveEviction(t *testing.T, state func(now time.Time) *evictionv1.State) (dir string, sent chan *evictionv1.State) {
	sent = make(chan *evictionv1.State, 1)
	dir = serveFake(t, "eviction", func(d *daemon.Daemon) {
		evictionv1.RegisterEvictionServiceServer(d.Server(), fakeEviction{state: state, sent: sent})
	})
	return dir, sent
}

// row is the line of out that starts with prefix, split into the columns the table
// separates by three or more spaces.
func row(t *testing.T, out, prefix string) []string {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, prefix) {
			var cols []string
			for _, c := range strings.Split(l, "   ") {
				if c = strings.TrimSpace(c); c != "" {
					cols = append(cols, c)
				}
			}
			return cols
		}
	}
	t.Fatalf("no line starting with %q in:\n%s", prefix, out)
	return nil
}

func TestEviction(t *testing.T) {
	dir, sent := serveEviction(t, fakeEvictionState)

	out, errOut, code := ctl("--socket-dir="+dir, "eviction")
	if code != 0 {
		t.Fatalf("eviction: exit %d: %s", code, errOut)
	}
	st := <-sent
	at := func(i int) string { return stamp(st.GetEvictions()[i].GetTime().AsTime()) }
	for _, c := range []struct {
		prefix string
		want   []string
	}{
		{"NAME", []string{"NAME", "AVAILABLE", "CAPACITY", "HARD", "SOFT"}},
		{"memory.available", []string{"memory.available", "80Mi", "2Gi", "100Mi MET", "-"}},
		{"nodefs.available", []string{"nodefs.available", "3Gi", "40Gi", "2Gi (5%)", "4Gi (10%) grace 1m30s, crossed 30s ago"}},
		{"imagefs.available", []string{"imagefs.available", "?", "?", "-", "-"}},
		{"TYPE", []string{"TYPE", "STATUS", "REASON", "SINCE"}},
		{"MemoryPressure", []string{"MemoryPressure", "True", "KubeletHasInsufficientMemory", "2m0s ago"}},
		{"DiskPressure", []string{"DiskPressure", "False", "KubeletHasNoDiskPressure", "3h ago"}},
		{"TIME", []string{"TIME", "POD", "SIGNAL", "GRACE", "MESSAGE"}},
		{at(0), []string{at(0) + " (60s ago)", "default/hog", "memory.available", "0s",
			"The node was low on resource: memory. Threshold quantity: 100Mi, available: 80Mi."}},
		{at(1), []string{at(1) + " (90s ago)", "kube-system/other", "memory.available", "30s", "not evicted: podsync: pod uid-2 not found"}},
	} {
		if got := row(t, out, c.prefix); strings.Join(got, "|") != strings.Join(c.want, "|") {
			t.Errorf("row %s: %q, want %q\n%s", c.prefix, got, c.want, out)
		}
	}
	for _, want := range []string{
		"observed:  " + stamp(st.GetObserved().AsTime()) + " (3s ago)",
		// An unobserved signal's error, on one line.
		"imagefs.available: not observed: ImageFsInfo: rpc error: code = Unavailable desc = connection refused",
		"LAST EVICTIONS",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("eviction output lacks %q:\n%s", want, out)
		}
	}

	// -o json is the State as protojson, every field there.
	out, errOut, code = ctl("--socket-dir="+dir, "-o", "json", "eviction")
	if code != 0 {
		t.Fatalf("eviction -o json: exit %d: %s", code, errOut)
	}
	st = <-sent
	var got evictionv1.State
	if err := protojson.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("eviction -o json is not a State: %v\n%s", err, out)
	}
	if !proto.Equal(&got, st) {
		t.Errorf("eviction -o json: %v, want %v", &got, st)
	}
	// Unset fields are there too, as in the other commands' -o json (protojson's own
	// spacing varies, so read it back rather than match text).
	var raw map[string]any
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatal(err)
	}
	if e, ok := raw["error"]; !ok || e != "" {
		t.Errorf("eviction -o json: error = %v (present: %v), want an empty string\n%s", e, ok, out)
	}
	if sig := raw["signals"].([]any)[2].(map[string]any); sig["observed"] != false || sig["thresholds"] == nil {
		t.Errorf("eviction -o json: the unobserved signal lacks observed: false or thresholds: []: %v", sig)
	}
}

func TestEvictionBeforeTheFirstObservation(t *testing.T) {
	dir, _ := serveEviction(t, func(time.Time) *evictionv1.State {
		return &evictionv1.State{Error: "read /proc/meminfo: permission denied"}
	})
	out, errOut, code := ctl("--socket-dir="+dir, "eviction")
	if code != 0 {
		t.Fatalf("eviction: exit %d: %s", code, errOut)
	}
	for _, want := range []string{"observed:  not yet", "the last observation failed: read /proc/meminfo: permission denied",
		"no signals observed yet", "no pressure conditions yet", "no evictions"} {
		if !strings.Contains(out, want) {
			t.Errorf("eviction output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "NAME") || strings.Contains(out, "LAST EVICTIONS") {
		t.Errorf("eviction prints empty tables:\n%s", out)
	}
}

func TestEvictionNotRunningAndUsage(t *testing.T) {
	dir := t.TempDir()
	_, errOut, code := ctl("--socket-dir="+dir, "eviction")
	if code != 1 || !strings.Contains(errOut, "unitlet-eviction is not running: no socket at "+filepath.Join(dir, "eviction.sock")) ||
		!strings.Contains(errOut, "systemctl start unitlet-eviction.socket") {
		t.Errorf("eviction with no service: exit %d %q", code, errOut)
	}
	if _, _, code := ctl("--socket-dir="+dir, "eviction", "extra"); code != 2 {
		t.Errorf("eviction extra: exit %d, want 2", code)
	}
	// A unitlet-eviction that serves no EvictionService (its skeleton) is named as such.
	old := serveFake(t, "eviction", func(*daemon.Daemon) {})
	if _, errOut, code := ctl("--socket-dir="+old, "eviction"); code != 1 || !strings.Contains(errOut, "does not report its state") {
		t.Errorf("eviction against a service without its API: exit %d %q", code, errOut)
	}
}
