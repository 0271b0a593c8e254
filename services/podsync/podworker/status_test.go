package podworker

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/unitlet/unitlet/services/podsync/relist"
)

// Container restart rules and policies (ContainerRestartRules): the container's first
// matching rule, then its own policy, then the pod's decide whether it restarts, and the
// phase follows.
func TestContainerRestartRules(t *testing.T) {
	never, always, onFailure := corev1.ContainerRestartPolicyNever, corev1.ContainerRestartPolicyAlways, corev1.ContainerRestartPolicyOnFailure
	rule := func(op corev1.ContainerRestartRuleOnExitCodesOperator, codes ...int32) []corev1.ContainerRestartRule {
		return []corev1.ContainerRestartRule{{Action: corev1.ContainerRestartRuleActionRestart, ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: op, Values: codes}}}
	}
	for _, tc := range []struct {
		name   string
		pod    corev1.RestartPolicy
		policy *corev1.ContainerRestartPolicy
		rules  []corev1.ContainerRestartRule
		code   int32
		want   bool
	}{
		{"pod Never", corev1.RestartPolicyNever, nil, nil, 1, false},
		{"pod Never, container Always", corev1.RestartPolicyNever, &always, nil, 0, true},
		{"pod Always, container Never", corev1.RestartPolicyAlways, &never, nil, 1, false},
		{"container OnFailure, exit 0", corev1.RestartPolicyAlways, &onFailure, nil, 0, false},
		{"container Never, rule In 42 matches", corev1.RestartPolicyNever, &never, rule(corev1.ContainerRestartRuleOnExitCodesOpIn, 42), 42, true},
		{"container Never, rule In 42 does not match", corev1.RestartPolicyNever, &never, rule(corev1.ContainerRestartRuleOnExitCodesOpIn, 42), 1, false},
		{"container Never, rule NotIn 0", corev1.RestartPolicyNever, &never, rule(corev1.ContainerRestartRuleOnExitCodesOpNotIn, 0), 3, true},
	} {
		pod := &corev1.Pod{Spec: corev1.PodSpec{RestartPolicy: tc.pod}}
		c := &corev1.Container{RestartPolicy: tc.policy, RestartPolicyRules: tc.rules}
		if got := containerShouldRestart(pod, c, tc.code); got != tc.want {
			t.Errorf("%s: restart after exit %d = %t, want %t", tc.name, tc.code, got, tc.want)
		}
		pod.Spec.Containers = []corev1.Container{*c}
		done := corev1.ContainerStatus{State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: tc.code}}}
		want := corev1.PodRunning
		if !tc.want {
			want = corev1.PodFailed
			if tc.code == 0 {
				want = corev1.PodSucceeded
			}
		}
		if got := phase(pod, nil, []corev1.ContainerStatus{done}, true); got != want {
			t.Errorf("%s: phase %s, want %s", tc.name, got, want)
		}
	}
}

