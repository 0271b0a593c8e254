package podworker

import (
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// sidecarPod is a pod whose init containers named in sidecars have restartPolicy Always.
func sidecarPod(policy corev1.RestartPolicy, inits []string, sidecars []string, apps ...string) *corev1.Pod {
	p := syncPod(policy, inits, apps...)
	for i := range p.Spec.InitContainers {
		if slices.Contains(sidecars, p.Spec.InitContainers[i].Name) {
			p.Spec.InitContainers[i].RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
		}
	}
	return p
}

// gateProbes is a Probes whose containers have not started (nor are ready) until let go.
type gateProbes struct {
	mu      sync.Mutex
	blocked map[string]bool
	set     []string // "<name> <id>" of SetContainer calls
}

func (p *gateProbes) SetContainer(_ *corev1.Pod, _ string, c *corev1.Container, id string, _ time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.set = append(p.set, c.Name+" "+id)
}
func (p *gateProbes) RemoveContainer(types.UID, string) {}
func (p *gateProbes) RemovePod(types.UID)               {}
func (p *gateProbes) Ready(_ types.UID, name string) bool {
	return p.Started("", name)
}
func (p *gateProbes) Started(_ types.UID, name string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.blocked[name]
}
func (p *gateProbes) release(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.blocked, name)
}

func newProbedHarness(t *testing.T, cri *memCRI, probes Probes) *harness {
	t.Helper()
	return newHarnessOpts(t, cri, func(o *Options) { o.Probes = probes })
}

// settle syncs the pod again and again (memCRI tells no relister) until match.
func (h *harness) settle(t *testing.T, uid types.UID, what string, match func(Observed) bool) Observed {
	t.Helper()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
				h.m.Trigger(uid)
			}
		}
	}()
	return h.ev.waitFor(t, what, match)
}

func TestSidecarStartsTheNextOnceStartedAndKeepsRunning(t *testing.T) {
	cri := newMemCRI("busybox:1")
	probes := &gateProbes{blocked: map[string]bool{"side": true}}
	h := newProbedHarness(t, cri, probes)
	pod := sidecarPod(corev1.RestartPolicyAlways, []string{"init1", "side", "init2"}, []string{"side"}, "app")
	pod.Spec.InitContainers[1].StartupProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}}
	h.m.Update(pod, "api")

	h.ev.waitFor(t, "init1 running", func(o Observed) bool { return isRunning(o, "init1") })
	cri.exit(t, "init1", 0)
	h.m.Trigger(pod.UID)
	o := h.ev.waitFor(t, "the sidecar running", func(o Observed) bool { return isRunning(o, "side") })
	// Running but not started: init2 waits, the pod is Pending and not initialized.
	h.m.Trigger(pod.UID)
	time.Sleep(50 * time.Millisecond)
	if got := cri.callsOf("CreateContainer"); !slices.Equal(got, []string{"init1 attempt=0", "side attempt=0"}) {
		t.Fatalf("created %v before the sidecar's startupProbe passed, want init1, side", got)
	}
	if cs := statusOf(o, "side"); cs.Started == nil || *cs.Started || cs.Ready {
		t.Errorf("sidecar before its startupProbe: started %v ready %v, want false, false", cs.Started, cs.Ready)
	}
	if o.Status.Phase != corev1.PodPending {
		t.Errorf("phase %s while the sidecar has not started, want Pending", o.Status.Phase)
	}

	probes.release("side")
	h.m.Trigger(pod.UID)
	h.ev.waitFor(t, "init2 running", func(o Observed) bool { return isRunning(o, "init2") })
	cri.exit(t, "init2", 0)
	h.m.Trigger(pod.UID)
	o = h.ev.waitFor(t, "the pod running", func(o Observed) bool {
		return o.Status.Phase == corev1.PodRunning && isRunning(o, "app") && isRunning(o, "side")
	})
	if cs := statusOf(o, "side"); cs.Started == nil || !*cs.Started || !cs.Ready {
		t.Errorf("started sidecar: started %v ready %v, want true, true", cs.Started, cs.Ready)
	}
	if len(o.Status.InitContainerStatuses) != 3 || o.Status.InitContainerStatuses[1].Name != "side" {
		t.Errorf("initContainerStatuses %+v, want init1, side, init2 (the kubelet reports sidecars there)", o.Status.InitContainerStatuses)
	}
	for _, c := range o.Status.Conditions {
		if (c.Type == corev1.PodInitialized || c.Type == corev1.PodReady) && c.Status != corev1.ConditionTrue {
			t.Errorf("condition %s %s (%s), want True", c.Type, c.Status, c.Message)
		}
	}
	if !slices.ContainsFunc(probes.set, func(s string) bool { return strings.HasPrefix(s, "side ") }) {
		t.Errorf("the sidecar's probes were never set up: %v", probes.set)
	}
}

