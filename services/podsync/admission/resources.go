package admission

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	resourcehelper "k8s.io/component-helpers/resource"
)

// amounts are resources in the scheduler's units: millicores for cpu, plain values for
// the rest.
type amounts struct {
	milliCPU, memory, ephemeralStorage int64
	scalar                             map[corev1.ResourceName]int64
}

func (a *amounts) add(list corev1.ResourceList) {
	for name, q := range list {
		switch name {
		case corev1.ResourceCPU:
			a.milliCPU += q.MilliValue()
		case corev1.ResourceMemory:
			a.memory += q.Value()
		case corev1.ResourceEphemeralStorage:
			a.ephemeralStorage += q.Value()
		case corev1.ResourcePods:
		default:
			if isScalarResource(name) {
				if a.scalar == nil {
					a.scalar = make(map[corev1.ResourceName]int64)
				}
				a.scalar[name] += q.Value()
			}
		}
	}
}

// fitResources checks the pod count and the pod's requests against what the node has left.
// The pod's requests are the larger of its biggest init container and the sum of its
// app and sidecar containers, plus overhead (or its pod-level requests where set);
// extended resources the node does not know are dropped, as the kubelet does for
// resources managed by the cluster rather than the node. The active pods count with the
// requests they were admitted with (status resources where the runtime reports them).
func fitResources(pod *corev1.Pod, node *corev1.Node, others []*corev1.Pod, maxPods int) []Insufficient {
	var out []Insufficient

	allowed := int64(maxPods)
	if maxPods <= 0 {
		allowed = node.Status.Allocatable.Pods().Value()
	}
	if used := int64(len(others)); used+1 > allowed {
		out = append(out, Insufficient{Resource: corev1.ResourcePods, Requested: 1, Used: used, Capacity: allowed})
	}

	var want amounts
	requests := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	for name := range requests {
		if isExtendedResource(name) {
			if _, known := node.Status.Allocatable[name]; !known {
				delete(requests, name)
			}
		}
	}
	want.add(requests)
	if want.milliCPU == 0 && want.memory == 0 && want.ephemeralStorage == 0 && len(want.scalar) == 0 {
		return out
	}

	var have, used amounts
	have.add(node.Status.Allocatable)
	for _, p := range others {
		used.add(resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{
			UseStatusResources: true,
			InPlacePodLevelResourcesVerticalScalingEnabled: true,
		}))
	}

	check := func(name corev1.ResourceName, want, used, have int64) {
		if want > 0 && want > have-used {
			out = append(out, Insufficient{Resource: name, Requested: want, Used: used, Capacity: have})
		}
	}
	check(corev1.ResourceCPU, want.milliCPU, used.milliCPU, have.milliCPU)
	check(corev1.ResourceMemory, want.memory, used.memory, have.memory)
	check(corev1.ResourceEphemeralStorage, want.ephemeralStorage, used.ephemeralStorage, have.ephemeralStorage)
	names := make([]corev1.ResourceName, 0, len(want.scalar))
	for name := range want.scalar {
		names = append(names, name)
	}
	slices.Sort(names) // the kubelet's order here is a map's; sorted is at least stable
	for _, name := range names {
		check(name, want.scalar[name], used.scalar[name], have.scalar[name])
	}
	return out
}

// isNativeResource: a name without a domain, or in the kubernetes.io domain.
func isNativeResource(name corev1.ResourceName) bool {
	return !strings.Contains(string(name), "/") || isPrefixedNativeResource(name)
}

func isPrefixedNativeResource(name corev1.ResourceName) bool {
	return strings.Contains(string(name), corev1.ResourceDefaultNamespacePrefix)
}

// isExtendedResource: a domain-qualified name outside kubernetes.io that is valid as a
// quota name (requests.<name>).
func isExtendedResource(name corev1.ResourceName) bool {
	if isNativeResource(name) || strings.HasPrefix(string(name), corev1.DefaultResourceRequestsPrefix) {
		return false
	}
	return len(validation.IsQualifiedName(corev1.DefaultResourceRequestsPrefix+string(name))) == 0
}

// isScalarResource: the resources the scheduler counts besides cpu, memory,
// ephemeral-storage and pods.
func isScalarResource(name corev1.ResourceName) bool {
	return isExtendedResource(name) || isPrefixedNativeResource(name) ||
		strings.HasPrefix(string(name), corev1.ResourceHugePagesPrefix) ||
		strings.HasPrefix(string(name), corev1.ResourceAttachableVolumesPrefix)
}
