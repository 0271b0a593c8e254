package podsync

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"

	evictionv1 "github.com/unitlet/unitlet/proto/unitlet/eviction/v1"
	podsyncv1 "github.com/unitlet/unitlet/proto/unitlet/podsync/v1"
	"github.com/unitlet/unitlet/services/podsync/relist"
	"github.com/unitlet/unitlet/shared/bus"
	"github.com/unitlet/unitlet/shared/payload"
)

const diskPressure = "The node had condition: [DiskPressure]. "

// fakeEviction is unitlet-eviction's AdmitPod: it refuses the pods named in refuse, and a
// request without the pod's schema name.
type fakeEviction struct {
	evictionv1.UnimplementedEvictionServiceServer
	refuse map[string]string // pod name -> message

	mu    sync.Mutex
	asked []*corev1.Pod
}

func (f *fakeEviction) AdmitPod(_ context.Context, req *evictionv1.AdmitPodRequest) (*evictionv1.AdmitPodResponse, error) {
	if req.GetPodSchema() != payload.SchemaPod {
		return nil, status.Errorf(codes.InvalidArgument, "pod_schema %q, want %q", req.GetPodSchema(), payload.SchemaPod)
	}
	var p corev1.Pod
	if err := json.Unmarshal(req.GetPod(), &p); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	f.mu.Lock()
	f.asked = append(f.asked, &p)
	f.mu.Unlock()
	if msg, ok := f.refuse[p.Name]; ok {
		return &evictionv1.AdmitPodResponse{Reason: "Evicted", Message: msg}, nil
	}
	return &evictionv1.AdmitPodResponse{Admit: true}, nil
}

func (f *fakeEviction) askedAbout() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, p := range f.asked {
		out = append(out, p.Name)
	}
	return out
}

// socketDir is a directory short enough for Unix socket paths.
func socketDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "podsync-eviction")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// serveEviction serves srv (nil: a gRPC server without the eviction service) on a socket
// in dir and returns its path.
func serveEviction(t *testing.T, dir string, srv evictionv1.EvictionServiceServer) string {
	t.Helper()
	path := filepath.Join(dir, "eviction.sock")
	lis, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	if srv != nil {
		evictionv1.RegisterEvictionServiceServer(s, srv)
	}
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	return path
}

// staleSocket is a socket file nobody listens on (unitlet-eviction died).
func staleSocket(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "eviction.sock")
	lis, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	lis.SetUnlinkOnClose(false)
	lis.Close()
	return path
}

// hungSocket is a socket that accepts connections and never answers (unitlet-eviction
// stuck).
func hungSocket(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "eviction.sock")
	lis, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		lis.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return path
}