func TestPhaseKubeletCases(t *testing.T) {
	run := corev1.ContainerStatus{State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}
	done := func(code int32) corev1.ContainerStatus {
		return corev1.ContainerStatus{State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code}}}
	}
	wait := corev1.ContainerStatus{State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}
	backoff := func(last int32) corev1.ContainerStatus {
		return corev1.ContainerStatus{
			State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: last}},
		}
	}
	none := []corev1.ContainerStatus(nil)
	cs := func(s ...corev1.ContainerStatus) []corev1.ContainerStatus { return s }
	const (
		always    = corev1.RestartPolicyAlways
		onFailure = corev1.RestartPolicyOnFailure
		never     = corev1.RestartPolicyNever
	)
	for _, tc := range []struct {
		name        string
		policy      corev1.RestartPolicy
		inits, apps []corev1.ContainerStatus
		want        corev1.PodPhase
	}{
		// Running containers: Running under every policy.
		{"Always running", always, none, cs(run), corev1.PodRunning},
		{"OnFailure running", onFailure, none, cs(run), corev1.PodRunning},
		{"Never running", never, none, cs(run), corev1.PodRunning},
		{"Never running next to a failed one", never, none, cs(run, done(1)), corev1.PodRunning},
		{"Never running next to a succeeded one", never, none, cs(run, done(0)), corev1.PodRunning},
		// Succeeded.
		{"Always succeeded: restarting", always, none, cs(done(0)), corev1.PodRunning},
		{"OnFailure succeeded", onFailure, none, cs(done(0), done(0)), corev1.PodSucceeded},
		{"Never succeeded", never, none, cs(done(0)), corev1.PodSucceeded},
		// Failed.
		{"Always failed: restarting", always, none, cs(done(1)), corev1.PodRunning},
		{"OnFailure failed: restarting", onFailure, none, cs(done(0), done(1)), corev1.PodRunning},
		{"Never failed", never, none, cs(done(137)), corev1.PodFailed},
		{"Never one failed one succeeded", never, none, cs(done(0), done(1)), corev1.PodFailed},
		// Waiting.
		{"Always waiting", always, none, cs(wait), corev1.PodPending},
		{"OnFailure waiting", onFailure, none, cs(wait), corev1.PodPending},
		{"Never waiting", never, none, cs(wait), corev1.PodPending},
		{"Never waiting next to a failed one", never, none, cs(wait, done(1)), corev1.PodPending},
		{"Always crash loop is stopped, not waiting", always, none, cs(backoff(1)), corev1.PodRunning},
		{"OnFailure crash loop", onFailure, none, cs(backoff(2)), corev1.PodRunning},
		{"no status at all", always, none, none, corev1.PodPending},
		// Init containers.
		{"init not started", always, cs(wait), cs(wait), corev1.PodPending},
		{"init running", never, cs(run), cs(wait), corev1.PodPending},
		{"second init pending", always, cs(done(0), wait), cs(wait), corev1.PodPending},
		{"init failed, Always: retried", always, cs(done(1)), cs(wait), corev1.PodPending},
		{"init failed, OnFailure: retried", onFailure, cs(done(1)), cs(wait), corev1.PodPending},
		{"init failed, Never", never, cs(done(1)), cs(wait), corev1.PodFailed},
		{"init in backoff after failing, Always", always, cs(backoff(1)), cs(wait), corev1.PodPending},
		{"init in backoff after failing, Never", never, cs(backoff(1)), cs(wait), corev1.PodFailed},
		{"second init failed, Never", never, cs(done(0), done(2)), cs(wait), corev1.PodFailed},
		{"inits done, app running", onFailure, cs(done(0), done(0)), cs(run), corev1.PodRunning},
		{"inits done, app succeeded", never, cs(done(0)), cs(done(0)), corev1.PodSucceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{Spec: corev1.PodSpec{RestartPolicy: tc.policy}}
			for range tc.inits {
				pod.Spec.InitContainers = append(pod.Spec.InitContainers, corev1.Container{})
			}
			for range tc.apps {
				pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{})
			}
			if got := phase(pod, tc.inits, tc.apps, true); got != tc.want {
				t.Errorf("phase = %s, want %s", got, tc.want)
			}
		})
	}
}

// statusFixture is a manager with a fake clock and one worker, for status tests.
type statusFixture struct {
	clk *clocktesting.FakeClock
	m   *Manager
	w   *worker
	pod *corev1.Pod
}

func newStatusFixture(pod *corev1.Pod, probes Probes) *statusFixture {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	m := NewManager(Options{Clock: clk, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Probes: probes, RuntimeName: "containerd"})
	return &statusFixture{clk: clk, m: m, w: newWorker(m, pod, "api"), pod: pod}
}

func testPod(policy corev1.RestartPolicy, inits []string, apps ...string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "uid-1"},
		Spec:       corev1.PodSpec{RestartPolicy: policy},
	}
	for _, n := range inits {
		p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{Name: n, Image: "busybox:1"})
	}
	for _, n := range apps {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: n, Image: "busybox:1"})
	}
	return p
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// inst is a container instance in sandbox "sb1"; created orders instances (newest first
// in the pod).
func inst(name string, attempt uint32, st runtimeapi.ContainerState, exit int32) *relist.Container {
	c := &relist.Container{
		ID: name + "-" + string(rune('0'+attempt)), Name: name, Attempt: attempt, SandboxID: "sb1", State: st,
		CreatedAt: t0.Add(time.Duration(attempt) * time.Minute),
		StartedAt: t0.Add(time.Duration(attempt)*time.Minute + time.Second),
	}
	if st == runtimeapi.ContainerState_CONTAINER_EXITED {
		c.ExitCode = exit
		c.FinishedAt = c.StartedAt.Add(time.Second)
	}
	return c
}

