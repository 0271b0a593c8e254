package podworker

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

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
