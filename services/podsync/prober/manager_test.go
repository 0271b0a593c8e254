package prober

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	testclock "k8s.io/utils/clock/testing"
)

// scriptExecer answers exec probes by the command's first word: the exit code set for
// it (0 by default). It records every call.
type scriptExecer struct {
	mu    sync.Mutex
	codes map[string]int32
	calls []execCall
}

type execCall struct {
	cmd         []string
	containerID string
	timeout     time.Duration
}

func newScriptExecer() *scriptExecer { return &scriptExecer{codes: map[string]int32{}} }

func (f *scriptExecer) ExecSync(_ context.Context, id string, cmd []string, timeout time.Duration) ([]byte, []byte, int32, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, execCall{cmd: cmd, containerID: id, timeout: timeout})
	code := f.codes[cmd[0]]
	return []byte(fmt.Sprintf("%s exit %d", cmd[0], code)), nil, code, nil
}

func (f *scriptExecer) set(cmd string, code int32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.codes[cmd] = code
}

// count is the number of calls of cmd (in containerID, when not "").
func (f *scriptExecer) count(cmd, containerID string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.calls {
		if c.cmd[0] == cmd && (containerID == "" || c.containerID == containerID) {
			n++
		}
	}
	return n
}

type harness struct {
	t   *testing.T
	m   *Manager
	fc  *testclock.FakeClock
	ex  *scriptExecer
	reg *prometheus.Registry

	mu      sync.Mutex
	updates []Result
}

var epoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// newHarness starts a Manager on a fake clock with no first-probe jitter.
func newHarness(t *testing.T) *harness {
	t.Helper()
	h := &harness{t: t, fc: testclock.NewFakeClock(epoch), ex: newScriptExecer(), reg: prometheus.NewRegistry()}
	h.m = NewManager(h.ex, h.fc, h.reg, slog.New(slog.DiscardHandler))
	h.m.jitter = func(time.Duration) time.Duration { return 0 }
	done := make(chan struct{})
	go func() {
		defer close(done)
		for r := range h.m.Updates() {
			h.mu.Lock()
			h.updates = append(h.updates, r)
			h.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		h.m.Stop()
		<-done
	})
	return h
}

func (h *harness) waitFor(what string, cond func() bool) {
	h.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			h.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// settle waits until n workers wait on the clock, i.e. each finished its probe run.
func (h *harness) settle(n int) {
	h.t.Helper()
	h.waitFor(fmt.Sprintf("%d clock waiters (have %d)", n, h.fc.Waiters()), func() bool { return h.fc.Waiters() == n })
}

// tick lets d pass while n workers run.
func (h *harness) tick(d time.Duration, n int) {
	h.t.Helper()
	h.settle(n)
	h.fc.Step(d)
	h.settle(n)
}

// results returns the updates of one kind received so far, as "containerID:true|false".
func (h *harness) results(k Kind) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, r := range h.updates {
		if r.Kind == k {
			out = append(out, fmt.Sprintf("%s:%t", r.ContainerID, r.Success))
		}
	}
	return out
}

// waitResults waits until the updates of kind k are exactly want, then checks they stay so.
func (h *harness) waitResults(k Kind, want ...string) {
	h.t.Helper()
	h.waitFor(fmt.Sprintf("%s updates %v", k, want), func() bool { return len(h.results(k)) >= len(want) })
	time.Sleep(20 * time.Millisecond)
	if got := h.results(k); !slices.Equal(got, want) {
		h.t.Fatalf("%s updates %v, want %v", k, got, want)
	}
}

func testPod(uid string, containers ...corev1.Container) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "pod-" + uid, Namespace: "ns", UID: types.UID(uid)},
		Spec:       corev1.PodSpec{Containers: containers},
	}
}

func execProbe(cmd string, period, delay, success, failure int32) *corev1.Probe {
	return &corev1.Probe{
		ProbeHandler:        corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{cmd}}},
		PeriodSeconds:       period,
		InitialDelaySeconds: delay,
		TimeoutSeconds:      1,
		SuccessThreshold:    success,
		FailureThreshold:    failure,
	}
}

const period = 10 * time.Second

