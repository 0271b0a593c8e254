package nodeshutdown

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	v1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/unitlet/unitlet/shared/checkpoint"
)

// fakeLogind is logind as the manager sees it: the test sends PrepareForShutdown and
// watches the inhibitors taken and released.
type fakeLogind struct {
	mu        sync.Mutex
	delay     time.Duration
	preparing bool
	signals   chan bool
	taken     int
	released  int
	held      bool
	// releasedAt is when the last inhibitor was released.
	releasedAt time.Time
}

type fakeLock struct{ l *fakeLogind }

func (f fakeLock) Close() error {
	f.l.mu.Lock()
	defer f.l.mu.Unlock()
	if !f.l.held {
		return errors.New("released twice")
	}
	f.l.held, f.l.released, f.l.releasedAt = false, f.l.released+1, time.Now()
	return nil
}

func (l *fakeLogind) InhibitDelayMax() (time.Duration, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.delay, nil
}

func (l *fakeLogind) PreparingForShutdown() (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.preparing, nil
}

func (l *fakeLogind) Inhibit() (io.Closer, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.preparing {
		return nil, errors.New("org.freedesktop.login1.OperationInProgress: The operation inhibition has been requested for is already running")
	}
	if l.held {
		return nil, errors.New("test: a second inhibitor while one is held")
	}
	l.held, l.taken = true, l.taken+1
	return fakeLock{l}, nil
}

func (l *fakeLogind) ShutdownSignals() (<-chan bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.signals, nil
}

func (l *fakeLogind) Close() error { return nil }

func (l *fakeLogind) state() (taken, released int, held bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.taken, l.released, l.held
}

// fakePods are running pods; each ends (stopped, its final status in the API) after its
// own delay once it is stopped (never, when negative).
type fakePods struct {
	mu      sync.Mutex
	pods    []*corev1.Pod
	endsIn  map[types.UID]time.Duration
	ended   map[types.UID]bool
	stopped []stopCall
}

type stopCall struct {
	uid              types.UID
	grace            int64
	reason, message  string
	at               time.Time
	activeOthersLeft []types.UID
}

func newFakePods(pods ...*corev1.Pod) *fakePods {
	return &fakePods{pods: pods, endsIn: map[types.UID]time.Duration{}, ended: map[types.UID]bool{}}
}

func (f *fakePods) ActivePods() []*corev1.Pod {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*corev1.Pod
	for _, p := range f.pods {
		if !f.ended[p.UID] {
			out = append(out, p)
		}
	}
	return out
}

func (f *fakePods) Ended(uid types.UID) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ended[uid]
}

func (f *fakePods) Shutdown(uid types.UID, grace int64, reason, message string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	var others []types.UID
	for _, p := range f.pods {
		if p.UID != uid && !f.ended[p.UID] {
			others = append(others, p.UID)
		}
	}
	f.stopped = append(f.stopped, stopCall{uid: uid, grace: grace, reason: reason, message: message, at: time.Now(), activeOthersLeft: others})
	d := f.endsIn[uid]
	switch {
	case d == 0:
		f.ended[uid] = true
	case d > 0:
		time.AfterFunc(d, func() {
			f.mu.Lock()
			f.ended[uid] = true
			f.mu.Unlock()
		})
	}
	return true
}

// add makes pod active, as a pod source delivering it after a restart does.
func (f *fakePods) add(p *corev1.Pod) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pods = append(f.pods, p)
}

func (f *fakePods) calls() []stopCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.stopped)
}

type fakeEvents struct {
	mu     sync.Mutex
	events []string
}

func (e *fakeEvents) NodeEvent(eventType, reason, message string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.events = append(e.events, eventType+" "+reason+": "+message)
}

func (e *fakeEvents) list() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.events)
}

// syncBuffer is a log destination safe for the manager's goroutine and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func pod(name string, priority *int32, grace *int64) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID(name)},
		Spec:       corev1.PodSpec{Priority: priority, TerminationGracePeriodSeconds: grace},
	}
}

type rig struct {
	m      *Manager
	logind *fakeLogind
	pods   *fakePods
	events *fakeEvents
	log    *syncBuffer
	dials  chan struct{}
	cancel context.CancelFunc
	done   chan struct{}
}