// runtimePod is a pod with a ready sandbox with an IP and the given instances, which must
// be given newest first.
func runtimePod(cs ...*relist.Container) *relist.Pod {
	return &relist.Pod{
		UID: "uid-1", Name: "web", Namespace: "default",
		Sandboxes:  []*relist.Sandbox{{ID: "sb1", Ready: true, IPs: []string{"10.0.0.5"}, CreatedAt: t0}},
		Containers: cs,
	}
}

const (
	cRunning = runtimeapi.ContainerState_CONTAINER_RUNNING
	cExited  = runtimeapi.ContainerState_CONTAINER_EXITED
)

func conditions(st corev1.PodStatus) map[corev1.PodConditionType]corev1.PodCondition {
	out := map[corev1.PodConditionType]corev1.PodCondition{}
	for _, c := range st.Conditions {
		out[c.Type] = c
	}
	return out
}

type fakeProbes struct{ notReady map[string]bool }

func (fakeProbes) SetContainer(*corev1.Pod, string, *corev1.Container, string, time.Time) {}
func (fakeProbes) RemoveContainer(_ types.UID, _ string)                                  {}
func (fakeProbes) RemovePod(types.UID)                                                    {}
func (p fakeProbes) Ready(_ types.UID, name string) bool                                  { return !p.notReady[name] }
func (p fakeProbes) Started(_ types.UID, name string) bool                                { return !p.notReady[name] }

