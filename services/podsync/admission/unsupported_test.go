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
		{"restart rule with an action newer than v1.36's", "spec.containers[0].restartPolicyRules", func(p *corev1.Pod) {
			p.Spec.Containers[0].RestartPolicy = ptr.To(corev1.ContainerRestartPolicyNever)
			p.Spec.Containers[0].RestartPolicyRules = []corev1.ContainerRestartRule{{Action: "RestartTheNode",
				ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: corev1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}}}}
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

// hostUsers: false is refused, naming the runtime, where the runtime's default handler
// reports no user namespace support; admitted where it does.
func TestAdmitRefusesUserNamespacesNamingTheRuntime(t *testing.T) {
	pod := testPod("p", func(p *corev1.Pod) { p.Spec.HostUsers = ptr.To(false) })
	want := "Failed to admit pod: spec.hostUsers: user namespaces (the container runtime, containerd 1.6.20, reports no support for them) are not supported by this node (unitlet)"
	if r := Admit(pod, testNode(), nil, 110, nil, Runtime{Name: "containerd", Version: "1.6.20"}); r.Admit || r.Reason != ReasonUnsupportedPodSpec || r.Message != want {
		t.Errorf("containerd 1.6: got %+v, want rejected %s: %q", r, ReasonUnsupportedPodSpec, want)
	}
	if r := Admit(pod, testNode(), nil, 110, nil, Runtime{Name: "containerd", Version: "2.4.2", UserNamespaces: true}); !r.Admit {
		t.Errorf("a runtime with user namespaces: got %+v, want admitted", r)
	}
}

// Image volumes: refused on containerd before 2.1, naming the runtime; admitted on 2.1 and
// later.
func TestImageVolumesNeedARuntimeThatMountsImages(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{Volumes: []corev1.Volume{{Name: "tools", VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: "tools:1"}}}}}}
	for v, ok := range map[string]bool{"1.6.20~ds1": false, "v2.0.5": false, "v2.1.0": true, "2.4.2": true} {
		f, why := unsupported(pod, Runtime{Name: "containerd", Version: v})
		if (f == "") != ok {
			t.Errorf("containerd %s: %q %q, want admitted %t", v, f, why, ok)
		}
		if !ok && (f != "spec.volumes[0].image" || !strings.Contains(why, "containerd "+v)) {
			t.Errorf("containerd %s: %q %q, want the volume and the runtime named", v, f, why)
		}
	}
}
