package harnesstest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// TestPodsyncContainerRestartRules: container-level restartPolicy and restartPolicyRules
// (ContainerRestartRules, beta and on in v1.36) as the kubelet applies them. Under the
// pod's Never, a container whose rule restarts it on exit code 42 is restarted once and
// then succeeds: the pod Succeeded, restartCount 1. Under the pod's Always, a container
// with restartPolicy Never that fails is not restarted: the pod Failed.
func TestPodsyncContainerRestartRules(t *testing.T) {
	t.Parallel()
	waitNodeReady(t, 90*time.Second)
	retried := busyboxPod("restart-rule", "if [ -f /state/ran ]; then exit 0; fi; touch /state/ran; exit 42")
	retried.Spec.RestartPolicy = corev1.RestartPolicyNever
	retried.Spec.Volumes = []corev1.Volume{{Name: "state", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	retried.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "state", MountPath: "/state"}}
	retried.Spec.Containers[0].RestartPolicy = ptr.To(corev1.ContainerRestartPolicyNever)
	retried.Spec.Containers[0].RestartPolicyRules = []corev1.ContainerRestartRule{{Action: corev1.ContainerRestartRuleActionRestart,
		ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: corev1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}}}}
	never := busyboxPod("restart-never", "exit 3")
	never.Spec.RestartPolicy = corev1.RestartPolicyAlways
	never.Spec.Containers[0].RestartPolicy = ptr.To(corev1.ContainerRestartPolicyNever)
	createPod(t, retried)
	createPod(t, never)
	for name, want := range map[string]struct {
		phase    corev1.PodPhase
		restarts int32
		exit     int32
	}{"restart-rule": {corev1.PodSucceeded, 1, 0}, "restart-never": {corev1.PodFailed, 0, 3}} {
		stack.WaitFor(t, time.Minute, fmt.Sprintf("%s %s after %d restarts", name, want.phase, want.restarts), func(ctx context.Context) (bool, string) {
			p, err := admin(t).CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
			if err != nil || len(p.Status.ContainerStatuses) == 0 {
				return false, fmt.Sprint(err)
			}
			cs := p.Status.ContainerStatuses[0]
			term := cs.State.Terminated
			return p.Status.Phase == want.phase && cs.RestartCount == want.restarts && term != nil && term.ExitCode == want.exit,
				fmt.Sprintf("phase %s, restarts %d, state %+v", p.Status.Phase, cs.RestartCount, cs.State)
		})
	}
	// Stays so: neither is restarted again.
	time.Sleep(3 * time.Second)
	for _, name := range []string{"restart-rule", "restart-never"} {
		p, err := admin(t).CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if n := p.Status.ContainerStatuses[0].RestartCount; n > 1 {
			t.Errorf("%s restarted %d times, want no more", name, n)
		}
	}
}

// TestPodsyncRestartAllContainers: a restart rule's RestartAllContainers action
// (RestartAllContainersOnContainerExits, beta and on in v1.36), as the kubelet applies
// it. Under the pod's Never, the app container exits 42 on its first run: the pod's every
// container is stopped and removed and the pod runs again from its init container in the
// same sandbox (same IP, the emptyDir kept: the init container's two runs are in it); each
// container shows one restart, its last state RestartingAllContainers; the Node declares
// the feature, so the scheduler places such pods here.
func TestPodsyncRestartAllContainers(t *testing.T) {
	t.Parallel()
	waitNodeReady(t, 90*time.Second)
	n, err := admin(t).CoreV1().Nodes().Get(context.Background(), podsyncNode, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(n.Status.DeclaredFeatures, "RestartAllContainersOnContainerExits") {
		t.Errorf("declaredFeatures %v, want RestartAllContainersOnContainerExits", n.Status.DeclaredFeatures)
	}
	p := busyboxPod("restart-all", `if [ "$(wc -l < /state/inits)" -lt 2 ]; then sleep 3; exit 42; fi; while true; do sleep 1; done`)
	p.Spec.RestartPolicy = corev1.RestartPolicyNever
	p.Spec.Volumes = []corev1.Volume{{Name: "state", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	mounts := []corev1.VolumeMount{{Name: "state", MountPath: "/state"}}
	app := &p.Spec.Containers[0]
	app.VolumeMounts = mounts
	app.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyNever)
	app.RestartPolicyRules = []corev1.ContainerRestartRule{{Action: corev1.ContainerRestartRuleActionRestartAllContainers,
		ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: corev1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}}}}
	worker := *app.DeepCopy()
	worker.Name, worker.Command, worker.RestartPolicy, worker.RestartPolicyRules = "worker", []string{"sh", "-c", "while true; do sleep 1; done"}, nil, nil
	init := worker
	init.Name, init.Command = "init", []string{"sh", "-c", "echo run >> /state/inits"}
	p.Spec.Containers = append(p.Spec.Containers, worker)
	p.Spec.InitContainers = []corev1.Container{init}
	createPod(t, p)

	first := waitAPIPod(t, time.Minute, "restart-all", "running with an IP", func(p *corev1.Pod) bool { return p.Status.PodIP != "" })
	got := waitAPIPod(t, 2*time.Minute, "restart-all", "every container restarted once, running", func(p *corev1.Pod) bool {
		if p.Status.Phase != corev1.PodRunning || len(p.Status.ContainerStatuses) != 2 || len(p.Status.InitContainerStatuses) != 1 {
			return false
		}
		for _, cs := range p.Status.ContainerStatuses {
			if cs.State.Running == nil || cs.RestartCount != 1 {
				return false
			}
		}
		return p.Status.InitContainerStatuses[0].RestartCount == 1
	})
	for _, cs := range got.Status.ContainerStatuses {
		if lt := cs.LastTerminationState.Terminated; lt == nil || lt.Reason != "RestartingAllContainers" || lt.ExitCode != 137 {
			t.Errorf("%s last state %+v, want RestartingAllContainers 137", cs.Name, lt)
		}
	}
	if got.Status.PodIP != first.Status.PodIP {
		t.Errorf("pod IP %s after the restart, %s before: want the same sandbox", got.Status.PodIP, first.Status.PodIP)
	}
	if runs := strings.Count(mustInPod(t, "restart-all", "cat", "/state/inits"), "run\n"); runs != 2 {
		t.Errorf("the init container ran %d times into the kept emptyDir, want 2", runs)
	}
	var cond *corev1.PodCondition
	for i := range got.Status.Conditions {
		if got.Status.Conditions[i].Type == corev1.AllContainersRestarting {
			cond = &got.Status.Conditions[i]
		}
	}
	if cond == nil || cond.Status != corev1.ConditionFalse {
		t.Errorf("AllContainersRestarting %+v, want False once running again", cond)
	}
	if evs := podEvents(context.Background(), t, "restart-all"); !strings.Contains(evs, "Stopping container worker: the pod restarts all its containers (container main exited with code 42)") {
		t.Errorf("no Killing event of the worker naming the cause:\n%s", evs)
	}
}