// evictionFixture is a service that asks unitlet-eviction at path over the bus.
func evictionFixture(t *testing.T, path string) *serviceFixture {
	t.Helper()
	conn, err := bus.DialPath(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return newServiceFixture(t, 0, func(o *ServiceOptions) {
		o.EvictionSocket, o.Eviction = path, evictionv1.NewEvictionServiceClient(conn)
	})
}

func staticPod(name string, created int64) *corev1.Pod {
	p := newPod(name, created)
	p.Annotations = map[string]string{"kubernetes.io/config.source": "file"}
	return p
}

func hasEvent(evs []string, prefix string) bool {
	return slices.ContainsFunc(evs, func(e string) bool { return strings.HasPrefix(e, prefix) })
}

// TestEvictionVerdicts: admission asks unitlet-eviction; a pod it admits runs, a pod it
// refuses (a static one too) ends Failed with its reason and message as any rejected pod,
// and never reaches the runtime.
func TestEvictionVerdicts(t *testing.T) {
	ev := &fakeEviction{refuse: map[string]string{"refused": diskPressure, "static-refused": diskPressure}}
	f := evictionFixture(t, serveEviction(t, socketDir(t), ev))
	f.s.SetPods("api", []*corev1.Pod{newPod("admitted", 1), newPod("refused", 2)})
	f.s.SetPods("file", []*corev1.Pod{staticPod("static-refused", 3)})

	l := waitListed(t, f.s, "admitted running", func(l map[string]*podsyncv1.Pod) bool { return running(t, l["admitted"]) })
	for _, name := range []string{"refused", "static-refused"} {
		p := l[name]
		if p == nil {
			t.Fatalf("%s not listed", name)
		}
		st := podStatus(t, p)
		if st.Phase != corev1.PodFailed || st.Reason != "Evicted" || st.Message != "Pod was rejected: "+diskPressure || !p.Terminated {
			t.Errorf("%s: phase %s reason %q message %q terminated %v, want Failed, Evicted, %q", name, st.Phase, st.Reason, st.Message, p.Terminated, "Pod was rejected: "+diskPressure)
		}
		if f.m.Known(types.UID(p.Uid)) {
			t.Errorf("%s was refused and got a worker", name)
		}
	}
	if got := f.cri.podsOf(); !slices.Equal(got, []string{"admitted"}) {
		t.Errorf("the runtime has %v, want the admitted pod only", got)
	}
	if got := slices.Sorted(slices.Values(ev.askedAbout())); !slices.Equal(got, []string{"admitted", "refused", "static-refused"}) {
		t.Errorf("eviction was asked about %v, want every new pod", got)
	}
	// The pod crosses the bus with its metadata: eviction tells a static pod by its source.
	ev.mu.Lock()
	for _, p := range ev.asked {
		if p.Name == "static-refused" && p.Annotations["kubernetes.io/config.source"] != "file" {
			t.Errorf("the static pod reached eviction without its source annotation: %v", p.Annotations)
		}
	}
	ev.mu.Unlock()
	for _, name := range []string{"admitted", "refused", "static-refused"} {
		if evs := f.events.of(name); hasEvent(evs, "Normal AdmittedWithoutEvictionCheck") {
			t.Errorf("%s: %q, want no AdmittedWithoutEvictionCheck: eviction answered", name, evs)
		}
	}
}

// TestEvictionUnavailable: without an answer from unitlet-eviction, pods are admitted and
// an event says why; after a failed call none is made for a while, so a burst of pods
// waits for one call's deadline, not one per pod.
func TestEvictionUnavailable(t *testing.T) {
	for _, tc := range []struct {
		name      string
		socket    func(t *testing.T, dir string) string
		wantEvent string
		wantWait  bool // the first pod waits for the call's deadline
	}{
		{"no socket", func(_ *testing.T, dir string) string { return filepath.Join(dir, "eviction.sock") }, "unitlet-eviction is not running (no socket at ", false},
		{"nobody listens", staleSocket, "unitlet-eviction did not answer at ", true},
		{"hung", hungSocket, "unitlet-eviction did not answer at ", true},
		{"an eviction without AdmitPod", func(t *testing.T, dir string) string { return serveEviction(t, dir, nil) }, "unitlet-eviction did not answer at ", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := evictionFixture(t, tc.socket(t, socketDir(t)))
			var pods []*corev1.Pod
			for i := range 20 {
				pods = append(pods, newPod(fmt.Sprintf("p%02d", i), int64(i)))
			}
			start := time.Now()
			f.s.SetPods("api", pods)
			took := time.Since(start)
			if took > 3*time.Second || tc.wantWait && took < evictionTimeout/2 {
				t.Errorf("admitting 20 pods took %s, want about one call's deadline (%s) at most", took, evictionTimeout)
			}
			waitListed(t, f.s, "every pod running", func(l map[string]*podsyncv1.Pod) bool {
				for _, p := range pods {
					if !running(t, l[p.Name]) {
						return false
					}
				}
				return true
			})
			for _, p := range pods {
				evs := f.events.of(p.Name)
				if !hasEvent(evs, "Normal AdmittedWithoutEvictionCheck: Admitted without a node-pressure check: "+tc.wantEvent) {
					t.Errorf("%s: events %q, want AdmittedWithoutEvictionCheck saying %q", p.Name, evs, tc.wantEvent)
				}
			}
		})
	}
}

// scriptedEviction answers AdmitPod with the next of its answers.
type scriptedEviction struct {
	answers []error // nil: admit
	calls   int
}

