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
		{"runtime class", "spec.runtimeClassName", func(p *corev1.Pod) { p.Spec.RuntimeClassName = ptr.To("gvisor") }},
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
			r := Admit(testPod("p", tc.opt), testNode(), nil, 110, nil)
			if r.Admit || r.Reason != ReasonUnsupportedPodSpec || !strings.Contains(r.Message, tc.field+": ") {
				t.Errorf("got %+v, want rejected %s naming %s", r, ReasonUnsupportedPodSpec, tc.field)
			}
		})
	}
	sidecar := testPod("s", func(p *corev1.Pod) {
		p.Spec.HostUsers = ptr.To(true)
		p.Spec.InitContainers = []corev1.Container{{Name: "side", Image: "busybox", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)}}
	})
	if r := Admit(sidecar, testNode(), nil, 110, nil); !r.Admit {
		t.Errorf("a native sidecar with hostUsers true: %+v, want admitted", r)
	}
}
