package podworker

import (
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// TestShutdownIsTheKubeletsNodeShutdown: a pod stopped for a node shutdown is stopped with
// the grace period given, gets no event, and ends as the kubelet's shutdown manager ends
// it: Failed, reason Terminated, the kubelet's message, and DisruptionTarget=True with
// reason TerminationByKubelet and the same message (TestKillAfterTheEnd: a pod that has
// already succeeded keeps its status).
func TestShutdownIsTheKubeletsNodeShutdown(t *testing.T) {
	const reason, msg = "Terminated", "Pod was terminated in response to imminent node shutdown."
	cri := newMemCRI("busybox:1")
	h := newHarness(t, cri)
	pod := syncPod(corev1.RestartPolicyAlways, nil, "app")
	pod.Generation = 2
	pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](30)
	h.m.Update(pod, "api")
	h.ev.waitFor(t, "running", func(o Observed) bool { return isRunning(o, "app") })
	if active := h.m.ActivePods(); len(active) != 1 || active[0].UID != pod.UID || h.m.Ended(pod.UID) {
		t.Fatalf("active pods %v, ended %t: want the running pod, not ended", active, h.m.Ended(pod.UID))
	}

	if !h.m.Shutdown(pod.UID, 7, reason, msg) {
		t.Fatalf("Shutdown of a known pod returned false")
	}
	o := h.ev.waitFor(t, "terminated", func(o Observed) bool { return o.Terminated })
	st := o.Status
	if st.Phase != corev1.PodFailed || st.Reason != reason || st.Message != msg {
		t.Errorf("phase %s reason %q message %q, want Failed %s %q", st.Phase, st.Reason, st.Message, reason, msg)
	}
	dt := disruptionTarget(st)
	if dt == nil || dt.Status != corev1.ConditionTrue || dt.Reason != corev1.PodReasonTerminationByKubelet || dt.Message != msg || dt.ObservedGeneration != 2 {
		t.Errorf("DisruptionTarget %+v, want True, TerminationByKubelet, the message, generation 2", dt)
	}
	if got, want := cri.callsOf("StopContainer"), []string{"app timeout=7"}; !slices.Equal(got, want) {
		t.Errorf("stops %v, want %v", got, want)
	}
	h.ev.mu.Lock()
	warnings := slices.Clone(h.ev.warnings)
	h.ev.mu.Unlock()
	if len(warnings) != 0 || h.ev.hasEvent(reason) {
		t.Errorf("events %v for a shutdown, want none (the kubelet records the Node's, not the pods')", warnings)
	}
	if !h.m.Known(pod.UID) {
		t.Errorf("a pod still wanted lost its worker")
	}
	if len(h.m.ActivePods()) != 0 || !h.m.Ended(pod.UID) {
		t.Errorf("a terminated pod is still among the active pods, or not ended")
	}
}

// TestShutdownReportsTheFinalStatusBeforeTheSandboxStops: a shutdown's pod whose
// containers have stopped is reported with its final status while the runtime is still
// stopping its sandbox; only once the sandbox has stopped is it Terminated.
func TestShutdownReportsTheFinalStatusBeforeTheSandboxStops(t *testing.T) {
	const reason, msg = "Terminated", "Pod was terminated in response to imminent node shutdown."
	cri := newMemCRI("busybox:1")
	h := newHarness(t, cri)
	pod := syncPod(corev1.RestartPolicyAlways, nil, "app")
	h.m.Update(pod, "api")
	h.ev.waitFor(t, "running", func(o Observed) bool { return isRunning(o, "app") })

	gate := make(chan struct{})
	var open sync.Once
	t.Cleanup(func() { open.Do(func() { close(gate) }) }) // before the harness's own
	cri.mu.Lock()
	cri.stopSandboxGate = gate
	cri.mu.Unlock()
	h.m.Shutdown(pod.UID, 7, reason, msg)
	o := h.ev.waitFor(t, "the final status", func(o Observed) bool { return o.Status.Phase == corev1.PodFailed })
	if o.Terminated || h.m.Ended(pod.UID) {
		t.Errorf("terminated %t, ended %t while the sandbox is stopping: want neither", o.Terminated, h.m.Ended(pod.UID))
	}
	if o.Status.Reason != reason || len(o.Status.ContainerStatuses) != 1 || o.Status.ContainerStatuses[0].State.Terminated == nil {
		t.Errorf("status %s %q, containers %+v: want the shutdown's reason, the container terminated", o.Status.Phase, o.Status.Reason, o.Status.ContainerStatuses)
	}
	open.Do(func() { close(gate) })
	final := h.ev.waitFor(t, "terminated", func(o Observed) bool { return o.Terminated })
	if !equality.Semantic.DeepEqual(final.Status, o.Status) {
		t.Errorf("the status once terminated differs from the one reported before the sandbox stopped:\n%+v\n%+v", final.Status, o.Status)
	}
}

// A new worker for a pod the API is deleting is terminating before its first sync: the
// worker starts before its first setSpec, and a first sync that took the pod for a running
// one would start its containers again.
func TestNewWorkerOfADeletedPodIsTerminating(t *testing.T) {
	m := NewManager(Options{Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	pod := syncPod(corev1.RestartPolicyAlways, []string{"init"}, "app")
	now := metav1.Now()
	pod.DeletionTimestamp, pod.DeletionGracePeriodSeconds = &now, ptr.To[int64](3)
	w := newWorker(m, pod, "api")
	if st := w.snapshot(); !st.terminating || st.grace == nil || *st.grace != 3 {
		t.Errorf("terminating %t grace %v, want terminating with the deletion's 3 s", st.terminating, st.grace)
	}
}