func TestLivenessFailureReportedOncePerContainerID(t *testing.T) {
	h := newHarness(t)
	c := corev1.Container{Name: "app", LivenessProbe: execProbe("live", 10, 0, 1, 3)}
	pod := testPod("u1", c)
	h.ex.set("live", 1)

	h.m.SetContainer(pod, "10.0.0.1", &c, "c1", h.fc.Now())
	h.settle(1)                        // the first probe runs at once
	h.tick(period, 1)                  // second failure
	h.waitResults(Liveness, "c1:true") // below the threshold: still alive
	h.tick(period, 1)                  // third failure: reported
	h.waitResults(Liveness, "c1:true", "c1:false")
	h.tick(period, 1)
	h.tick(period, 1)
	if n := h.ex.count("live", "c1"); n != 3 {
		t.Fatalf("liveness ran %d times in c1, want 3 (on hold after the failure)", n)
	}
	h.waitResults(Liveness, "c1:true", "c1:false")

	// The restarted container is probed again, from a fresh start.
	h.m.SetContainer(pod, "10.0.0.1", &c, "c2", h.fc.Now())
	h.tick(period, 1)
	h.tick(period, 1)
	if n := h.ex.count("live", "c2"); n != 2 {
		t.Fatalf("liveness ran %d times in c2, want 2", n)
	}
	h.waitResults(Liveness, "c1:true", "c1:false", "c2:true")
	h.tick(period, 1)
	h.waitResults(Liveness, "c1:true", "c1:false", "c2:true", "c2:false")
}

func TestReadinessThresholds(t *testing.T) {
	cases := []struct {
		name             string
		success, failure int32
		codes            []int32 // exit code of each successive probe
		ready            []bool  // Ready after each probe
	}{
		{name: "defaults", codes: []int32{0, 1, 1, 1, 0}, ready: []bool{true, true, true, false, true}},
		{name: "success threshold 2", success: 2, failure: 1, codes: []int32{0, 0, 1, 0, 0}, ready: []bool{false, true, false, false, true}},
		{name: "a success breaks a failure streak", success: 1, failure: 2, codes: []int32{0, 1, 0, 1, 1}, ready: []bool{true, true, true, true, false}},
		{name: "never ready", success: 1, failure: 3, codes: []int32{1, 1, 1, 1}, ready: []bool{false, false, false, false}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			c := corev1.Container{Name: "app", ReadinessProbe: execProbe("ready", 10, 0, tc.success, tc.failure)}
			pod := testPod("u1", c)
			if h.m.Ready("u1", "app") {
				t.Fatal("ready before the container was set")
			}
			for i, code := range tc.codes {
				h.ex.set("ready", code)
				if i == 0 {
					h.m.SetContainer(pod, "10.0.0.1", &c, "c1", h.fc.Now())
					h.settle(1)
				} else {
					h.tick(period, 1)
				}
				if got := h.m.Ready("u1", "app"); got != tc.ready[i] {
					t.Fatalf("after probe %d (exit %d): Ready = %t, want %t", i+1, code, got, tc.ready[i])
				}
			}
			if n := h.ex.count("ready", "c1"); n != len(tc.codes) {
				t.Errorf("readiness ran %d times, want %d", n, len(tc.codes))
			}
			// Updates: the initial false, then one per change of Ready.
			want := []string{"c1:false"}
			prev := false
			for _, r := range tc.ready {
				if r != prev {
					want = append(want, fmt.Sprintf("c1:%t", r))
					prev = r
				}
			}
			h.waitResults(Readiness, want...)
		})
	}
}

func TestInitialDelay(t *testing.T) {
	cases := []struct {
		name       string
		delay      int32
		startedAgo time.Duration
		runs       []int // probes run after t=0, 10s, 20s, 30s, 40s
	}{
		{name: "none", delay: 0, runs: []int{1, 2, 3, 4, 5}},
		{name: "5s skips the first tick", delay: 5, runs: []int{0, 1, 2, 3, 4}},
		{name: "25s", delay: 25, runs: []int{0, 0, 0, 1, 2}},
		{name: "25s from a start 20s ago", delay: 25, startedAgo: 20 * time.Second, runs: []int{0, 1, 2, 3, 4}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.fc.Step(time.Hour) // long after the manager started: the container is not a leftover
			c := corev1.Container{Name: "app", LivenessProbe: execProbe("live", 10, tc.delay, 1, 3)}
			h.m.SetContainer(testPod("u1", c), "10.0.0.1", &c, "c1", h.fc.Now().Add(-tc.startedAgo))
			for i, want := range tc.runs {
				if i == 0 {
					h.settle(1)
				} else {
					h.tick(period, 1)
				}
				if n := h.ex.count("live", ""); n != want {
					t.Fatalf("at %ds: %d probes ran, want %d", i*10, n, want)
				}
			}
		})
	}
}

