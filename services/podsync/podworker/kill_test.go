package podworker

import (
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// TestEvictIsTheKubeletsEviction: an evicted pod gets the kubelet's Warning event, is
// stopped with the grace period given (0: at once), and ends Failed with the reason and
// message and the condition DisruptionTarget=True, reason TerminationByKubelet.
func TestEvictIsTheKubeletsEviction(t *testing.T) {
	const msg = "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. "
	for _, tc := range []struct {
		name      string
		grace     *int64
		wantGrace int
	}{
		{"the pod's own grace period", nil, 30},
		{"a soft threshold's grace period", ptr.To[int64](5), 5},
		{"a hard threshold: at once", ptr.To[int64](0), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cri := newMemCRI("busybox:1")
			h := newHarness(t, cri)
			pod := syncPod(corev1.RestartPolicyAlways, nil, "app")
			pod.Generation = 3
			pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](30)
			h.m.Update(pod, "api")
			h.ev.waitFor(t, "running", func(o Observed) bool { return isRunning(o, "app") })

			if !h.m.Evict(pod.UID, tc.grace, "Evicted", msg) {
				t.Fatalf("Evict of a known pod returned false")
			}
			o := h.ev.waitFor(t, "terminated", func(o Observed) bool { return o.Terminated })
			st := o.Status
			if st.Phase != corev1.PodFailed || st.Reason != "Evicted" || st.Message != msg {
				t.Errorf("phase %s reason %q message %q, want Failed Evicted %q", st.Phase, st.Reason, st.Message, msg)
			}
			dt := disruptionTarget(st)
			if dt == nil || dt.Status != corev1.ConditionTrue || dt.Reason != corev1.PodReasonTerminationByKubelet || dt.Message != msg ||
				dt.ObservedGeneration != 3 || dt.LastTransitionTime.IsZero() {
				t.Errorf("DisruptionTarget condition %+v, want True, TerminationByKubelet, the message, generation 3, a transition time", dt)
			}
			if got, want := cri.callsOf("StopContainer"), []string{fmt.Sprintf("app timeout=%d", tc.wantGrace)}; !slices.Equal(got, want) {
				t.Errorf("stops %v, want %v", got, want)
			}
			h.ev.mu.Lock()
			warnings := slices.Clone(h.ev.warnings)
			h.ev.mu.Unlock()
			if !slices.Contains(warnings, "Evicted: "+msg) {
				t.Errorf("Warning events %v, want Evicted with the message", warnings)
			}
			if o.Removed || !h.m.Known(pod.UID) {
				t.Errorf("an evicted pod that is still wanted lost its worker")
			}
		})
	}
}

// TestKillAfterTheEnd: a pod that has already finished keeps its status when it is
// evicted (no eviction event, no Failed phase) or stopped for a node shutdown.
func TestKillAfterTheEnd(t *testing.T) {
	for name, kill := range map[string]func(*Manager, *corev1.Pod){
		"evicted":  func(m *Manager, p *corev1.Pod) { m.Evict(p.UID, ptr.To[int64](0), "Evicted", "too late") },
		"shutdown": func(m *Manager, p *corev1.Pod) { m.Shutdown(p.UID, 7, "Terminated", "too late") },
	} {
		t.Run(name, func(t *testing.T) {
			cri := newMemCRI("busybox:1")
			h := newHarness(t, cri)
			pod := syncPod(corev1.RestartPolicyNever, nil, "app")
			h.m.Update(pod, "api")
			h.ev.waitFor(t, "running", func(o Observed) bool { return isRunning(o, "app") })
			cri.exit(t, "app", 0)
			h.m.Trigger(pod.UID)
			h.ev.waitFor(t, "succeeded", func(o Observed) bool { return o.Terminated && o.Status.Phase == corev1.PodSucceeded })

			kill(h.m, pod)
			// A new version of the pod (a label changed) makes the worker sync and report again.
			next := pod.DeepCopy()
			next.ResourceVersion = "2"
			next.Labels = map[string]string{"version": "2"}
			h.m.Update(next, "api")
			o := h.ev.waitFor(t, "the new version", func(o Observed) bool { return o.Pod.ResourceVersion == "2" })
			if o.Status.Phase != corev1.PodSucceeded || o.Status.Reason != "" {
				t.Errorf("phase %s reason %q, want Succeeded kept", o.Status.Phase, o.Status.Reason)
			}
			if h.ev.hasEvent("Evicted") {
				t.Errorf("an eviction event for a pod that had finished")
			}
		})
	}
}