func TestStatusConditionsAndPhase(t *testing.T) {
	type conds struct{ sandbox, initialized, containersReady, ready corev1.ConditionStatus }
	T, F := corev1.ConditionTrue, corev1.ConditionFalse
	for _, tc := range []struct {
		name      string
		pod       *corev1.Pod
		rp        *relist.Pod
		notReady  map[string]bool
		wantPhase corev1.PodPhase
		want      conds
		// wantReason is the ContainersReady/Ready reason when false.
		wantReason, wantMessage string
		wantInitMessage         string
	}{
		{
			name:       "nothing in the runtime",
			pod:        testPod(corev1.RestartPolicyAlways, nil, "app"),
			rp:         nil,
			wantPhase:  corev1.PodPending,
			want:       conds{F, T, F, F},
			wantReason: "ContainersNotReady", wantMessage: "containers with unready status: [app]",
		},
		{
			name:      "all running and ready",
			pod:       testPod(corev1.RestartPolicyAlways, []string{"init"}, "app", "side"),
			rp:        runtimePod(inst("side", 0, cRunning, 0), inst("app", 0, cRunning, 0), inst("init", 0, cExited, 0)),
			wantPhase: corev1.PodRunning,
			want:      conds{T, T, T, T},
		},
		{
			name:       "one not ready by its probe",
			pod:        testPod(corev1.RestartPolicyAlways, nil, "app", "side"),
			rp:         runtimePod(inst("side", 0, cRunning, 0), inst("app", 0, cRunning, 0)),
			notReady:   map[string]bool{"side": true},
			wantPhase:  corev1.PodRunning,
			want:       conds{T, T, F, F},
			wantReason: "ContainersNotReady", wantMessage: "containers with unready status: [side]",
		},
		{
			name:       "init running",
			pod:        testPod(corev1.RestartPolicyAlways, []string{"one", "two"}, "app"),
			rp:         runtimePod(inst("one", 0, cRunning, 0)),
			wantPhase:  corev1.PodPending,
			want:       conds{T, F, F, F},
			wantReason: "ContainersNotReady", wantMessage: "containers with unready status: [app]",
			wantInitMessage: "containers with incomplete status: [one two]",
		},
		{
			name:            "init failed under Never",
			pod:             testPod(corev1.RestartPolicyNever, []string{"one"}, "app"),
			rp:              runtimePod(inst("one", 0, cExited, 1)),
			wantPhase:       corev1.PodFailed,
			want:            conds{T, F, F, F},
			wantReason:      "PodCompleted",
			wantInitMessage: "containers with incomplete status: [one]",
		},
		{
			name:       "succeeded",
			pod:        testPod(corev1.RestartPolicyNever, []string{"init"}, "app"),
			rp:         runtimePod(inst("app", 0, cExited, 0), inst("init", 0, cExited, 0)),
			wantPhase:  corev1.PodSucceeded,
			want:       conds{T, T, F, F},
			wantReason: "PodCompleted",
		},
		{
			name: "host network pod: ready to start without a sandbox IP",
			pod: func() *corev1.Pod {
				p := testPod(corev1.RestartPolicyAlways, nil, "app")
				p.Spec.HostNetwork = true
				return p
			}(),
			rp: func() *relist.Pod {
				p := runtimePod(inst("app", 0, cRunning, 0))
				p.Sandboxes[0].IPs = nil
				return p
			}(),
			wantPhase: corev1.PodRunning,
			want:      conds{T, T, T, T},
		},
		{
			name: "sandbox without IP is not ready to start containers",
			pod:  testPod(corev1.RestartPolicyAlways, nil, "app"),
			rp: func() *relist.Pod {
				p := runtimePod(inst("app", 0, cRunning, 0))
				p.Sandboxes[0].IPs = nil
				return p
			}(),
			wantPhase: corev1.PodRunning,
			want:      conds{F, T, T, T},
		},
		{
			name: "readiness gate not met",
			pod: func() *corev1.Pod {
				p := testPod(corev1.RestartPolicyAlways, nil, "app")
				p.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: "example.com/lb"}}
				return p
			}(),
			rp:        runtimePod(inst("app", 0, cRunning, 0)),
			wantPhase: corev1.PodRunning,
			want:      conds{T, T, T, F},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newStatusFixture(tc.pod, fakeProbes{notReady: tc.notReady})
			st := f.w.status(tc.pod, tc.rp, state{pod: tc.pod})
			if st.Phase != tc.wantPhase {
				t.Errorf("phase %s, want %s", st.Phase, tc.wantPhase)
			}
			var order []corev1.PodConditionType
			for _, c := range st.Conditions {
				order = append(order, c.Type)
			}
			wantOrder := []corev1.PodConditionType{corev1.PodReadyToStartContainers, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady, corev1.PodScheduled}
			if len(order) != len(wantOrder) {
				t.Fatalf("conditions %v, want %v", order, wantOrder)
			}
			for i := range order {
				if order[i] != wantOrder[i] {
					t.Fatalf("conditions %v, want %v", order, wantOrder)
				}
			}
			c := conditions(st)
			got := conds{c[corev1.PodReadyToStartContainers].Status, c[corev1.PodInitialized].Status, c[corev1.ContainersReady].Status, c[corev1.PodReady].Status}
			if got != tc.want {
				t.Errorf("conditions (sandbox, initialized, containersReady, ready) = %v, want %v", got, tc.want)
			}
			if c[corev1.PodScheduled].Status != T {
				t.Errorf("PodScheduled %v", c[corev1.PodScheduled].Status)
			}
			if tc.want.containersReady == F {
				if cr := c[corev1.ContainersReady]; cr.Reason != tc.wantReason || cr.Message != tc.wantMessage {
					t.Errorf("ContainersReady reason %q message %q, want %q %q", cr.Reason, cr.Message, tc.wantReason, tc.wantMessage)
				}
			} else if cr := c[corev1.ContainersReady]; cr.Reason != "" || cr.Message != "" {
				t.Errorf("a true ContainersReady has reason %q message %q", cr.Reason, cr.Message)
			}
			if in := c[corev1.PodInitialized]; tc.want.initialized == F && (in.Reason != "ContainersNotInitialized" || in.Message != tc.wantInitMessage) {
				t.Errorf("Initialized reason %q message %q, want ContainersNotInitialized %q", in.Reason, in.Message, tc.wantInitMessage)
			}
			for _, cond := range st.Conditions {
				if !cond.LastTransitionTime.Time.Equal(f.clk.Now().Truncate(time.Second)) {
					t.Errorf("%s lastTransitionTime %v, want now", cond.Type, cond.LastTransitionTime)
				}
			}
			if tc.rp.ReadySandbox() != nil && len(tc.rp.Sandboxes[0].IPs) > 0 && (st.PodIP != "10.0.0.5" || len(st.PodIPs) != 1) {
				t.Errorf("pod IP %q %v, want the sandbox's 10.0.0.5", st.PodIP, st.PodIPs)
			}
			if st.StartTime == nil || !st.StartTime.Time.Equal(f.clk.Now()) {
				t.Errorf("startTime %v, want the first status's time", st.StartTime)
			}
		})
	}
}