// TestInitialDelayIgnoresWallClockSteps: podsync hands the runtime's StartedAt (a reading
// of the wall clock) again at every sync. After a step back of two minutes, "now −
// StartedAt" is two minutes shorter: the same as StartedAt two minutes later, which the
// test hands. The initial delay still ends 25 s after the start.
func TestInitialDelayIgnoresWallClockSteps(t *testing.T) {
	h := newHarness(t)
	h.fc.Step(time.Hour)
	c := corev1.Container{Name: "app", LivenessProbe: execProbe("live", 10, 25, 1, 3)}
	pod := testPod("u1", c)
	started := h.fc.Now()
	h.m.SetContainer(pod, "10.0.0.1", &c, "c1", started)
	for i, want := range []int{0, 0, 0, 1, 2} {
		if i == 0 {
			h.settle(1)
		} else {
			h.tick(period, 1)
		}
		h.m.SetContainer(pod, "10.0.0.1", &c, "c1", started.Add(2*time.Minute))
		if n := h.ex.count("live", ""); n != want {
			t.Fatalf("at %ds: %d probes ran, want %d", i*10, n, want)
		}
	}
}

func TestStartupGatesLivenessAndReadiness(t *testing.T) {
	h := newHarness(t)
	c := corev1.Container{
		Name:           "app",
		StartupProbe:   execProbe("startup", 10, 0, 1, 30),
		LivenessProbe:  execProbe("live", 10, 0, 1, 3),
		ReadinessProbe: execProbe("ready", 10, 0, 1, 3),
	}
	pod := testPod("u1", c)
	h.ex.set("startup", 1)
	h.m.SetContainer(pod, "10.0.0.1", &c, "c1", h.fc.Now())
	h.settle(3)
	h.tick(period, 3)
	h.tick(period, 3)
	if h.m.Started("u1", "app") || h.m.Ready("u1", "app") {
		t.Fatal("started or ready before the startup probe passed")
	}
	if n := h.ex.count("live", "") + h.ex.count("ready", ""); n != 0 {
		t.Fatalf("liveness/readiness ran %d times before startup passed", n)
	}
	if n := h.ex.count("startup", ""); n != 3 {
		t.Fatalf("startup ran %d times, want 3", n)
	}

	h.ex.set("startup", 0)
	h.tick(period, 3)
	if !h.m.Started("u1", "app") {
		t.Fatal("not started after the startup probe passed")
	}
	// In the tick where startup passed, liveness may have run after it or before it.
	first := h.ex.count("live", "")
	if first > 1 {
		t.Fatalf("liveness ran %d times in the tick startup passed", first)
	}
	h.tick(period, 3)
	h.tick(period, 3)
	if n := h.ex.count("startup", ""); n != 4 {
		t.Errorf("startup ran %d times, want 4 (it stops once passed)", n)
	}
	if n := h.ex.count("live", ""); n != first+2 {
		t.Errorf("liveness ran %d times after startup, want %d", n, first+2)
	}
	if !h.m.Ready("u1", "app") {
		t.Error("not ready after readiness passed")
	}
	h.waitResults(Startup, "c1:true")
}

func TestStartupFailureReportedAndHeld(t *testing.T) {
	h := newHarness(t)
	c := corev1.Container{Name: "app", StartupProbe: execProbe("startup", 10, 0, 1, 2), LivenessProbe: execProbe("live", 10, 0, 1, 3)}
	h.ex.set("startup", 1)
	h.m.SetContainer(testPod("u1", c), "10.0.0.1", &c, "c1", h.fc.Now())
	h.settle(2)
	h.tick(period, 2)
	h.waitResults(Startup, "c1:false")
	h.tick(period, 2)
	h.tick(period, 2)
	if n := h.ex.count("startup", ""); n != 2 {
		t.Errorf("startup ran %d times, want 2 (held after failing)", n)
	}
	if h.m.Started("u1", "app") || h.ex.count("live", "") != 0 {
		t.Error("the container counts as started after its startup probe failed")
	}
}

