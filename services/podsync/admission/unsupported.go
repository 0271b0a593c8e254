package admission

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// ReasonUnsupportedPodSpec rejects a pod that asks for something unitlet does not apply
// (the kubelet would): running it without would silently drop what the pod asked for.
const ReasonUnsupportedPodSpec = "UnsupportedPodSpec"

// Runtime is what admission knows of the node's container runtime: its name and version
// (CRI Version) and whether its default handler reports user namespace support (CRI
// Status's runtime handlers; containerd 1.6 reports no handlers at all).
type Runtime struct {
	Name, Version  string
	UserNamespaces bool
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
	if pod.Spec.HostUsers != nil && !*pod.Spec.HostUsers {
		// The kubelet passes user namespace ID mappings to a runtime that supports them;
		// unitlet does not allocate mappings yet, so it refuses in either case and says
		// which part is missing.
		why := fmt.Sprintf("the container runtime, %s, reports no support for them", rt)
		if rt.UserNamespaces {
			why = fmt.Sprintf("the container runtime, %s, supports them, but unitlet does not allocate their ID mappings yet", rt)
		}
		return spec.Child("hostUsers").String(), "user namespaces (" + why + ") are not supported"
	}
	if len(pod.Spec.ResourceClaims) > 0 {
		return spec.Child("resourceClaims").String(), "dynamic resource allocation is not supported"
	}
	check := func(c *corev1.Container, p *field.Path, init bool) (string, string) {
		switch {
		case len(c.Resources.Claims) > 0:
			return p.Child("resources", "claims").String(), "dynamic resource allocation is not supported"
		case len(c.RestartPolicyRules) > 0:
			return p.Child("restartPolicyRules").String(), "container restart rules are not supported"
		case !init && c.RestartPolicy != nil:
			return p.Child("restartPolicy").String(), "a container-level restart policy is supported only for init containers (native sidecars)"
		case init && c.RestartPolicy != nil && *c.RestartPolicy != corev1.ContainerRestartPolicyAlways:
			return p.Child("restartPolicy").String(), fmt.Sprintf("%q is not supported; only Always (a native sidecar)", *c.RestartPolicy)
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