// disruptionTarget is the pod's DisruptionTarget condition, nil without one.
func disruptionTarget(st corev1.PodStatus) *corev1.PodCondition {
	for i := range st.Conditions {
		if st.Conditions[i].Type == corev1.DisruptionTarget {
			return &st.Conditions[i]
		}
	}
	return nil
}

// TestFinalStatusOutlivesTheContainers: once a pod has terminated, removing its dead
// containers and sandbox (disk reclaim) does not change its status.
func TestFinalStatusOutlivesTheContainers(t *testing.T) {
	cri := newMemCRI("busybox:1")
	h := newHarness(t, cri)
	pod := syncPod(corev1.RestartPolicyNever, nil, "app")
	h.m.Update(pod, "api")
	h.ev.waitFor(t, "running", func(o Observed) bool { return isRunning(o, "app") })
	cri.exit(t, "app", 0)
	h.m.Trigger(pod.UID)
	final := h.ev.waitFor(t, "succeeded", func(o Observed) bool { return o.Terminated && o.Status.Phase == corev1.PodSucceeded })

	cri.mu.Lock()
	clear(cri.containers)
	clear(cri.sandboxes)
	cri.mu.Unlock()
	next := pod.DeepCopy()
	next.ResourceVersion = "2"
	next.Labels = map[string]string{"version": "2"}
	h.m.Update(next, "api")
	o := h.ev.waitFor(t, "the new version", func(o Observed) bool { return o.Pod.ResourceVersion == "2" })
	if o.Status.Phase != corev1.PodSucceeded || statusOf(o, "app").State.Terminated == nil {
		t.Errorf("after its containers went: %s, want the final status %s", describe(o.Status), describe(final.Status))
	}
	if got := cri.callsOf("RunPodSandbox"); len(got) != 1 {
		t.Errorf("sandboxes run %v, want the first only", got)
	}
}

// TestTerminalInTheAPIIsNotRunAgain: a pod the API has Succeeded or Failed (a podsync
// restart after it ended, its containers since removed) is not run again; what is left of
// it running is stopped, and its status is the API's.
func TestTerminalInTheAPIIsNotRunAgain(t *testing.T) {
	for _, leftover := range []bool{false, true} {
		t.Run(fmt.Sprintf("leftover running %v", leftover), func(t *testing.T) {
			cri := newMemCRI("busybox:1")
			pod := syncPod(corev1.RestartPolicyAlways, nil, "app")
			if leftover {
				cri.seed(t, pod, nil)
			}
			pod.Status = corev1.PodStatus{
				Phase: corev1.PodFailed, Reason: "Evicted", Message: "The node was low on resource: ephemeral-storage.",
				StartTime: &metav1.Time{Time: time.Unix(50, 0)},
				ContainerStatuses: []corev1.ContainerStatus{{Name: "app", State: corev1.ContainerState{
					Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "Error"}}}},
			}
			h := newHarness(t, cri)
			h.m.Update(pod, "api")
			o := h.ev.waitFor(t, "terminated", func(o Observed) bool { return o.Terminated })
			if o.Status.Phase != corev1.PodFailed || o.Status.Reason != "Evicted" || statusOf(o, "app").State.Terminated == nil {
				t.Errorf("status %s reason %q, want the API's: Failed, Evicted, app terminated", describe(o.Status), o.Status.Reason)
			}
			if got := cri.callsOf("RunPodSandbox"); got != nil {
				t.Errorf("ran sandboxes %v for a pod that had ended", got)
			}
			if got := cri.runningNames(); got != nil {
				t.Errorf("still running: %v", got)
			}
		})
	}
}