func TestNewContainerIDResetsReadiness(t *testing.T) {
	h := newHarness(t)
	c := corev1.Container{Name: "app", ReadinessProbe: execProbe("ready", 10, 0, 1, 3)}
	pod := testPod("u1", c)
	h.m.SetContainer(pod, "10.0.0.1", &c, "c1", h.fc.Now())
	h.settle(1)
	if !h.m.Ready("u1", "app") {
		t.Fatal("not ready after a passing probe")
	}
	h.ex.set("ready", 1)
	h.m.SetContainer(pod, "10.0.0.1", &c, "c2", h.fc.Now())
	if h.m.Ready("u1", "app") {
		t.Fatal("a new container instance is ready before it was probed")
	}
	// Readiness of the new instance is probed at once, not at the next tick.
	h.waitFor("a readiness probe of c2", func() bool { return h.ex.count("ready", "c2") == 1 })
	h.ex.set("ready", 0)
	h.tick(period, 1)
	if !h.m.Ready("u1", "app") {
		t.Fatal("c2 not ready after a passing probe")
	}
	h.waitResults(Readiness, "c1:false", "c1:true", "c2:false", "c2:true")
}

func TestReadinessHTTPFlip(t *testing.T) {
	var mu sync.Mutex
	code := http.StatusOK
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		w.WriteHeader(code)
	}))
	defer srv.Close()
	setCode := func(c int) { mu.Lock(); code = c; mu.Unlock() }
	host, port := hostPort(t, srv.Listener.Addr().String())

	h := newHarness(t)
	c := corev1.Container{Name: "web", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: int32(port)}}, ReadinessProbe: &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromString("http")}},
		PeriodSeconds: 10, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 2,
	}}
	h.m.SetContainer(testPod("u1", c), host, &c, "c1", h.fc.Now())
	h.settle(1)
	if !h.m.Ready("u1", "web") {
		t.Fatal("not ready while the server answers 200")
	}
	setCode(http.StatusServiceUnavailable)
	h.tick(period, 1)
	if !h.m.Ready("u1", "web") {
		t.Fatal("unready after one failure with failureThreshold 2")
	}
	h.tick(period, 1)
	if h.m.Ready("u1", "web") {
		t.Fatal("still ready after two failures")
	}
	setCode(http.StatusOK)
	h.tick(period, 1)
	if !h.m.Ready("u1", "web") {
		t.Fatal("not ready again after the server recovered")
	}
	h.waitResults(Readiness, "c1:false", "c1:true", "c1:false", "c1:true")
}

func TestRemoveStopsWorkers(t *testing.T) {
	h := newHarness(t)
	probes := func(name string) corev1.Container {
		return corev1.Container{Name: name, StartupProbe: execProbe("startup", 10, 0, 1, 3), LivenessProbe: execProbe("live", 10, 0, 1, 3), ReadinessProbe: execProbe("ready", 10, 0, 1, 3)}
	}
	a, b := probes("a"), probes("b")
	p1, p2 := testPod("u1", a, b), testPod("u2", a)
	h.m.SetContainer(p1, "10.0.0.1", &a, "a1", h.fc.Now())
	h.m.SetContainer(p1, "10.0.0.1", &b, "b1", h.fc.Now())
	h.m.SetContainer(p2, "10.0.0.2", &a, "a2", h.fc.Now())
	h.tick(period, 9)
	if n := h.m.workerCount(); n != 9 {
		t.Fatalf("%d workers, want 9", n)
	}
	if !h.m.Ready("u1", "a") || !h.m.Ready("u2", "a") {
		t.Fatal("containers not ready")
	}

	h.m.RemoveContainer("u1", "b")
	h.waitFor("6 workers", func() bool { return h.m.workerCount() == 6 })
	h.m.RemovePod("u1")
	h.waitFor("3 workers", func() bool { return h.m.workerCount() == 3 })
	if h.m.Ready("u1", "a") || h.m.Started("u1", "a") {
		t.Error("a removed container still reports ready or started")
	}
	before := h.ex.count("live", "a1") + h.ex.count("ready", "a1") + h.ex.count("ready", "b1")
	h.tick(period, 3)
	if after := h.ex.count("live", "a1") + h.ex.count("ready", "a1") + h.ex.count("ready", "b1"); after != before {
		t.Errorf("removed containers were probed %d more times", after-before)
	}
	if !h.m.Ready("u2", "a") {
		t.Error("the other pod lost its readiness")
	}

	h.m.Stop()
	if n := h.m.workerCount(); n != 0 {
		t.Errorf("%d workers after Stop", n)
	}
	h.m.SetContainer(p1, "10.0.0.1", &a, "a3", h.fc.Now())
	if n := h.m.workerCount(); n != 0 {
		t.Errorf("SetContainer after Stop started %d workers", n)
	}
}

