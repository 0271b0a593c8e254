package admission

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

func TestAdmitRefusesWhatUnitletDoesNotApply(t *testing.T) {
	for _, tc := range []struct {
		name, field string
		opt         podOpt
	}{
		{"user namespace", "spec.hostUsers", func(p *corev1.Pod) { p.Spec.HostUsers = ptr.To(false) }},
		{"resource claims", "spec.resourceClaims", func(p *corev1.Pod) {
			p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu"}}
		}},
		{"container claims", "spec.containers[0].resources.claims", func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpu"}}
		}},
		{"app container restart policy", "spec.containers[0].restartPolicy", func(p *corev1.Pod) {
			p.Spec.Containers[0].RestartPolicy = ptr.To(corev1.ContainerRestartPolicyNever)
		}},
		{"restart rules", "spec.initContainers[0].restartPolicyRules", func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{Name: "i", Image: "busybox", RestartPolicyRules: []corev1.ContainerRestartRule{{Action: corev1.ContainerRestartRuleActionRestart}}}}
		}},
		{"init container restart policy Never", "spec.initContainers[0].restartPolicy", func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{Name: "i", Image: "busybox", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyNever)}}
		}},
		{"stop signal", "spec.containers[0].lifecycle.stopSignal", func(p *corev1.Pod) {
			p.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{StopSignal: ptr.To(corev1.SIGUSR1)}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Admit(testPod("p", tc.opt), testNode(), nil, 110, nil, Runtime{})
			if r.Admit || r.Reason != ReasonUnsupportedPodSpec || !strings.Contains(r.Message, tc.field+": ") {
				t.Errorf("got %+v, want rejected %s naming %s", r, ReasonUnsupportedPodSpec, tc.field)
			}
		})
	}
	sidecar := testPod("s", func(p *corev1.Pod) {
		p.Spec.HostUsers = ptr.To(true)
		p.Spec.RuntimeClassName = ptr.To("gvisor")
		p.Spec.InitContainers = []corev1.Container{{Name: "side", Image: "busybox", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)}}
	})
	if r := Admit(sidecar, testNode(), nil, 110, nil, Runtime{}); !r.Admit {
		t.Errorf("a native sidecar with hostUsers true and a RuntimeClass: %+v, want admitted", r)
	}
}

func TestAdmitRefusesUserNamespacesNamingTheRuntime(t *testing.T) {
	pod := testPod("p", func(p *corev1.Pod) { p.Spec.HostUsers = ptr.To(false) })
	for _, tc := range []struct {
		rt   Runtime
		want string
	}{
		{Runtime{Name: "containerd", Version: "1.6.20"}, "Failed to admit pod: spec.hostUsers: user namespaces (the container runtime, containerd 1.6.20, reports no support for them) are not supported by this node (unitlet)"},
		{Runtime{Name: "containerd", Version: "2.1.0", UserNamespaces: true}, "Failed to admit pod: spec.hostUsers: user namespaces (the container runtime, containerd 2.1.0, supports them, but unitlet does not allocate their ID mappings yet) are not supported by this node (unitlet)"},
	} {
		r := Admit(pod, testNode(), nil, 110, nil, tc.rt)
		if r.Admit || r.Reason != ReasonUnsupportedPodSpec || r.Message != tc.want {
			t.Errorf("runtime %+v: got %+v, want rejected %s: %q", tc.rt, r, ReasonUnsupportedPodSpec, tc.want)
		}
	}
}