func TestStatusKillReasonFailsThePod(t *testing.T) {
	pod := testPod(corev1.RestartPolicyAlways, nil, "app")
	f := newStatusFixture(pod, nil)
	st := f.w.status(pod, runtimePod(inst("app", 0, cRunning, 0)), state{pod: pod, killReason: "Evicted", killMsg: "low on memory"})
	if st.Phase != corev1.PodFailed || st.Reason != "Evicted" || st.Message != "low on memory" {
		t.Errorf("status phase %s reason %q message %q, want Failed Evicted", st.Phase, st.Reason, st.Message)
	}
}

// A deleted pod whose containers would have restarted ends Failed when one of them failed,
// and Succeeded when each exited 0 (a container that ends on SIGTERM), as the kubelet's
// getPhase for a terminal pod; not terminating, the same pod is Running.
func TestStatusTerminatingWithNothingRunning(t *testing.T) {
	for _, tc := range []struct {
		name  string
		exits []int32
		want  corev1.PodPhase
	}{
		{"every container exited 0", []int32{0, 0}, corev1.PodSucceeded},
		{"one container exited 143", []int32{0, 143}, corev1.PodFailed},
		{"one container exited 1", []int32{1, 0}, corev1.PodFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := testPod(corev1.RestartPolicyAlways, nil, "app", "side")
			f := newStatusFixture(pod, nil)
			rp := runtimePod(inst("app", 0, cExited, tc.exits[0]), inst("side", 0, cExited, tc.exits[1]))
			rp.Sandboxes[0].Ready = false
			st := f.w.status(pod, rp, state{pod: pod, terminating: true})
			if st.Phase != tc.want {
				t.Errorf("a deleted pod whose containers exited %v: phase %s, want %s", tc.exits, st.Phase, tc.want)
			}
			if st := f.w.status(pod, rp, state{pod: pod}); st.Phase != corev1.PodRunning {
				t.Errorf("the same pod not terminating: phase %s, want Running", st.Phase)
			}
		})
	}
}