func TestDeletionStopsLivenessKeepsReadiness(t *testing.T) {
	h := newHarness(t)
	c := corev1.Container{Name: "app", LivenessProbe: execProbe("live", 10, 0, 1, 1), ReadinessProbe: execProbe("ready", 10, 0, 1, 3)}
	pod := testPod("u1", c)
	h.m.SetContainer(pod, "10.0.0.1", &c, "c1", h.fc.Now())
	h.settle(2)
	deleting := pod.DeepCopy()
	now := metav1.NewTime(h.fc.Now())
	deleting.DeletionTimestamp = &now
	h.m.SetContainer(deleting, "10.0.0.1", &c, "c1", h.fc.Now())
	h.ex.set("live", 1)
	h.fc.Step(period)
	h.waitFor("the liveness worker to stop", func() bool { return h.m.workerCount() == 1 })
	h.tick(period, 1)
	if n := h.ex.count("live", ""); n != 1 {
		t.Errorf("liveness ran %d times, want 1 (none during deletion)", n)
	}
	if n := h.ex.count("ready", ""); n != 3 {
		t.Errorf("readiness ran %d times, want 3 (it keeps going during deletion)", n)
	}
	h.waitResults(Liveness, "c1:true")
}

func TestRestartKeepsStatusOfRunningContainers(t *testing.T) {
	yes := true
	cases := []struct {
		name        string
		startedAgo  time.Duration
		statusReady bool
		wantReady   bool
	}{
		{name: "ready before podsync restarted", startedAgo: time.Hour, statusReady: true, wantReady: true},
		{name: "unready before podsync restarted", startedAgo: time.Hour, statusReady: false, wantReady: false},
		{name: "started after podsync", startedAgo: 0, statusReady: true, wantReady: false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.ex.set("ready", 1) // one failure is below the threshold and changes nothing
			h.ex.set("startup", 1)
			c := corev1.Container{Name: "app", StartupProbe: execProbe("startup", 10, 0, 1, 3), ReadinessProbe: execProbe("ready", 10, 0, 1, 3)}
			pod := testPod("u1", c)
			pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "app", ContainerID: "containerd://c1", Ready: tc.statusReady, Started: &yes}}
			h.m.SetContainer(pod, "10.0.0.1", &c, "c1", h.fc.Now().Add(-tc.startedAgo))
			h.settle(2)
			if got := h.m.Ready("u1", "app"); got != tc.wantReady {
				t.Errorf("Ready = %t, want %t", got, tc.wantReady)
			}
			if got, want := h.m.Started("u1", "app"), tc.startedAgo > 0; got != want {
				t.Errorf("Started = %t, want %t", got, want)
			}
		})
	}
}

func TestFirstProbeJitter(t *testing.T) {
	cases := []struct {
		name      string
		sinceMgr  time.Duration
		wantAsked bool
	}{
		{name: "right after start", sinceMgr: 0, wantAsked: true},
		{name: "long after start", sinceMgr: time.Hour, wantAsked: false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			var mu sync.Mutex
			var asked []time.Duration
			h.m.jitter = func(p time.Duration) time.Duration {
				mu.Lock()
				defer mu.Unlock()
				asked = append(asked, p)
				return 3 * time.Second
			}
			h.fc.Step(tc.sinceMgr)
			c := corev1.Container{Name: "app", LivenessProbe: execProbe("live", 10, 0, 1, 3)}
			h.m.SetContainer(testPod("u1", c), "10.0.0.1", &c, "c1", h.fc.Now())
			h.settle(1)
			mu.Lock()
			gotAsked := len(asked) == 1 && asked[0] == period
			mu.Unlock()
			if gotAsked != tc.wantAsked {
				t.Fatalf("jitter asked %v, want asked for the period: %t", asked, tc.wantAsked)
			}
			want := 1
			if tc.wantAsked {
				want = 0
			}
			if n := h.ex.count("live", ""); n != want {
				t.Fatalf("%d probes before the jitter passed, want %d", n, want)
			}
			if tc.wantAsked {
				h.tick(3*time.Second, 1)
				if n := h.ex.count("live", ""); n != 1 {
					t.Fatalf("%d probes after the jitter, want 1", n)
				}
			}
		})
	}
}

