package podworker

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// restartAllPod is a Never pod with init container "init" and app containers "app" and
// "worker"; app's exit code 42 restarts every container of the pod.
func restartAllPod() *corev1.Pod {
	pod := syncPod(corev1.RestartPolicyNever, []string{"init"}, "app", "worker")
	pod.Spec.Containers[0].RestartPolicy = ptr.To(corev1.ContainerRestartPolicyNever)
	pod.Spec.Containers[0].RestartPolicyRules = []corev1.ContainerRestartRule{{
		Action:    corev1.ContainerRestartRuleActionRestartAllContainers,
		ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: corev1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}},
	}}
	return pod
}

// restartAllRunning runs restartAllPod on a memCRI until its containers run.
func restartAllRunning(t *testing.T) (*memCRI, *harness, *corev1.Pod, Observed) {
	t.Helper()
	cri := newMemCRI("busybox:1")
	h := newHarness(t, cri)
	pod := restartAllPod()
	h.m.Update(pod, "api")
	h.initDoneAppRunning(t, pod)
	return cri, h, pod, h.ev.waitFor(t, "worker running", func(o Observed) bool { return isRunning(o, "worker") })
}

// TestSyncRestartAllContainers: a container exiting with a RestartAllContainers code
// restarts the whole pod in place, as the v1.36 kubelet: the condition, every container
// stopped without grace and removed (the one that asked last), the init container run
// again in the same sandbox, the restart counts and last states the kubelet shows.
func TestSyncRestartAllContainers(t *testing.T) {
	cri, h, pod, o := restartAllRunning(t)
	if c := hasCondition(o, corev1.AllContainersRestarting); c == nil || c.Status != corev1.ConditionFalse {
		t.Fatalf("AllContainersRestarting %+v, want False on a pod with the rule", c)
	}

	cri.exit(t, "app", 42)
	h.m.Trigger(pod.UID)
	o = h.ev.waitFor(t, "AllContainersRestarting True", func(o Observed) bool {
		c := hasCondition(o, corev1.AllContainersRestarting)
		return c != nil && c.Status == corev1.ConditionTrue
	})
	if c := hasCondition(o, corev1.AllContainersRestarting); c.Reason != "RestartAllContainersStarted" || c.Message != "container exited with restart policy rule" {
		t.Errorf("condition %q %q, want the kubelet's reason and message", c.Reason, c.Message)
	}
	if o.Status.Phase != corev1.PodRunning {
		t.Errorf("phase %s while restarting, want Running", o.Status.Phase)
	}
	o = h.ev.waitFor(t, "init running again", func(o Observed) bool {
		return isRunning(o, "init") && statusOf(o, "init").RestartCount == 1
	})
	for _, name := range []string{"app", "worker"} {
		cs := statusOf(o, name)
		if cs.State.Waiting == nil || cs.State.Waiting.Reason != "RestartingAllContainers" || cs.RestartCount != 1 {
			t.Errorf("%s while the init container runs again: %+v restarts %d, want waiting RestartingAllContainers, 1", name, cs.State, cs.RestartCount)
		}
		if lt := cs.LastTerminationState.Terminated; lt == nil || lt.Reason != "RestartingAllContainers" || lt.ExitCode != 137 {
			t.Errorf("%s last state %+v, want RestartingAllContainers 137", name, lt)
		}
	}
	if o.Status.Phase != corev1.PodRunning {
		t.Errorf("phase %s while the init container runs again, want Running", o.Status.Phase)
	}

	stops, removes := cri.callsOf("StopContainer"), cri.callsOf("RemoveContainer")
	if !slices.Equal(stops, []string{"worker timeout=0"}) {
		t.Errorf("stopped %v, want only the running worker, without grace", stops)
	}
	if len(removes) != 3 || removes[2] != "app" {
		t.Errorf("removed %v, want every container, app (which asked) last", removes)
	}
	if !h.ev.hasEvent("Killing: Stopping container worker: the pod restarts all its containers (container app exited with code 42)") {
		t.Errorf("no Killing event naming the cause: %v", h.ev.recorded)
	}

	cri.exit(t, "init", 0)
	h.m.Trigger(pod.UID)
	o = h.ev.waitFor(t, "the pod running again", func(o Observed) bool {
		return isRunning(o, "app") && isRunning(o, "worker") && statusOf(o, "app").RestartCount == 1
	})
	for _, name := range []string{"app", "worker"} {
		cs := statusOf(o, name)
		if lt := cs.LastTerminationState.Terminated; cs.RestartCount != 1 || lt == nil || lt.Reason != "RestartingAllContainers" {
			t.Errorf("%s running again: restarts %d, last state %+v; want 1 and RestartingAllContainers", name, cs.RestartCount, lt)
		}
	}
	if c := hasCondition(o, corev1.AllContainersRestarting); c == nil || c.Status != corev1.ConditionFalse {
		t.Errorf("AllContainersRestarting %+v once running again, want False", c)
	}
	if got := cri.callsOf("RunPodSandbox"); len(got) != 1 {
		t.Errorf("sandboxes run: %v, want the one the pod had", got)
	}
	if got := cri.callsOf("CreateContainer"); !slices.Contains(got, "app attempt=1") || !slices.Contains(got, "init attempt=1") {
		t.Errorf("created %v, want the new instances at attempt 1", got)
	}

	// Another exit with a code no rule answers: the container's own policy (Never), the
	// pod is not restarted.
	cri.exit(t, "app", 3)
	h.m.Trigger(pod.UID)
	o = h.ev.waitFor(t, "app terminated with 3", func(o Observed) bool {
		t := statusOf(o, "app").State.Terminated
		return t != nil && t.ExitCode == 3
	})
	if isRunning(o, "app") || !isRunning(o, "worker") || len(cri.callsOf("RemoveContainer")) != 3 {
		t.Errorf("after exit 3: %s, removes %v; want app done, worker running, nothing removed", describe(o.Status), cri.callsOf("RemoveContainer"))
	}
}