func TestContainerStatusMapping(t *testing.T) {
	exitedWith := func(c *relist.Container, reason string) *relist.Container {
		c.Reason = reason
		return c
	}
	for _, tc := range []struct {
		name    string
		policy  corev1.RestartPolicy
		rp      *relist.Pod
		waiting map[string]waitingState
		check   func(t *testing.T, cs corev1.ContainerStatus)
	}{
		{
			name: "no instance: waiting ContainerCreating",
			rp:   runtimePod(),
			check: func(t *testing.T, cs corev1.ContainerStatus) {
				if cs.State.Waiting == nil || cs.State.Waiting.Reason != "ContainerCreating" || cs.RestartCount != 0 || cs.ContainerID != "" {
					t.Errorf("%+v", cs)
				}
				if cs.Ready || cs.Started == nil || *cs.Started {
					t.Errorf("ready %v started %v, want false/false", cs.Ready, cs.Started)
				}
			},
		},
		{
			name: "running, restarted twice, last instance in lastState",
			rp:   runtimePod(inst("app", 2, cRunning, 0), exitedWith(inst("app", 1, cExited, 2), "")),
			check: func(t *testing.T, cs corev1.ContainerStatus) {
				if cs.State.Running == nil || !cs.State.Running.StartedAt.Time.Equal(t0.Add(2*time.Minute+time.Second)) {
					t.Errorf("state %+v, want running since its start", cs.State)
				}
				if cs.RestartCount != 2 || cs.ContainerID != "containerd://app-2" || !cs.Ready || cs.Started == nil || !*cs.Started {
					t.Errorf("restartCount %d id %q ready %v started %v", cs.RestartCount, cs.ContainerID, cs.Ready, cs.Started)
				}
				lt := cs.LastTerminationState.Terminated
				if lt == nil || lt.ExitCode != 2 || lt.Reason != "Error" || lt.ContainerID != "containerd://app-1" {
					t.Errorf("lastState %+v, want exit 2 Error of app-1", lt)
				}
			},
		},
		{
			name: "terminated 0 without a runtime reason: Completed",
			rp:   runtimePod(inst("app", 0, cExited, 0)),
			check: func(t *testing.T, cs corev1.ContainerStatus) {
				tt := cs.State.Terminated
				if tt == nil || tt.ExitCode != 0 || tt.Reason != "Completed" || !tt.FinishedAt.Time.Equal(t0.Add(2*time.Second)) {
					t.Errorf("terminated %+v, want Completed", tt)
				}
				if cs.LastTerminationState.Terminated != nil || cs.Ready {
					t.Errorf("lastState %+v ready %v", cs.LastTerminationState, cs.Ready)
				}
			},
		},
		{
			name: "terminated 1 without a runtime reason: Error",
			rp:   runtimePod(inst("app", 0, cExited, 1)),
			check: func(t *testing.T, cs corev1.ContainerStatus) {
				if tt := cs.State.Terminated; tt == nil || tt.ExitCode != 1 || tt.Reason != "Error" {
					t.Errorf("terminated %+v, want Error", tt)
				}
			},
		},
		{
			name: "the runtime's reason is kept",
			rp:   runtimePod(exitedWith(inst("app", 0, cExited, 137), "OOMKilled")),
			check: func(t *testing.T, cs corev1.ContainerStatus) {
				if tt := cs.State.Terminated; tt == nil || tt.Reason != "OOMKilled" {
					t.Errorf("terminated %+v, want OOMKilled", tt)
				}
			},
		},
		{
			name:    "exited and in backoff: waiting with the worker's reason, the exit in lastState",
			rp:      runtimePod(inst("app", 3, cExited, 1), inst("app", 2, cExited, 1)),
			waiting: map[string]waitingState{"app": {"CrashLoopBackOff", "back-off 40s restarting failed container"}},
			check: func(t *testing.T, cs corev1.ContainerStatus) {
				if w := cs.State.Waiting; w == nil || w.Reason != "CrashLoopBackOff" || w.Message != "back-off 40s restarting failed container" {
					t.Errorf("waiting %+v, want CrashLoopBackOff", w)
				}
				if lt := cs.LastTerminationState.Terminated; lt == nil || lt.ContainerID != "containerd://app-3" || lt.ExitCode != 1 {
					t.Errorf("lastState %+v, want the newest instance's exit", lt)
				}
				if cs.RestartCount != 3 {
					t.Errorf("restartCount %d, want 3", cs.RestartCount)
				}
			},
		},
		{
			name:    "no instance and a worker's reason: waiting with it",
			rp:      runtimePod(),
			waiting: map[string]waitingState{"app": {"ErrImageNeverPull", "not present"}},
			check: func(t *testing.T, cs corev1.ContainerStatus) {
				if w := cs.State.Waiting; w == nil || w.Reason != "ErrImageNeverPull" || w.Message != "not present" {
					t.Errorf("waiting %+v", w)
				}
				if cs.LastTerminationState.Terminated != nil {
					t.Errorf("lastState %+v, want none", cs.LastTerminationState)
				}
			},
		},
		{
			name:    "running wins over a stale waiting reason",
			rp:      runtimePod(inst("app", 1, cRunning, 0)),
			waiting: map[string]waitingState{"app": {"CrashLoopBackOff", "old"}},
			check: func(t *testing.T, cs corev1.ContainerStatus) {
				if cs.State.Running == nil {
					t.Errorf("state %+v, want running", cs.State)
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := testPod(corev1.RestartPolicyAlways, nil, "app")
			f := newStatusFixture(pod, nil)
			for k, v := range tc.waiting {
				f.w.setWaiting(k, v.reason, v.message)
			}
			st := f.w.status(pod, tc.rp, state{pod: pod})
			if len(st.ContainerStatuses) != 1 || st.ContainerStatuses[0].Name != "app" || st.ContainerStatuses[0].Image != "busybox:1" {
				t.Fatalf("container statuses %+v", st.ContainerStatuses)
			}
			tc.check(t, st.ContainerStatuses[0])
		})
	}
}

// A new instance created and not started yet waits with the instance before it as its
// lastState, as the kubelet shows it: the pod stays Running, its restart count the new
// instance's.
func TestAnInstanceCreatedAfterAnExitKeepsThePodRunning(t *testing.T) {
	pod := testPod(corev1.RestartPolicyAlways, nil, "app")
	f := newStatusFixture(pod, nil)
	st := f.w.status(pod, runtimePod(inst("app", 2, runtimeapi.ContainerState_CONTAINER_CREATED, 0), inst("app", 1, cExited, 1)), state{pod: pod})
	cs := st.ContainerStatuses[0]
	if cs.State.Waiting == nil || cs.RestartCount != 2 {
		t.Errorf("app %+v, want waiting with restartCount 2", cs)
	}
	if lt := cs.LastTerminationState.Terminated; lt == nil || lt.ExitCode != 1 || lt.ContainerID != "containerd://app-1" {
		t.Errorf("lastState %+v, want the exit 1 of app-1", lt)
	}
	if st.Phase != corev1.PodRunning {
		t.Errorf("phase %s, want Running", st.Phase)
	}
}

func TestInitContainerStatus(t *testing.T) {
	pod := testPod(corev1.RestartPolicyAlways, []string{"one", "two"}, "app")
	f := newStatusFixture(pod, nil)
	st := f.w.status(pod, runtimePod(inst("two", 0, cRunning, 0), inst("one", 0, cExited, 0)), state{pod: pod})
	if len(st.InitContainerStatuses) != 2 {
		t.Fatalf("init statuses %+v", st.InitContainerStatuses)
	}
	one, two := st.InitContainerStatuses[0], st.InitContainerStatuses[1]
	// As the kubelet: every init container has started set, true only while it runs.
	if one.State.Terminated == nil || !one.Ready || one.Started == nil || *one.Started {
		t.Errorf("finished init: %+v, want terminated, ready, not started", one)
	}
	if two.State.Running == nil || two.Ready || two.Started == nil || !*two.Started {
		t.Errorf("running init: %+v, want running, started, not ready", two)
	}
	if w := st.ContainerStatuses[0].State.Waiting; w == nil || w.Reason != "PodInitializing" {
		t.Errorf("app while init runs: %+v, want waiting PodInitializing", st.ContainerStatuses[0].State)
	}
	pending := f.w.status(pod, runtimePod(), state{pod: pod})
	if w := pending.InitContainerStatuses[0].State.Waiting; w == nil || w.Reason != "PodInitializing" {
		t.Errorf("init not started: %+v, want waiting PodInitializing", pending.InitContainerStatuses[0].State)
	}
}

func TestTerminationMessage(t *testing.T) {
	dir := t.TempDir()
	msgFile := filepath.Join(dir, "termination-log")
	if err := os.WriteFile(msgFile, []byte("custom message"), 0o644); err != nil {
		t.Fatal(err)
	}
	emptyMsg := filepath.Join(dir, "empty")
	if err := os.WriteFile(emptyMsg, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	bigMsg := filepath.Join(dir, "big")
	if err := os.WriteFile(bigMsg, []byte(strings.Repeat("x", 5000)), 0o644); err != nil {
		t.Fatal(err)
	}
	logFile := filepath.Join(dir, "0.log")
	log := "2026-01-01T00:00:00.000000000Z stdout F starting\n2026-01-01T00:00:01.000000000Z stderr F panic: boom\n"
	if err := os.WriteFile(logFile, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		policy   corev1.TerminationMessagePolicy
		msgPath  string
		exit     int32
		runtime  string // the runtime's message
		want     string
		wantSize int
	}{
		{name: "message file", policy: corev1.TerminationMessageReadFile, msgPath: msgFile, exit: 1, want: "custom message"},
		{name: "message file wins over the log", policy: corev1.TerminationMessageFallbackToLogsOnError, msgPath: msgFile, exit: 1, want: "custom message"},
		{name: "empty file, fallback on error: the log tail", policy: corev1.TerminationMessageFallbackToLogsOnError, msgPath: emptyMsg, exit: 2, want: "starting\npanic: boom\n"},
		{name: "no file, fallback on error: the log tail", policy: corev1.TerminationMessageFallbackToLogsOnError, exit: 2, want: "starting\npanic: boom\n"},
		{name: "fallback but exit 0: no log", policy: corev1.TerminationMessageFallbackToLogsOnError, msgPath: emptyMsg, exit: 0, want: ""},
		{name: "ReadFile with an empty file: the runtime's message", policy: corev1.TerminationMessageReadFile, msgPath: emptyMsg, exit: 1, runtime: "from runtime", want: "from runtime"},
		{name: "a long message is cut to 4 KiB", policy: corev1.TerminationMessageReadFile, msgPath: bigMsg, exit: 1, wantSize: 4096},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := testPod(corev1.RestartPolicyNever, nil, "app")
			pod.Spec.Containers[0].TerminationMessagePolicy = tc.policy
			f := newStatusFixture(pod, nil)
			c := inst("app", 0, cExited, tc.exit)
			c.TerminationMessageHostPath, c.LogPath, c.Message = tc.msgPath, logFile, tc.runtime
			st := f.w.status(pod, runtimePod(c), state{pod: pod})
			tt := st.ContainerStatuses[0].State.Terminated
			if tt == nil {
				t.Fatalf("state %+v, want terminated", st.ContainerStatuses[0].State)
			}
			if tc.wantSize > 0 {
				if len(tt.Message) != tc.wantSize {
					t.Errorf("message of %d bytes, want %d", len(tt.Message), tc.wantSize)
				}
				return
			}
			if tt.Message != tc.want {
				t.Errorf("message %q, want %q", tt.Message, tc.want)
			}
		})
	}
}