func TestMetrics(t *testing.T) {
	h := newHarness(t)
	c := corev1.Container{Name: "app", LivenessProbe: execProbe("live", 10, 0, 1, 5)}
	h.ex.set("live", 1)
	h.m.SetContainer(testPod("u1", c), "10.0.0.1", &c, "c1", h.fc.Now())
	h.settle(1)
	h.tick(period, 1)
	h.ex.set("live", 0)
	h.tick(period, 1)

	labels := func(result string) prometheus.Labels {
		return prometheus.Labels{"probe_type": "Liveness", "result": result, "container": "app", "pod": "pod-u1", "namespace": "ns", "pod_uid": "u1"}
	}
	if got := testutil.ToFloat64(h.m.metrics.total.With(labels("failed"))); got != 2 {
		t.Errorf("failed probes %v, want 2", got)
	}
	if got := testutil.ToFloat64(h.m.metrics.total.With(labels("successful"))); got != 1 {
		t.Errorf("successful probes %v, want 1", got)
	}
	if n, err := testutil.GatherAndCount(h.reg, "prober_probe_total", "prober_probe_duration_seconds"); err != nil || n != 3 {
		t.Errorf("gathered %d series (%v), want 2 counters and 1 histogram", n, err)
	}

	h.m.RemovePod("u1")
	h.waitFor("no workers", func() bool { return h.m.workerCount() == 0 })
	if n, err := testutil.GatherAndCount(h.reg, "prober_probe_total", "prober_probe_duration_seconds"); err != nil || n != 0 {
		t.Errorf("%d series (%v) left after the pod was removed", n, err)
	}
}

func TestStopClosesUpdates(t *testing.T) {
	m := NewManager(newScriptExecer(), testclock.NewFakeClock(epoch), nil, nil)
	c := corev1.Container{Name: "app", ReadinessProbe: execProbe("ready", 10, 0, 1, 3)}
	m.SetContainer(testPod("u1", c), "10.0.0.1", &c, "c1", epoch)
	m.Stop()
	m.Stop() // twice is fine
	for range m.Updates() {
	}
	if n := m.workerCount(); n != 0 {
		t.Errorf("%d workers after Stop", n)
	}
}

// gateExecer blocks each exec until the test releases it with an exit code.
type gateExecer struct {
	started chan string // the container ID of each exec, as it starts
	release chan int32
}

func (g *gateExecer) ExecSync(ctx context.Context, id string, _ []string, _ time.Duration) ([]byte, []byte, int32, error) {
	select {
	case g.started <- id:
	case <-ctx.Done():
		return nil, nil, 0, ctx.Err()
	}
	select {
	case code := <-g.release:
		return nil, nil, code, nil
	case <-ctx.Done():
		return nil, nil, 0, ctx.Err()
	}
}

// gatedManager is a Manager on a fake clock, with no first-probe jitter, whose exec probes
// run when g releases them.
func gatedManager(t *testing.T) (*gateExecer, *testclock.FakeClock, *Manager) {
	g := &gateExecer{started: make(chan string), release: make(chan int32)}
	fc := testclock.NewFakeClock(epoch)
	m := NewManager(g, fc, nil, nil)
	t.Cleanup(m.Stop)
	m.jitter = func(time.Duration) time.Duration { return 0 }
	return g, fc, m
}

func TestResultOfReplacedContainerIsDropped(t *testing.T) {
	g, fc, m := gatedManager(t)
	go func() {
		for range m.Updates() {
		}
	}()
	c := corev1.Container{Name: "app", ReadinessProbe: execProbe("ready", 10, 0, 1, 3)}
	pod := testPod("u1", c)
	m.SetContainer(pod, "10.0.0.1", &c, "c1", fc.Now())
	if id := <-g.started; id != "c1" {
		t.Fatalf("probed %s, want c1", id)
	}
	m.SetContainer(pod, "10.0.0.1", &c, "c2", fc.Now()) // replaced while c1's probe runs
	g.release <- 0                                      // c1 passes, too late
	if id := <-g.started; id != "c2" {                  // c2 is probed at once
		t.Fatalf("probed %s, want c2", id)
	}
	if m.Ready("u1", "app") {
		t.Fatal("c1's passing probe made c2 ready")
	}
	g.release <- 0
	deadline := time.Now().Add(10 * time.Second)
	for !m.Ready("u1", "app") {
		if time.Now().After(deadline) {
			t.Fatal("c2 not ready after its probe passed")
		}
		time.Sleep(time.Millisecond)
	}
}

