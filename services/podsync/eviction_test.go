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

// TestEvictionUnavailable: while unitlet-eviction's socket is there but nothing answers,
// a pod that is not critical is held (neither admitted nor refused, no worker, a
// WaitingForEvictionCheck event saying why), a critical one is admitted with an
// AdmittedWithoutEvictionCheck event; without the socket (no unitlet-eviction on the node)
// pods are admitted with that event. After a failed call none is made for a while, so a
// burst of pods waits for one call's deadline, not one per pod.
func TestEvictionUnavailable(t *testing.T) {
	for _, tc := range []struct {
		name      string
		socket    func(t *testing.T, dir string) string
		wantEvent string
		wantWait  bool // the first pod waits for the call's deadline
		wantHeld  bool
	}{
		{"no socket", func(_ *testing.T, dir string) string { return filepath.Join(dir, "eviction.sock") }, "unitlet-eviction is not running (no socket at ", false, false},
		{"nobody listens", staleSocket, "unitlet-eviction did not answer at ", true, true},
		{"hung", hungSocket, "unitlet-eviction did not answer at ", true, true},
		{"an eviction without AdmitPod", func(t *testing.T, dir string) string { return serveEviction(t, dir, nil) }, "unitlet-eviction did not answer at ", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := evictionFixture(t, tc.socket(t, socketDir(t)))
			var pods []*corev1.Pod
			for i := range 20 {
				pods = append(pods, newPod(fmt.Sprintf("p%02d", i), int64(i)))
			}
			critical := staticPod("static", 100)
			start := time.Now()
			f.s.SetPods("api", pods)
			f.s.SetPods("file", []*corev1.Pod{critical})
			took := time.Since(start)
			if took > 3*time.Second || tc.wantWait && took < evictionTimeout/2 {
				t.Errorf("admitting 21 pods took %s, want about one call's deadline (%s) at most", took, evictionTimeout)
			}
			l := waitListed(t, f.s, "the static pod running", func(l map[string]*podsyncv1.Pod) bool { return running(t, l["static"]) })
			if evs := f.events.of("static"); !hasEvent(evs, "Normal AdmittedWithoutEvictionCheck: Admitted without a node-pressure check: "+tc.wantEvent) {
				t.Errorf("static: events %q, want AdmittedWithoutEvictionCheck saying %q", evs, tc.wantEvent)
			}
			if !tc.wantHeld {
				waitListed(t, f.s, "every pod running", func(l map[string]*podsyncv1.Pod) bool {
					for _, p := range pods {
						if !running(t, l[p.Name]) {
							return false
						}
					}
					return true
				})
				for _, p := range pods {
					if evs := f.events.of(p.Name); !hasEvent(evs, "Normal AdmittedWithoutEvictionCheck: Admitted without a node-pressure check: "+tc.wantEvent) {
						t.Errorf("%s: events %q, want AdmittedWithoutEvictionCheck saying %q", p.Name, evs, tc.wantEvent)
					}
				}
				return
			}
			for _, p := range pods {
				if l[p.Name] != nil || f.m.Known(p.UID) {
					t.Errorf("%s: listed %v, worker %v; want it held: neither admitted nor refused", p.Name, l[p.Name] != nil, f.m.Known(p.UID))
				}
				evs := f.events.of(p.Name)
				want := "Warning WaitingForEvictionCheck: Not admitted yet: waiting for unitlet-eviction's node-pressure verdict: " + tc.wantEvent
				if !hasEvent(evs, want) || len(evs) != 1 || !strings.Contains(evs[0], "the pod is refused at ") {
					t.Errorf("%s: events %q, want one WaitingForEvictionCheck saying %q and when the pod is refused", p.Name, evs, want)
				}
			}
			if got := f.cri.podsOf(); !slices.Equal(got, []string{"static"}) {
				t.Errorf("the runtime has %v, want the static pod only", got)
			}
		})
	}
}

// scriptedEviction answers AdmitPod with the next of its answers.
type scriptedEviction struct {
	mu      sync.Mutex
	answers []error // nil: admit
	calls   int
	asked   []string
}