func TestLastTransitionTimeKeptWhileUnchanged(t *testing.T) {
	pod := testPod(corev1.RestartPolicyAlways, nil, "app")
	f := newStatusFixture(pod, nil)
	start := f.clk.Now().Truncate(time.Second)
	pending := runtimePod()
	runningPod := runtimePod(inst("app", 0, cRunning, 0))

	first := conditions(f.w.status(pod, pending, state{pod: pod}))
	f.clk.Step(10 * time.Second)
	second := conditions(f.w.status(pod, pending, state{pod: pod}))
	for typ, c := range second {
		if !c.LastTransitionTime.Time.Equal(start) || !c.LastTransitionTime.Time.Equal(first[typ].LastTransitionTime.Time) {
			t.Errorf("%s: lastTransitionTime %v after an unchanged status, want %v", typ, c.LastTransitionTime, start)
		}
	}
	f.clk.Step(10 * time.Second)
	later := f.clk.Now().Truncate(time.Second)
	third := conditions(f.w.status(pod, runningPod, state{pod: pod}))
	for typ, want := range map[corev1.PodConditionType]time.Time{
		corev1.PodReadyToStartContainers: start, // true all along
		corev1.PodInitialized:            start,
		corev1.PodScheduled:              start,
		corev1.ContainersReady:           later, // false → true
		corev1.PodReady:                  later,
	} {
		if got := third[typ].LastTransitionTime.Time; !got.Equal(want) {
			t.Errorf("%s: lastTransitionTime %v, want %v", typ, got, want)
		}
	}
	if st := f.w.status(pod, runningPod, state{pod: pod}); !st.StartTime.Time.Equal(start) {
		t.Errorf("startTime moved to %v, want the first status's %v", st.StartTime, start)
	}
}

