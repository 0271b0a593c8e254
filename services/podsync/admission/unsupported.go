package admission

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// ReasonUnsupportedPodSpec rejects a pod that asks for something unitlet does not apply
// (the kubelet would): running it without would silently drop what the pod asked for.
const ReasonUnsupportedPodSpec = "UnsupportedPodSpec"

// unsupported names the first field of pod that unitlet cannot honour, and why; "" when
// there is none. Each is a feature the kubelet of v1.36 has on by default.
func unsupported(pod *corev1.Pod) (string, string) {
	spec := field.NewPath("spec")
	if pod.Spec.HostUsers != nil && !*pod.Spec.HostUsers {
		return spec.Child("hostUsers").String(), "user namespaces are not supported; the pod would run in the host's user namespace"
	}
	if rc := pod.Spec.RuntimeClassName; rc != nil && *rc != "" {
		return spec.Child("runtimeClassName").String(), "RuntimeClasses are not supported yet; the pod would run on the default runtime handler"
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