// start runs a manager over groups and pods against a fake logind whose
// InhibitDelayMaxSec is delay.
func start(t *testing.T, groups []Group, pods *fakePods, logind *fakeLogind, opts ...func(*Options)) *rig {
	t.Helper()
	r := &rig{logind: logind, pods: pods, events: &fakeEvents{}, log: &syncBuffer{}, dials: make(chan struct{}, 10), done: make(chan struct{})}
	o := Options{
		Groups: groups,
		Dial: func() (Logind, error) {
			r.dials <- struct{}{}
			return logind, nil
		},
		Events: r.events, Clock: clock.RealClock{},
		Log:   slog.New(slog.NewTextHandler(r.log, nil)),
		Poll:  5 * time.Millisecond,
		Retry: 10 * time.Millisecond,
		Sweep: 20 * time.Millisecond,
	}
	for _, f := range opts {
		f(&o)
	}
	r.m = New(o)
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() {
		defer close(r.done)
		if err := r.m.Follow(pods)(ctx); err != nil {
			t.Errorf("Follow: %v", err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-r.done
	})
	return r
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

type kubeletConfig = v1beta1.KubeletConfiguration

// byPriority is shutdownGracePeriodByPodPriority from priority, seconds pairs.
func byPriority(pairs ...int64) []v1beta1.ShutdownGracePeriodByPodPriority {
	var out []v1beta1.ShutdownGracePeriodByPodPriority
	for i := 0; i+1 < len(pairs); i += 2 {
		out = append(out, v1beta1.ShutdownGracePeriodByPodPriority{Priority: int32(pairs[i]), ShutdownGracePeriodSeconds: pairs[i+1]})
	}
	return out
}

func newLogind(delay time.Duration) *fakeLogind {
	return &fakeLogind{delay: delay, signals: make(chan bool, 1)}
}

// TestGroupsFromConfiguration: shutdownGracePeriod and shutdownGracePeriodCriticalPods
// split at the critical priority as the kubelet splits them; shutdownGracePeriodByPodPriority
// is taken as given, lowest priority first; nothing set is no shutdown handling.
func TestGroupsFromConfiguration(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(*kubeletConfig)
		want []Group
	}{
		{"off", func(*kubeletConfig) {}, nil},
		{"the critical split", func(c *kubeletConfig) {
			c.ShutdownGracePeriod.Duration, c.ShutdownGracePeriodCriticalPods.Duration = 30*time.Second, 10*time.Second
		}, []Group{{0, 20 * time.Second}, {SystemCriticalPriority, 10 * time.Second}}},
		{"no time for critical pods", func(c *kubeletConfig) { c.ShutdownGracePeriod.Duration = 30 * time.Second },
			[]Group{{0, 30 * time.Second}, {SystemCriticalPriority, 0}}},
		{"whole seconds", func(c *kubeletConfig) {
			c.ShutdownGracePeriod.Duration, c.ShutdownGracePeriodCriticalPods.Duration = 30*time.Second+600*time.Millisecond, 10*time.Second
		}, []Group{{0, 20 * time.Second}, {SystemCriticalPriority, 10 * time.Second}}},
		{"by priority, sorted", func(c *kubeletConfig) {
			c.ShutdownGracePeriodByPodPriority = byPriority(100000, 10, 2000000000, 5, 0, 20)
		}, []Group{{0, 20 * time.Second}, {100000, 10 * time.Second}, {2000000000, 5 * time.Second}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c kubeletConfig
			tc.set(&c)
			if got := Groups(&c); !slices.Equal(got, tc.want) {
				t.Errorf("groups %v, want %v", got, tc.want)
			}
		})
	}
}

// TestPodsGoToTheirGroups: a pod joins the group with the highest priority not above its
// own; a pod below every group joins the first; no priority is 0.
func TestPodsGoToTheirGroups(t *testing.T) {
	groups := []Group{{Priority: 10}, {Priority: 100}, {Priority: 1000}}
	for _, tc := range []struct {
		prio *int32
		want int
	}{{nil, 0}, {ptr.To[int32](-5), 0}, {ptr.To[int32](10), 0}, {ptr.To[int32](99), 0}, {ptr.To[int32](100), 1}, {ptr.To[int32](999), 1}, {ptr.To[int32](1000), 2}, {ptr.To[int32](2000000001), 2}} {
		if got := podGroup(groups, pod("p", tc.prio, nil)); got != tc.want {
			t.Errorf("priority %v: group %d, want %d", ptr.Deref(tc.prio, 0), got, tc.want)
		}
	}
}

// TestShutdownEndsPodsByPriorityWithinBudgets: the critical/non-critical split. The
// inhibitor is taken at start. On PrepareForShutdown(true) the ordinary pods are stopped
// first with their group's budget (or their own grace period when shorter), the critical
// ones only once the ordinary group ended or its budget ran out, each with the kubelet's
// reason and message; the inhibitor is released only after the last group; meanwhile the
// node reports shutting down and refuses new pods.
func TestShutdownEndsPodsByPriorityWithinBudgets(t *testing.T) {
	crit := ptr.To[int32](SystemCriticalPriority)
	pods := newFakePods(
		pod("web", nil, ptr.To[int64](30)),        // never ends: its group's budget runs out
		pod("batch", ptr.To[int32](5), nil),       // ends at once
		pod("quick", nil, ptr.To[int64](0)),       // its own grace period is shorter
		pod("dns", crit, ptr.To[int64](30)),       // critical
		pod("node-agent", crit, ptr.To[int64](1)), // critical, ends after 100 ms
	)
	pods.endsIn["web"] = -1
	pods.endsIn["node-agent"] = 100 * time.Millisecond
	// The kubelet's split of 2 s with 1 s for critical pods (budgets in seconds).
	groups := []Group{{0, time.Second}, {SystemCriticalPriority, time.Second}}
	logind := newLogind(time.Hour)
	r := start(t, groups, pods, logind)

	eventually(t, "the inhibitor taken", func() bool { _, _, held := logind.state(); return held })
	if r.m.ShuttingDown() {
		t.Fatalf("shutting down before logind said so")
	}
	if ok, _, _ := r.m.Admit(); !ok {
		t.Fatalf("a pod refused before the shutdown")
	}
	began := time.Now()
	logind.signals <- true
	eventually(t, "the node shutting down", r.m.ShuttingDown)
	if ok, reason, msg := r.m.Admit(); ok || reason != "NodeShutdown" || msg != "Pod was rejected as the node is shutting down." {
		t.Errorf("admission during shutdown: %t %q %q, want refused with NodeShutdown and the kubelet's message", ok, reason, msg)
	}
	eventually(t, "the inhibitor released", func() bool { _, released, _ := logind.state(); return released == 1 })
	logind.mu.Lock()
	releasedAt := logind.releasedAt
	logind.mu.Unlock()

	calls := pods.calls()
	var order []string
	at := map[types.UID]stopCall{}
	for _, c := range calls {
		order = append(order, string(c.uid))
		at[c.uid] = c
		if c.reason != "Terminated" || c.message != "Pod was terminated in response to imminent node shutdown." {
			t.Errorf("%s stopped with %q %q, want the kubelet's Terminated and message", c.uid, c.reason, c.message)
		}
	}
	if len(calls) != 5 {
		t.Fatalf("stops %v, want all 5 pods", order)
	}
	for _, c := range calls[:3] {
		if c.uid == "dns" || c.uid == "node-agent" {
			t.Errorf("stop order %v: a critical pod before the ordinary ones", order)
		}
	}
	for uid, want := range map[types.UID]int64{"web": 1, "batch": 1, "quick": 0, "dns": 1, "node-agent": 1} {
		if got := at[uid].grace; got != want {
			t.Errorf("%s stopped with grace %d, want %d", uid, got, want)
		}
	}
	// The critical group starts when the ordinary group's budget ran out (web never ended).
	if d := at["dns"].at.Sub(at["web"].at); d < 950*time.Millisecond || d > 1500*time.Millisecond {
		t.Errorf("critical pods stopped %v after the ordinary ones, want the ordinary group's budget (1 s)", d)
	}
	// And the inhibitor goes once the critical pods ended (100 ms), not at their budget.
	if d := releasedAt.Sub(at["dns"].at); d < 90*time.Millisecond || d > 800*time.Millisecond {
		t.Errorf("inhibitor released %v after the critical pods were stopped, want once they ended (~100 ms)", d)
	}
	if d := releasedAt.Sub(began); d > 2*time.Second+500*time.Millisecond {
		t.Errorf("shutdown took %v, more than the budgets' 2 s", d)
	}
	if taken, _, _ := logind.state(); taken != 1 {
		t.Errorf("%d inhibitors taken, want 1", taken)
	}
	if ev := r.events.list(); !slices.Contains(ev, "Normal Shutdown: Shutdown manager detected shutdown event") {
		t.Errorf("node events %v, want the kubelet's Shutdown event", ev)
	}
	if !r.m.ShuttingDown() {
		t.Errorf("no longer shutting down after the pods ended; the kubelet stays so until a cancellation")
	}
}

// TestShutdownByPodPriority: shutdownGracePeriodByPodPriority's groups go lowest priority
// first, each waiting for its pods; an empty group costs nothing.
func TestShutdownByPodPriority(t *testing.T) {
	pods := newFakePods(
		pod("critical", ptr.To[int32](2000000000), nil),
		pod("high", ptr.To[int32](100000), nil),
		pod("low-a", ptr.To[int32](-10), nil),
		pod("low-b", nil, nil),
		pod("mid", ptr.To[int32](1000), nil),
	)
	for _, p := range pods.pods {
		pods.endsIn[p.UID] = 50 * time.Millisecond
	}
	groups := Groups(&kubeletConfig{ShutdownGracePeriodByPodPriority: byPriority(2000000000, 3, 0, 3, 1000, 3, 100000, 3, 50000, 3)})
	logind := newLogind(time.Hour)
	start(t, groups, pods, logind)
	eventually(t, "the inhibitor taken", func() bool { _, _, held := logind.state(); return held })
	logind.signals <- true
	eventually(t, "the inhibitor released", func() bool { _, released, _ := logind.state(); return released == 1 })

	calls := pods.calls()
	rank := map[types.UID]int{"low-a": 0, "low-b": 0, "mid": 1, "high": 2, "critical": 3}
	for i := 1; i < len(calls); i++ {
		if rank[calls[i].uid] < rank[calls[i-1].uid] {
			t.Errorf("%s stopped after %s", calls[i].uid, calls[i-1].uid)
		}
		if rank[calls[i].uid] > rank[calls[i-1].uid] {
			// A group starts only once the one before ended: nothing of lower rank is left.
			for _, uid := range calls[i].activeOthersLeft {
				if rank[uid] < rank[calls[i].uid] {
					t.Errorf("%s stopped while %s of a lower group still ran", calls[i].uid, uid)
				}
			}
		}
		if calls[i].grace != 3 {
			t.Errorf("%s stopped with grace %d, want its group's 3", calls[i].uid, calls[i].grace)
		}
	}
	if len(calls) != 5 {
		t.Errorf("%d pods stopped, want 5", len(calls))
	}
	if total := calls[len(calls)-1].at.Sub(calls[0].at); total > 2*time.Second {
		t.Errorf("groups took %v, want each to end when its pods did (~50 ms each)", total)
	}
}

// TestShutdownCancelled: PrepareForShutdown(false) ends the shutdown state, records the
// kubelet's cancellation event and takes a new inhibitor.
func TestShutdownCancelled(t *testing.T) {
	logind := newLogind(time.Hour)
	r := start(t, []Group{{0, time.Second}}, newFakePods(), logind)
	eventually(t, "the inhibitor taken", func() bool { _, _, held := logind.state(); return held })
	logind.signals <- true
	eventually(t, "the inhibitor released", func() bool { _, released, _ := logind.state(); return released == 1 })
	logind.signals <- false
	eventually(t, "a new inhibitor", func() bool { taken, _, held := logind.state(); return taken == 2 && held })
	if r.m.ShuttingDown() {
		t.Errorf("still shutting down after the cancellation")
	}
	if ev := r.events.list(); !slices.Contains(ev, "Normal Shutdown: Shutdown manager detected shutdown cancellation") {
		t.Errorf("node events %v, want the kubelet's cancellation event", ev)
	}
}

// TestRestartDuringShutdown: podsync restarted while the machine shuts down (logind's
// PreparingForShutdown is true) takes no inhibitor, which logind would refuse anyway, and
// ends the pods it has at once, refusing new ones; the pods it learns of later (the pod
// sources deliver the running pods after the first round) are ended too, once each.
func TestRestartDuringShutdown(t *testing.T) {
	logind := newLogind(time.Hour)
	logind.preparing = true
	pods := newFakePods(pod("a", nil, nil), pod("b", ptr.To[int32](SystemCriticalPriority), nil))
	r := start(t, []Group{{0, time.Second}, {SystemCriticalPriority, time.Second}}, pods, logind)
	eventually(t, "the pods stopped", func() bool { return len(pods.calls()) == 2 })
	if c := pods.calls(); c[0].uid != "a" || c[1].uid != "b" {
		t.Errorf("stop order %s, %s: want the ordinary pod first", c[0].uid, c[1].uid)
	}
	if !r.m.ShuttingDown() {
		t.Errorf("not shutting down")
	}
	if ok, _, _ := r.m.Admit(); ok {
		t.Errorf("a new pod admitted during the shutdown")
	}
	if taken, _, _ := logind.state(); taken != 0 {
		t.Errorf("%d inhibitors taken during a shutdown", taken)
	}
	if !strings.Contains(r.log.String(), "already shutting down") {
		t.Errorf("log %q, want it to say the node is already shutting down", r.log.String())
	}
	pods.add(pod("late", nil, nil))
	eventually(t, "the pod delivered later stopped", func() bool { return len(pods.calls()) == 3 })
	if c := pods.calls(); c[2].uid != "late" || c[2].reason != ReasonTerminated {
		t.Errorf("third stop %+v, want the late pod with the kubelet's reason", c[2])
	}
	time.Sleep(100 * time.Millisecond) // several sweeps
	if n := len(pods.calls()); n != 3 {
		t.Errorf("%d stops, want each pod stopped once", n)
	}
}

// TestInhibitDelayMaxSecTooShort: an InhibitDelayMaxSec shorter than the budgets is
// reported in the log and as a Node Warning event naming the setting, the field and the
// fix; the inhibitor is still taken (a short delay is better than none). A long enough one
// is not reported.
func TestInhibitDelayMaxSecTooShort(t *testing.T) {
	groups := []Group{{0, 20 * time.Second}, {SystemCriticalPriority, 10 * time.Second}}
	logind := newLogind(5 * time.Second)
	r := start(t, groups, newFakePods(), logind)
	eventually(t, "the inhibitor taken", func() bool { _, _, held := logind.state(); return held })
	want := "Warning InhibitDelayMaxSecTooShort: logind's InhibitDelayMaxSec (5s) is shorter than the node's shutdown grace period " +
		"(shutdownGracePeriod, or the sum of shutdownGracePeriodByPodPriority: 30s)"
	if ev := r.events.list(); len(ev) != 1 || !strings.HasPrefix(ev[0], want) || !strings.Contains(ev[0], "InhibitDelayMaxSec=30 in a drop-in in /etc/systemd/logind.conf.d/") {
		t.Errorf("events %q, want one starting %q and saying what to set", ev, want)
	}
	if log := r.log.String(); !strings.Contains(log, "level=ERROR") || !strings.Contains(log, "InhibitDelayMaxSec=5s") || !strings.Contains(log, "shutdownGracePeriod=30s") {
		t.Errorf("log %q, want an error naming InhibitDelayMaxSec and shutdownGracePeriod", log)
	}
	if got := r.m.DelayShort(); got != 5*time.Second {
		t.Errorf("DelayShort %v, want 5s", got)
	}

	ok := newLogind(30 * time.Second)
	r2 := start(t, groups, newFakePods(), ok)
	eventually(t, "the inhibitor taken", func() bool { _, _, held := ok.state(); return held })
	if ev := r2.events.list(); len(ev) != 0 {
		t.Errorf("events %q with InhibitDelayMaxSec equal to the budgets, want none", ev)
	}
}

// TestLogindConnectionLost: when the connection to logind ends, the manager connects again
// and takes a new inhibitor (the old one went with the connection).
func TestLogindConnectionLost(t *testing.T) {
	logind := newLogind(time.Hour)
	r := start(t, []Group{{0, time.Second}}, newFakePods(), logind)
	<-r.dials
	eventually(t, "the inhibitor taken", func() bool { _, _, held := logind.state(); return held })
	logind.mu.Lock()
	close(logind.signals)
	logind.signals = make(chan bool, 1)
	logind.mu.Unlock()
	select {
	case <-r.dials:
	case <-time.After(5 * time.Second):
		t.Fatalf("no new connection to logind after the old one ended")
	}
	eventually(t, "a new inhibitor", func() bool { taken, released, held := logind.state(); return taken == 2 && released == 1 && held })
}

// TestShutdownTimesKept: the kubelet's graceful shutdown gauges say when the shutdown began
// and ended, and a manager started after it (the next boot's podsync) reports the same
// from the state kept on disk.
func TestShutdownTimesKept(t *testing.T) {
	store, err := checkpoint.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	logind := newLogind(time.Hour)
	start(t, []Group{{0, time.Second}}, newFakePods(pod("a", nil, nil)), logind, func(o *Options) { o.Registry, o.State = reg, store })
	eventually(t, "the inhibitor taken", func() bool { _, _, held := logind.state(); return held })
	if got := gauges(t, reg); got["kubelet_graceful_shutdown_start_time_seconds"] != 0 || got["kubelet_graceful_shutdown_end_time_seconds"] != 0 {
		t.Errorf("gauges %v before any shutdown, want 0", got)
	}
	before := float64(time.Now().UnixNano()) / 1e9
	logind.signals <- true
	eventually(t, "the inhibitor released", func() bool { _, released, _ := logind.state(); return released == 1 })
	after := float64(time.Now().UnixNano()) / 1e9
	got := gauges(t, reg)
	startAt, endAt := got["kubelet_graceful_shutdown_start_time_seconds"], got["kubelet_graceful_shutdown_end_time_seconds"]
	if startAt < before || endAt < startAt || endAt > after {
		t.Errorf("start %f end %f, want %f <= start <= end <= %f", startAt, endAt, before, after)
	}

	reg2 := prometheus.NewRegistry()
	New(Options{Groups: []Group{{0, time.Second}}, Clock: clock.RealClock{}, Log: slog.New(slog.DiscardHandler), Registry: reg2, State: store})
	if again := gauges(t, reg2); again["kubelet_graceful_shutdown_start_time_seconds"] != startAt || again["kubelet_graceful_shutdown_end_time_seconds"] != endAt {
		t.Errorf("after a restart: %v, want start %f end %f", again, startAt, endAt)
	}
}

func gauges(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			out[mf.GetName()] = m.GetGauge().GetValue()
		}
	}
	return out
}