// A start error of an earlier attempt is shown as waiting only for a container that will
// run again, as the kubelet does; one that will not keeps its terminated state (an init
// container whose exit the runtime lost, under restartPolicy Never: the pod has failed).
func TestAStartErrorIsShownOnlyForAContainerThatRestarts(t *testing.T) {
	lost := func(name string) *relist.Container {
		c := inst(name, 0, cExited, 255)
		c.Reason = "Unknown"
		return c
	}
	for _, tc := range []struct {
		name        string
		policy      corev1.RestartPolicy
		init        *relist.Container
		wantWaiting bool
		wantPhase   corev1.PodPhase
	}{
		{"Never, the init container's exit lost", corev1.RestartPolicyNever, lost("init"), false, corev1.PodFailed},
		{"OnFailure, the init container failed", corev1.RestartPolicyOnFailure, inst("init", 0, cExited, 1), true, corev1.PodPending},
		{"Never, the init container completed", corev1.RestartPolicyNever, inst("init", 0, cExited, 0), false, corev1.PodPending},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := testPod(tc.policy, []string{"init"}, "app")
			f := newStatusFixture(pod, nil)
			f.w.setWaiting("init", "CreateContainerError", "failed to reserve container name")
			st := f.w.status(pod, runtimePod(tc.init), state{pod: pod})
			got := st.InitContainerStatuses[0]
			if tc.wantWaiting {
				if got.State.Waiting == nil || got.State.Waiting.Reason != "CreateContainerError" || got.LastTerminationState.Terminated == nil {
					t.Errorf("init status %+v, want waiting CreateContainerError with its last termination", got)
				}
			} else if got.State.Terminated == nil || got.State.Terminated.ExitCode != tc.init.ExitCode {
				t.Errorf("init status %+v, want terminated with %d", got, tc.init.ExitCode)
			}
			if st.Phase != tc.wantPhase {
				t.Errorf("phase %s, want %s", st.Phase, tc.wantPhase)
			}
		})
	}
}