func TestSidecarRestartsWhateverThePolicyAndCountsToReadiness(t *testing.T) {
	cri := newMemCRI("busybox:1")
	probes := &gateProbes{blocked: map[string]bool{}}
	h := newProbedHarness(t, cri, probes)
	pod := sidecarPod(corev1.RestartPolicyNever, []string{"side"}, []string{"side"}, "app")
	h.m.Update(pod, "api")
	h.settle(t, pod.UID, "app running", func(o Observed) bool { return isRunning(o, "app") && isRunning(o, "side") })

	cri.exit(t, "side", 1)
	h.m.Trigger(pod.UID)
	o := h.ev.waitFor(t, "the sidecar restarted", func(o Observed) bool {
		cs := statusOf(o, "side")
		return cs.State.Running != nil && cs.RestartCount == 1
	})
	if o.Status.Phase != corev1.PodRunning {
		t.Errorf("phase %s after the sidecar restarted, want Running", o.Status.Phase)
	}
	if got := cri.callsOf("CreateContainer"); !slices.Equal(got, []string{"side attempt=0", "app attempt=0", "side attempt=1"}) {
		t.Errorf("created %v, want the sidecar restarted and the app left alone", got)
	}

	// An unready sidecar makes the pod unready.
	probes.mu.Lock()
	probes.blocked["side"] = true
	probes.mu.Unlock()
	h.m.Trigger(pod.UID)
	h.ev.waitFor(t, "the pod unready", func(o Observed) bool {
		for _, c := range o.Status.Conditions {
			if c.Type == corev1.ContainersReady {
				return c.Status == corev1.ConditionFalse && c.Message == "containers with unready status: [side]"
			}
		}
		return false
	})
}

func TestPodWithSidecarCompletesWithTheSidecarStopped(t *testing.T) {
	for _, tc := range []struct {
		policy corev1.RestartPolicy
		exit   int32
		want   corev1.PodPhase
	}{
		{corev1.RestartPolicyNever, 0, corev1.PodSucceeded},
		{corev1.RestartPolicyNever, 3, corev1.PodFailed},
		{corev1.RestartPolicyOnFailure, 0, corev1.PodSucceeded},
	} {
		t.Run(string(tc.policy)+"/"+string(tc.want), func(t *testing.T) {
			cri := newMemCRI("busybox:1")
			h := newProbedHarness(t, cri, &gateProbes{blocked: map[string]bool{}})
			pod := sidecarPod(tc.policy, []string{"side"}, []string{"side"}, "app")
			h.m.Update(pod, "api")
			h.settle(t, pod.UID, "app running", func(o Observed) bool { return isRunning(o, "app") && isRunning(o, "side") })
			cri.exit(t, "app", tc.exit)
			h.m.Trigger(pod.UID)
			o := h.ev.waitFor(t, "phase "+string(tc.want), func(o Observed) bool { return o.Status.Phase == tc.want && o.Terminated })
			if got := cri.callsOf("StopContainer"); len(got) != 1 || !strings.HasPrefix(got[0], "side ") {
				t.Errorf("stops %v, want the sidecar stopped once", got)
			}
			if got := cri.callsOf("CreateContainer"); len(got) != 2 {
				t.Errorf("created %v, want nothing restarted after the app finished", got)
			}
			if cs := statusOf(o, "side"); cs.State.Terminated == nil {
				t.Errorf("sidecar state %+v, want terminated", cs.State)
			}
		})
	}
}