// TestForNodeOffWhenTheConfigurationGivesNoTime: without shutdownGracePeriod the manager
// admits every pod, never reports a shutdown, keeps no state and registers no gauges, and
// its loop touches no pod and ends with ctx.
func TestForNodeOffWhenTheConfigurationGivesNoTime(t *testing.T) {
	root, reg := t.TempDir(), prometheus.NewRegistry()
	m, err := ForNode(&kubeletConfig{}, root, &fakeEvents{}, clock.RealClock{}, reg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if ok, reason, message := m.Admit(); !ok {
		t.Errorf("Admit = false, %q, %q; want every pod admitted", reason, message)
	}
	if m.ShuttingDown() {
		t.Error("ShuttingDown with graceful node shutdown off")
	}
	if _, err := os.Stat(filepath.Join(root, "nodeshutdown")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the state directory: %v, want none made while off", err)
	}
	if got := gauges(t, reg); len(got) != 0 {
		t.Errorf("gauges %v registered while off, want none", got)
	}
	pods := newFakePods(pod("a", nil, nil))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Follow(pods)(ctx) }()
	select {
	case err := <-done:
		t.Fatalf("the loop ended before ctx did: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("the loop: %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the loop did not end with ctx")
	}
	if got := pods.calls(); len(got) != 0 {
		t.Errorf("pods stopped while off: %v", got)
	}
}

// TestForNodeOnKeepsItsState: with shutdownGracePeriod the manager's groups are the
// configuration's, and the last shutdown's times are kept under the root directory.
func TestForNodeOnKeepsItsState(t *testing.T) {
	root, reg := t.TempDir(), prometheus.NewRegistry()
	kc := &kubeletConfig{}
	kc.ShutdownGracePeriod.Duration, kc.ShutdownGracePeriodCriticalPods.Duration = 30*time.Second, 10*time.Second
	m, err := ForNode(kc, root, &fakeEvents{}, clock.RealClock{}, reg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if want := Groups(kc); !slices.Equal(m.o.Groups, want) {
		t.Errorf("groups %v, want %v", m.o.Groups, want)
	}
	if st, err := os.Stat(filepath.Join(root, "nodeshutdown")); err != nil || !st.IsDir() {
		t.Errorf("the state directory: %v, want it made", err)
	}
	if got := gauges(t, reg); len(got) != 2 {
		t.Errorf("gauges %v, want the two graceful shutdown gauges", got)
	}
}