func (s *scriptedEviction) AdmitPod(context.Context, *evictionv1.AdmitPodRequest, ...grpc.CallOption) (*evictionv1.AdmitPodResponse, error) {
	err := s.answers[min(s.calls, len(s.answers)-1)]
	s.calls++
	if err != nil {
		return nil, err
	}
	return &evictionv1.AdmitPodResponse{Admit: true}, nil
}

// TestEvictionCheckAsksAgainLater: after a failed call, no call for evictionRetry; then
// calls again, and an answer ends the pause.
func TestEvictionCheckAsksAgainLater(t *testing.T) {
	path := filepath.Join(t.TempDir(), "eviction.sock")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	clk := clocktesting.NewFakeClock(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))
	rt := &scriptedEviction{answers: []error{status.Error(codes.Unavailable, "connection refused"), nil, nil}}
	e := &evictionCheck{socket: path, client: rt, clk: clk}
	pod := newPod("p", 1)

	r, why := e.verdict(pod)
	if !r.Admit || why != "unitlet-eviction did not answer at 2026-05-01T12:00:00Z (Unavailable: connection refused)" || rt.calls != 1 {
		t.Errorf("failed call: admit %v, %q after %d calls", r.Admit, why, rt.calls)
	}
	clk.Step(evictionRetry - time.Second)
	r, why = e.verdict(pod)
	if !r.Admit || !strings.HasPrefix(why, "unitlet-eviction did not answer at 2026-05-01T12:00:00Z (Unavailable: connection refused); podsync asks again from 2026-05-01T12:00:10Z") || rt.calls != 1 {
		t.Errorf("within the pause: admit %v, %q after %d calls, want no call", r.Admit, why, rt.calls)
	}
	clk.Step(time.Second)
	if r, why = e.verdict(pod); !r.Admit || why != "" || rt.calls != 2 {
		t.Errorf("after the pause: admit %v, %q after %d calls, want a call and its verdict", r.Admit, why, rt.calls)
	}
	if r, why = e.verdict(pod); why != "" || rt.calls != 3 {
		t.Errorf("after an answer: %q after %d calls, want a call each time", why, rt.calls)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	if r, why = e.verdict(pod); !r.Admit || !strings.HasPrefix(why, "unitlet-eviction is not running (no socket at ") || rt.calls != 3 {
		t.Errorf("without the socket: admit %v, %q after %d calls, want no call", r.Admit, why, rt.calls)
	}
}

// TestRunningPodsAreNotTurnedAwayForPressureAfterARestart: after a restart of podsync, a pod
// the runtime already runs is admitted again without asking unitlet-eviction, which would
// refuse it under pressure; a new pod is asked, and refused.
func TestRunningPodsAreNotTurnedAwayForPressureAfterARestart(t *testing.T) {
	ev := &fakeEviction{refuse: map[string]string{"was-running": diskPressure, "new": diskPressure}}
	f := evictionFixture(t, serveEviction(t, socketDir(t), ev))
	old := newPod("was-running", 1)
	sb := f.cri.addSandbox(t, old, true, 1)
	f.cri.addContainer(t, old, "app", "busybox", sb, runtimeapi.ContainerState_CONTAINER_RUNNING, 1)
	r := relist.New(f.cri, time.Second, f.clk, nil, slog.New(slog.NewTextHandler(io.Discard, nil)), f.s.RuntimeChanged)
	if err := r.Relist(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.s.Attach(f.m, r)
	f.s.SetPods("api", []*corev1.Pod{old, newPod("new", 2)})

	l := waitListed(t, f.s, "the new pod refused", func(l map[string]*podsyncv1.Pod) bool { return l["new"] != nil && l["new"].Terminated })
	if st := podStatus(t, l["new"]); st.Reason != "Evicted" {
		t.Errorf("new: reason %q, want Evicted", st.Reason)
	}
	if !f.m.Known(old.UID) {
		t.Error("the pod the runtime runs was not admitted again")
	}
	if got := ev.askedAbout(); !slices.Equal(got, []string{"new"}) {
		t.Errorf("eviction was asked about %v, want only the new pod", got)
	}
}