// TestSyncRestartAllContainersFinishesAfterAPodsyncRestart: a podsync stopped in the middle
// of a restart of all containers (the others removed, the one that asked not yet) finishes
// it when it starts again: the cause is read from the runtime.
func TestSyncRestartAllContainersFinishesAfterAPodsyncRestart(t *testing.T) {
	cri, h, pod, _ := restartAllRunning(t)
	app, _ := cri.newest("app")
	cri.mu.Lock()
	cri.unremovable = map[string]bool{app: true}
	cri.mu.Unlock()
	cri.exit(t, "app", 42)
	h.m.Trigger(pod.UID)
	waitCalls(t, cri, "RemoveContainer", 3)
	h.stop()

	cri.mu.Lock()
	cri.unremovable = nil
	cri.mu.Unlock()
	h2 := newHarness(t, cri)
	h2.m.Update(pod, "api")
	o := h2.ev.waitFor(t, "init running again", func(o Observed) bool { return isRunning(o, "init") })
	if cs := statusOf(o, "app"); cs.State.Waiting == nil || cs.RestartCount != 1 {
		t.Errorf("app after the restarted podsync finished the reset: %+v restarts %d, want waiting, 1", cs.State, cs.RestartCount)
	}
	if _, ok := cri.containerNamed("app"); ok {
		t.Errorf("the container that asked for the restart is still in the runtime")
	}
	cri.exit(t, "init", 0)
	h2.m.Trigger(pod.UID)
	h2.ev.waitFor(t, "app running again", func(o Observed) bool { return isRunning(o, "app") && statusOf(o, "app").RestartCount == 1 })
}

// waitCalls waits until the runtime has had n calls of method.
func waitCalls(t *testing.T, cri *memCRI, method string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for len(cri.callsOf(method)) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d %s calls, want %d: %v", len(cri.callsOf(method)), method, n, cri.callsOf(method))
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// containerNamed is the ID of an instance of the named container, if there is one.
func (f *memCRI) containerNamed(name string) (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for id, c := range f.containers {
		if c.cfg.GetMetadata().GetName() == name {
			return id, true
		}
	}
	return "", false
}