// A liveness run that began before the pod's deletion and fails after it (a preStop hook
// removed what it checks) is dropped: no Unhealthy event, no failure to restart for.
func TestALivenessRunOverlappingTheDeletionIsDropped(t *testing.T) {
	g, fc, m := gatedManager(t)
	var mu sync.Mutex
	var events, updates []string
	m.RecordEvents(func(_ *corev1.Pod, _, reason, message string) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, reason+": "+message)
	})
	go func() {
		for r := range m.Updates() {
			mu.Lock()
			updates = append(updates, fmt.Sprintf("%s %s:%t", r.Kind.metricLabel(), r.ContainerID, r.Success))
			mu.Unlock()
		}
	}()
	c := corev1.Container{Name: "app", LivenessProbe: execProbe("live", 10, 0, 1, 1)}
	pod := testPod("u1", c)
	m.SetContainer(pod, "10.0.0.1", &c, "c1", fc.Now())
	if id := <-g.started; id != "c1" {
		t.Fatalf("probed %s, want c1", id)
	}
	deleting := pod.DeepCopy()
	now := metav1.NewTime(fc.Now())
	deleting.DeletionTimestamp = &now
	m.SetContainer(deleting, "10.0.0.1", &c, "c1", fc.Now()) // deleted while the run goes on
	g.release <- 1                                           // then it fails
	deadline := time.Now().Add(10 * time.Second)
	for m.workerCount() != 0 {
		mu.Lock()
		n := len(events)
		mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the liveness worker did not stop after the deletion")
		}
		time.Sleep(time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(events) != 0 {
		t.Errorf("events %v, want none: the run overlapped the deletion", events)
	}
	for _, u := range updates {
		if strings.HasSuffix(u, ":false") {
			t.Errorf("updates %v, want no failure (the container would be restarted)", updates)
		}
	}
}

func TestReadinessProbedAsSoonAsStartupPasses(t *testing.T) {
	h := newHarness(t)
	c := corev1.Container{
		Name:           "app",
		StartupProbe:   execProbe("startup", 10, 0, 1, 30),
		ReadinessProbe: execProbe("ready", 100, 0, 1, 3),
	}
	pod := testPod("u1", c)
	// Right after podsync starts, the readiness worker's first probe is spread over its
	// period: the trigger must cut that wait short too.
	h.m.jitter = func(p time.Duration) time.Duration {
		if p == 100*time.Second {
			return 90 * time.Second
		}
		return 0
	}
	h.ex.set("startup", 1)
	h.m.SetContainer(pod, "10.0.0.1", &c, "c1", h.fc.Now())
	h.settle(2)
	h.ex.set("startup", 0)
	h.tick(period, 2)
	// No readiness period has passed: the readiness probe ran because startup passed.
	h.waitFor("ready right after startup passed", func() bool { return h.m.Ready("u1", "app") })
	if n := h.ex.count("ready", ""); n != 1 {
		t.Errorf("readiness ran %d times, want once, at once", n)
	}
}

func TestProbeEventsAsTheKubelet(t *testing.T) {
	h := newHarness(t)
	var mu sync.Mutex
	var got []string
	h.m.RecordEvents(func(_ *corev1.Pod, eventType, reason, message string) {
		mu.Lock()
		got = append(got, eventType+" "+reason+" "+message)
		mu.Unlock()
	})
	c := corev1.Container{Name: "app", LivenessProbe: execProbe("live", 10, 0, 1, 3)}
	h.ex.set("live", 1)
	h.m.SetContainer(testPod("u1", c), "10.0.0.1", &c, "c1", h.fc.Now())
	h.settle(1)
	h.tick(period, 1)
	h.waitFor("two Unhealthy events", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) >= 2
	})
	mu.Lock()
	defer mu.Unlock()
	if !strings.HasPrefix(got[0], "Warning Unhealthy Liveness probe failed: ") || got[0] != got[1] {
		t.Errorf("events %q, want one Warning Unhealthy \"Liveness probe failed: ...\" per failed run", got)
	}
}
