package admission

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/util/version"
)

// ReasonUnsupportedPodSpec rejects a pod that asks for something unitlet does not apply
// (the kubelet would): running it without would silently drop what the pod asked for.
const ReasonUnsupportedPodSpec = "UnsupportedPodSpec"

// Runtime is what admission knows of the node's container runtime: its name and version
// (CRI Version), whether its default handler reports user namespace support, and which
// handlers support recursive read-only mounts (CRI Status's runtime handlers; containerd
// 1.6 reports no handlers at all).
type Runtime struct {
	Name, Version string
	// UserNamespaces: the default handler supports user namespaces; UserNamespacesBy
	// says it of each handler.
	UserNamespaces   bool
	UserNamespacesBy map[string]bool
	// RecursiveReadOnly are the runtime handlers ("" the default) that support recursive
	// read-only mounts.
	RecursiveReadOnly map[string]bool
	// SupplementalGroupsPolicy: the runtime honours supplementalGroupsPolicy Strict.
	SupplementalGroupsPolicy bool
	// Host is the node's security modules.
	Host Host
}

// imageVolumes reports whether the runtime mounts images (CRI image volumes): containerd
// from 2.1; another runtime is taken at its word and fails the container if it cannot.
func (r Runtime) imageVolumes() bool {
	if r.Name != "containerd" {
		return true
	}
	v := strings.TrimPrefix(r.Version, "v")
	if i := strings.IndexAny(v, "~-+"); i >= 0 {
		v = v[:i]
	}
	parsed, err := version.ParseGeneric(v)
	return err == nil && parsed.AtLeast(version.MajorMinor(2, 1))
}

func (r Runtime) String() string {
	if r.Name == "" {
		return "of unknown name and version"
	}
	return r.Name + " " + r.Version
}

// unsupported names the first field of pod that unitlet cannot honour, and why; "" when
// there is none. Each is a feature the kubelet of v1.36 has on by default.
func unsupported(pod *corev1.Pod, rt Runtime) (string, string) {
	spec := field.NewPath("spec")
	if pod.Spec.HostUsers != nil && !*pod.Spec.HostUsers && !rt.UserNamespaces {
		// The kubelet runs such a pod in its own user namespace where the runtime
		// supports them; without, running it in the host's would be a quiet downgrade.
		// (A RuntimeClass handler without support fails the sandbox, as on the kubelet.)
		why := fmt.Sprintf("the container runtime, %s, reports no support for them", rt)
		return spec.Child("hostUsers").String(), "user namespaces (" + why + ") are not supported"
	}
	for i, v := range pod.Spec.Volumes {
		if v.Image != nil && !rt.imageVolumes() {
			return spec.Child("volumes").Index(i).Child("image").String(), fmt.Sprintf("image volumes (the container runtime, %s, does not mount images; containerd 2.1 or later does) are not supported", rt)
		}
	}
	if len(pod.Spec.ResourceClaims) > 0 {
		return spec.Child("resourceClaims").String(), "dynamic resource allocation is not supported"
	}
	check := func(c *corev1.Container, p *field.Path, init bool) (string, string) {
		switch {
		case len(c.Resources.Claims) > 0:
			return p.Child("resources", "claims").String(), "dynamic resource allocation is not supported"
		case slices.ContainsFunc(c.RestartPolicyRules, func(r corev1.ContainerRestartRule) bool {
			return r.Action != corev1.ContainerRestartRuleActionRestart && r.Action != corev1.ContainerRestartRuleActionRestartAllContainers
		}):
			// An action newer than v1.36's Restart and RestartAllContainers.
			return p.Child("restartPolicyRules").String(), "restart rules with an action other than Restart and RestartAllContainers are not supported"
		case c.Lifecycle != nil && c.Lifecycle.StopSignal != nil:
			return p.Child("lifecycle", "stopSignal").String(), "container stop signals are not supported"
		}
		return "", ""
	}
	for i := range pod.Spec.InitContainers {
		if f, why := check(&pod.Spec.InitContainers[i], spec.Child("initContainers").Index(i), true); f != "" {
			return f, why
		}
	}
	for i := range pod.Spec.Containers {
		if f, why := check(&pod.Spec.Containers[i], spec.Child("containers").Index(i), false); f != "" {
			return f, why
		}
	}
	return "", ""
}
