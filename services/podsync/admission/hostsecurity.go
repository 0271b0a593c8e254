package admission

import (
	"bytes"
	"os"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Host is what admission knows of the node's own security modules.
type Host struct {
	// AppArmor: the kernel enforces AppArmor (the kubelet's test: securityfs has
	// apparmor and the module's enabled parameter is Y).
	AppArmor bool
	// SELinux: the host runs SELinux (selinuxfs mounted).
	SELinux bool
}

// ReadHost reads the node's security modules as the kubelet does.
func ReadHost() Host {
	var h Host
	if _, err := os.Stat("/sys/kernel/security/apparmor"); err == nil {
		b, err := os.ReadFile("/sys/module/apparmor/parameters/enabled")
		h.AppArmor = err == nil && bytes.HasPrefix(b, []byte("Y"))
	}
	if _, err := os.Stat("/sys/fs/selinux/enforce"); err == nil {
		h.SELinux = true
	}
	return h
}

// ReasonAppArmor rejects a pod asking for an AppArmor profile on a host that cannot
// enforce one (the kubelet's reason and message).
const ReasonAppArmor = "AppArmor"

// needsAppArmor reports whether pod asks for an AppArmor profile other than Unconfined, in
// its or a container's securityContext or the deprecated annotations (the kubelet's rule).
func needsAppArmor(pod *corev1.Pod) bool {
	confined := func(p *corev1.AppArmorProfile) bool {
		return p != nil && p.Type != corev1.AppArmorProfileTypeUnconfined
	}
	if sc := pod.Spec.SecurityContext; sc != nil && confined(sc.AppArmorProfile) {
		return true
	}
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range cs {
			if c.SecurityContext != nil && confined(c.SecurityContext.AppArmorProfile) {
				return true
			}
		}
	}
	for _, c := range pod.Spec.EphemeralContainers {
		if c.SecurityContext != nil && confined(c.SecurityContext.AppArmorProfile) {
			return true
		}
	}
	for k, v := range pod.Annotations {
		if strings.HasPrefix(k, corev1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix) && v != corev1.DeprecatedAppArmorBetaProfileNameUnconfined {
			return true
		}
	}
	return false
}

// refuses is the kubelet's AppArmor admission, and unitlet's refusal of an SELinux
// relabelling policy on an SELinux host (unitlet does not relabel volumes); nil admits.
func (h Host) refuses(pod *corev1.Pod) *Result {
	if needsAppArmor(pod) && !h.AppArmor {
		return &Result{Reason: ReasonAppArmor, Message: "Cannot enforce AppArmor: AppArmor is not enabled on the host"}
	}
	if sc := pod.Spec.SecurityContext; h.SELinux && sc != nil && sc.SELinuxChangePolicy != nil {
		return &Result{Reason: ReasonUnsupportedPodSpec, Message: "Failed to admit pod: spec.securityContext.seLinuxChangePolicy: relabelling volumes for SELinux is not supported on this SELinux node by this node (unitlet)"}
	}
	return nil
}
