package podworker

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestPhase(t *testing.T) {
	running := corev1.ContainerStatus{State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}
	exited := func(code int32) corev1.ContainerStatus {
		return corev1.ContainerStatus{State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code}}}
	}
	waiting := corev1.ContainerStatus{State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}
	backoff := corev1.ContainerStatus{
		State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
		LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1}},
	}
	pod := func(p corev1.RestartPolicy) *corev1.Pod { return &corev1.Pod{Spec: corev1.PodSpec{RestartPolicy: p}} }
	for _, tc := range []struct {
		name   string
		policy corev1.RestartPolicy
		inits  []corev1.ContainerStatus
		apps   []corev1.ContainerStatus
		want   corev1.PodPhase
	}{
		{"nothing yet", corev1.RestartPolicyAlways, nil, []corev1.ContainerStatus{waiting}, corev1.PodPending},
		{"running", corev1.RestartPolicyAlways, nil, []corev1.ContainerStatus{running, running}, corev1.PodRunning},
		{"one running one creating", corev1.RestartPolicyAlways, nil, []corev1.ContainerStatus{running, waiting}, corev1.PodPending},
		{"init running", corev1.RestartPolicyAlways, []corev1.ContainerStatus{running}, []corev1.ContainerStatus{waiting}, corev1.PodPending},
		{"init failed, Never", corev1.RestartPolicyNever, []corev1.ContainerStatus{exited(1)}, []corev1.ContainerStatus{waiting}, corev1.PodFailed},
		{"init failed, OnFailure: retried", corev1.RestartPolicyOnFailure, []corev1.ContainerStatus{exited(1)}, []corev1.ContainerStatus{waiting}, corev1.PodPending},
		{"init done", corev1.RestartPolicyAlways, []corev1.ContainerStatus{exited(0)}, []corev1.ContainerStatus{running}, corev1.PodRunning},
		{"all succeeded, Never", corev1.RestartPolicyNever, nil, []corev1.ContainerStatus{exited(0), exited(0)}, corev1.PodSucceeded},
		{"all succeeded, OnFailure", corev1.RestartPolicyOnFailure, nil, []corev1.ContainerStatus{exited(0)}, corev1.PodSucceeded},
		{"all exited, Always: restarting", corev1.RestartPolicyAlways, nil, []corev1.ContainerStatus{exited(0)}, corev1.PodRunning},
		{"one failed, Never", corev1.RestartPolicyNever, nil, []corev1.ContainerStatus{exited(0), exited(2)}, corev1.PodFailed},
		{"one failed, OnFailure: restarting", corev1.RestartPolicyOnFailure, nil, []corev1.ContainerStatus{exited(2)}, corev1.PodRunning},
		{"crash loop", corev1.RestartPolicyAlways, nil, []corev1.ContainerStatus{backoff}, corev1.PodRunning},
		{"crash loop next to a running one", corev1.RestartPolicyAlways, nil, []corev1.ContainerStatus{running, backoff}, corev1.PodRunning},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := phase(pod(tc.policy), tc.inits, tc.apps, true); got != tc.want {
				t.Errorf("phase = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestGracePeriod(t *testing.T) {
	five, zero := int64(5), int64(0)
	p := &corev1.Pod{Spec: corev1.PodSpec{TerminationGracePeriodSeconds: &five}}
	if g := gracePeriod(p, nil); g.Seconds() != 5 {
		t.Errorf("the pod's own grace: %s, want 5s", g)
	}
	if g := gracePeriod(p, &zero); g != 0 {
		t.Errorf("a deletion's grace 0: %s, want 0", g)
	}
	if g := gracePeriod(&corev1.Pod{}, nil); g.Seconds() != 30 {
		t.Errorf("no grace set: %s, want the default 30s", g)
	}
}

func TestPullPolicy(t *testing.T) {
	for image, want := range map[string]corev1.PullPolicy{
		"busybox":                 corev1.PullAlways,
		"busybox:latest":          corev1.PullAlways,
		"busybox:1":               corev1.PullIfNotPresent,
		"registry:5000/busybox":   corev1.PullAlways,
		"registry:5000/busybox:1": corev1.PullIfNotPresent,
		"busybox@sha256:abc":      corev1.PullIfNotPresent,
	} {
		if got := pullPolicy(&corev1.Container{Image: image}); got != want {
			t.Errorf("pullPolicy(%s) = %s, want %s", image, got, want)
		}
	}
}

func TestReadyConditionReadinessGates(t *testing.T) {
	p := &corev1.Pod{Spec: corev1.PodSpec{ReadinessGates: []corev1.PodReadinessGate{{ConditionType: "example.com/lb"}}}}
	c := readyCondition(p, true, "ContainersNotReady", "")
	if c.Status != corev1.ConditionFalse || c.Reason != "ReadinessGatesNotReady" || !strings.Contains(c.Message, "example.com/lb") {
		t.Errorf("gate missing: %+v, want False with ReadinessGatesNotReady naming the gate", c)
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: "example.com/lb", Status: corev1.ConditionTrue}}
	if c := readyCondition(p, true, "", ""); c.Status != corev1.ConditionTrue {
		t.Errorf("gate met: %+v, want True", c)
	}
	if c := readyCondition(p, false, "ContainersNotReady", "x"); c.Status != corev1.ConditionFalse || c.Reason != "ContainersNotReady" {
		t.Errorf("containers not ready: %+v", c)
	}
}