func TestSidecarsStopAfterTheAppsInReverseOrder(t *testing.T) {
	cri := newMemCRI("busybox:1")
	h := newProbedHarness(t, cri, &gateProbes{blocked: map[string]bool{}})
	pod := sidecarPod(corev1.RestartPolicyAlways, []string{"s1", "s2"}, []string{"s1", "s2"}, "a1", "a2")
	h.m.Update(pod, "api")
	h.settle(t, pod.UID, "running", func(o Observed) bool { return isRunning(o, "a1") && isRunning(o, "a2") })
	h.m.Terminate(pod.UID, nil, "", "")
	h.ev.waitFor(t, "removed", func(o Observed) bool { return o.Removed })
	var names []string
	for _, s := range cri.callsOf("StopContainer") {
		names = append(names, strings.Fields(s)[0])
	}
	if len(names) != 4 || !slices.Contains(names[:2], "a1") || !slices.Contains(names[:2], "a2") || names[2] != "s2" || names[3] != "s1" {
		t.Errorf("stopped in the order %v, want a1 and a2, then s2, then s1", names)
	}
}

func TestProbeKillUsesTheProbesGracePeriod(t *testing.T) {
	pod := syncPod(corev1.RestartPolicyAlways, nil, "app")
	pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](30)
	c := &pod.Spec.Containers[0]
	c.LivenessProbe = &corev1.Probe{TerminationGracePeriodSeconds: ptr.To[int64](5)}
	for _, tc := range []struct {
		name string
		k    kill
		del  *int64
		want time.Duration
	}{
		{"liveness kill: the probe's", kill{reason: ReasonLivenessProbe}, nil, 5 * time.Second},
		{"startup kill without its own: the pod's", kill{reason: ReasonStartupProbe}, nil, 30 * time.Second},
		{"spec change: the pod's", kill{}, nil, 30 * time.Second},
		{"a deletion's grace wins", kill{reason: ReasonLivenessProbe}, ptr.To[int64](9), 9 * time.Second},
		{"an override wins", kill{reason: ReasonLivenessProbe, grace: ptr.To[int64](1)}, nil, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := pod.DeepCopy()
			p.DeletionGracePeriodSeconds = tc.del
			k := tc.k
			if tc.del != nil {
				k.grace = tc.del // a deletion's grace reaches the kill as its override
			}
			if got := killGrace(p, &p.Spec.Containers[0], k); got != tc.want {
				t.Errorf("grace %s, want %s", got, tc.want)
			}
		})
	}
}

func TestActiveDeadlineEndsThePod(t *testing.T) {
	cri := newMemCRI("busybox:1")
	h := newHarness(t, cri)
	pod := syncPod(corev1.RestartPolicyAlways, nil, "app")
	h.m.Update(pod, "api")
	h.ev.waitFor(t, "running", func(o Observed) bool { return isRunning(o, "app") })

	// Set on the running pod, already past: the pod ends Failed with the kubelet's reason.
	upd := pod.DeepCopy()
	upd.Spec.ActiveDeadlineSeconds = ptr.To[int64](0)
	h.m.Update(upd, "api")
	o := h.ev.waitFor(t, "failed", func(o Observed) bool { return o.Terminated && o.Status.Phase == corev1.PodFailed })
	if o.Status.Reason != "DeadlineExceeded" || o.Status.Message != "Pod was active on the node longer than the specified deadline" {
		t.Errorf("reason %q message %q, want the kubelet's DeadlineExceeded", o.Status.Reason, o.Status.Message)
	}
	if !h.ev.hasEvent("DeadlineExceeded: Pod was active on the node longer than the specified deadline") {
		t.Errorf("no DeadlineExceeded event: %v", h.ev.recorded)
	}
}