func (s *scriptedEviction) AdmitPod(_ context.Context, req *evictionv1.AdmitPodRequest, _ ...grpc.CallOption) (*evictionv1.AdmitPodResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var p corev1.Pod
	if err := json.Unmarshal(req.GetPod(), &p); err != nil {
		return nil, err
	}
	err := s.answers[min(s.calls, len(s.answers)-1)]
	s.calls++
	if err != nil {
		return nil, err
	}
	s.asked = append(s.asked, p.Name)
	return &evictionv1.AdmitPodResponse{Admit: true}, nil
}

func (s *scriptedEviction) answered() (calls int, asked []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls, slices.Clone(s.asked)
}

// fakeSocket is a file where the eviction check looks for unitlet-eviction's socket.
func fakeSocket(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "eviction.sock")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

var unavailable = status.Error(codes.Unavailable, "connection refused")

// TestEvictionCheckAsksAgainLater: after a failed call, no call for evictionRetry; then
// calls again, and an answer ends the pause and the hold.
func TestEvictionCheckAsksAgainLater(t *testing.T) {
	path := fakeSocket(t)
	clk := clocktesting.NewFakeClock(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))
	rt := &scriptedEviction{answers: []error{unavailable, nil, nil}}
	e := &evictionCheck{socket: path, client: rt, clk: clk}
	pod := newPod("p", 1)

	v := e.verdict(pod)
	if !v.hold || v.eventType != corev1.EventTypeWarning || v.eventReason != "WaitingForEvictionCheck" ||
		v.event != "Not admitted yet: waiting for unitlet-eviction's node-pressure verdict: unitlet-eviction did not answer at 2026-05-01T12:00:00Z (Unavailable: connection refused); the pod is refused at 2026-05-01T12:05:00Z without one" || rt.calls != 1 {
		t.Errorf("failed call: %+v after %d calls, want the pod held with the event", v, rt.calls)
	}
	clk.Step(evictionRetry - time.Second)
	if v = e.verdict(pod); !v.hold || v.event != "" || rt.calls != 1 {
		t.Errorf("within the pause: %+v after %d calls, want no call, held, no second event", v, rt.calls)
	}
	clk.Step(time.Second)
	if v = e.verdict(pod); v.hold || !v.result.Admit || v.event != "" || rt.calls != 2 || e.isHeld(pod.UID) {
		t.Errorf("after the pause: %+v after %d calls, want a call and its verdict, the hold over", v, rt.calls)
	}
	if v = e.verdict(pod); !v.result.Admit || rt.calls != 3 {
		t.Errorf("after an answer: %+v after %d calls, want a call each time", v, rt.calls)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	if v = e.verdict(pod); !v.result.Admit || v.hold || v.eventReason != "AdmittedWithoutEvictionCheck" ||
		!strings.HasPrefix(v.event, "Admitted without a node-pressure check: unitlet-eviction is not running (no socket at ") || rt.calls != 3 {
		t.Errorf("without the socket: %+v after %d calls, want admitted without a call, with the event", v, rt.calls)
	}
}

// TestEvictionCheckCriticalPods: while unitlet-eviction does not answer, critical pods
// (static, mirror, system-critical priority) are admitted, as the kubelet's eviction
// manager admits them under any pressure; a pod of lower priority is held.
func TestEvictionCheckCriticalPods(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))
	e := &evictionCheck{socket: fakeSocket(t), client: &scriptedEviction{answers: []error{unavailable}}, clk: clk}
	high, low := int32(2000000000), int32(1999999999)
	mirror := newPod("mirror", 1)
	mirror.Annotations = map[string]string{"kubernetes.io/config.mirror": "hash"}
	api := newPod("api-source", 1)
	api.Annotations = map[string]string{"kubernetes.io/config.source": "api"}
	for _, tc := range []struct {
		pod  *corev1.Pod
		held bool
	}{
		{staticPod("static", 1), false},
		{mirror, false},
		{func() *corev1.Pod { p := newPod("system", 1); p.Spec.Priority = &high; return p }(), false},
		{func() *corev1.Pod { p := newPod("high", 1); p.Spec.Priority = &low; return p }(), true},
		{api, true},
	} {
		v := e.verdict(tc.pod)
		if v.hold != tc.held || !tc.held && (!v.result.Admit || !strings.HasSuffix(v.event, "; a critical pod is admitted under any node pressure")) {
			t.Errorf("%s: %+v, want held %v (else admitted with the event)", tc.pod.Name, v, tc.held)
		}
	}
}

