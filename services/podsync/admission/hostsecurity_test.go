package admission

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A pod asking for an AppArmor profile other than Unconfined, in its securityContext, a
// container's or the deprecated annotation, is refused on a host without AppArmor with
// the kubelet's reason and message, rather than run unconfined; Unconfined is admitted.
// seLinuxChangePolicy is refused on an SELinux host only.
func TestHostSecurityAdmission(t *testing.T) {
	withPod := func(mutate func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u"}, Spec: corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Name: "c"}}}}
		mutate(p)
		return p
	}
	runtimeDefault := &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeRuntimeDefault}
	recursive := corev1.PodSELinuxChangePolicy("Recursive")
	for _, tt := range []struct {
		name   string
		pod    *corev1.Pod
		host   Host
		reason string
	}{
		{"pod profile, no AppArmor", withPod(func(p *corev1.Pod) {
			p.Spec.SecurityContext = &corev1.PodSecurityContext{AppArmorProfile: runtimeDefault}
		}), Host{}, ReasonAppArmor},
		{"container profile, no AppArmor", withPod(func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{AppArmorProfile: runtimeDefault}
		}), Host{}, ReasonAppArmor},
		{"annotation, no AppArmor", withPod(func(p *corev1.Pod) {
			p.Annotations = map[string]string{corev1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix + "c": "runtime/default"}
		}), Host{}, ReasonAppArmor},
		{"unconfined, no AppArmor", withPod(func(p *corev1.Pod) {
			p.Spec.SecurityContext = &corev1.PodSecurityContext{AppArmorProfile: &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined}}
		}), Host{}, ""},
		{"profile, AppArmor", withPod(func(p *corev1.Pod) {
			p.Spec.SecurityContext = &corev1.PodSecurityContext{AppArmorProfile: runtimeDefault}
		}), Host{AppArmor: true}, ""},
		{"seLinuxChangePolicy, SELinux", withPod(func(p *corev1.Pod) {
			p.Spec.SecurityContext = &corev1.PodSecurityContext{SELinuxChangePolicy: &recursive}
		}), Host{SELinux: true}, ReasonUnsupportedPodSpec},
		{"seLinuxChangePolicy, no SELinux", withPod(func(p *corev1.Pod) {
			p.Spec.SecurityContext = &corev1.PodSecurityContext{SELinuxChangePolicy: &recursive}
		}), Host{}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := Admit(tt.pod, testNode(), nil, 110, nil, Runtime{Host: tt.host})
			if got.Reason != tt.reason || (tt.reason == "") != got.Admit {
				t.Errorf("Admit = %+v, want reason %q", got, tt.reason)
			}
			if tt.reason == ReasonAppArmor && got.Message != "Cannot enforce AppArmor: AppArmor is not enabled on the host" {
				t.Errorf("message %q", got.Message)
			}
		})
	}
}