// TestEvictionHoldEndsWithTheVerdict: pods held while unitlet-eviction does not answer are
// asked about again after evictionRetry and get its verdict, in creation order; a held pod
// that goes away is forgotten.
func TestEvictionHoldEndsWithTheVerdict(t *testing.T) {
	rt := &scriptedEviction{answers: []error{unavailable, nil}}
	f := newServiceFixture(t, 0, func(o *ServiceOptions) { o.EvictionSocket, o.Eviction = fakeSocket(t), rt })
	second, first, gone := newPod("second", 2), newPod("first", 1), newPod("gone", 3)
	f.s.SetPods("api", []*corev1.Pod{second, first, gone})
	if l := listed(f.s); len(l) != 0 || f.m.Known(first.UID) {
		t.Fatalf("listed %v while eviction does not answer, want every pod held", l)
	}
	// A held pod is still wanted: what the runtime has of it (an earlier podsync may have
	// run it) is neither removed nor killed in its cgroup.
	if f.s.RuntimeRemovable()(first.UID) || !f.s.ActiveOrHeld()[first.UID] {
		t.Error("a held pod is removable from the runtime, or its cgroup not kept")
	}
	f.s.SetPods("api", []*corev1.Pod{second, first})
	f.s.mu.Lock()
	if f.s.eviction.isHeld(gone.UID) {
		t.Error("a held pod that went away is still held")
	}
	f.s.mu.Unlock()
	f.clk.Step(evictionRetry)
	waitListed(t, f.s, "both pods running", func(l map[string]*podsyncv1.Pod) bool { return running(t, l["first"]) && running(t, l["second"]) })
	if calls, asked := rt.answered(); calls != 3 || !slices.Equal(asked, []string{"first", "second"}) {
		t.Errorf("%d calls, answered about %v; want 3 (one failed), first then second", calls, asked)
	}
	for _, name := range []string{"first", "second"} {
		evs := f.events.of(name)
		if n := len(slices.DeleteFunc(slices.Clone(evs), func(e string) bool { return !strings.HasPrefix(e, "Warning WaitingForEvictionCheck") })); n != 1 {
			t.Errorf("%s: events %q, want one WaitingForEvictionCheck", name, evs)
		}
	}
}

// TestEvictionHoldEndsRefused: a pod held for evictionHold without an answer is refused
// with the kubelet's UnexpectedAdmissionError, never runs, and is not asked about again.
func TestEvictionHoldEndsRefused(t *testing.T) {
	rt := &scriptedEviction{answers: []error{unavailable}}
	f := newServiceFixture(t, 0, func(o *ServiceOptions) { o.EvictionSocket, o.Eviction = fakeSocket(t), rt })
	f.s.SetPods("api", []*corev1.Pod{newPod("p", 1)})
	for waited := time.Duration(0); waited < evictionHold; waited += evictionRetry {
		if l := listed(f.s); l["p"] != nil {
			t.Fatalf("after %s: listed %v, want the pod held for %s", waited, l["p"], evictionHold)
		}
		before, _ := rt.answered()
		f.clk.Step(evictionRetry)
		deadline := time.Now().Add(10 * time.Second)
		for calls, _ := rt.answered(); calls == before; calls, _ = rt.answered() {
			if time.Now().After(deadline) {
				t.Fatalf("after %s: no call since the hold began %d calls ago", waited+evictionRetry, before)
			}
			time.Sleep(time.Millisecond)
		}
	}
	l := waitListed(t, f.s, "p refused", func(l map[string]*podsyncv1.Pod) bool { return l["p"] != nil && l["p"].Terminated })
	st := podStatus(t, l["p"])
	want := "Pod was rejected: unitlet-eviction gave no node-pressure verdict in 5m0s: unitlet-eviction did not answer at "
	if st.Phase != corev1.PodFailed || st.Reason != "UnexpectedAdmissionError" || !strings.HasPrefix(st.Message, want) {
		t.Errorf("status %s %q %q, want Failed, UnexpectedAdmissionError, %q...", st.Phase, st.Reason, st.Message, want)
	}
	if f.m.Known("uid-p") || len(f.cri.podsOf()) != 0 {
		t.Error("the refused pod got a worker or reached the runtime")
	}
	calls, _ := rt.answered()
	f.clk.Step(2 * evictionRetry)
	time.Sleep(50 * time.Millisecond)
	if again, _ := rt.answered(); again != calls {
		t.Errorf("%d calls after the refusal, want none", again-calls)
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
