package policy

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
)

// The kinds of local storage violation, as the kubelet names them in its eviction metric.
const (
	// ViolationEmptyDir is an emptyDir volume over its sizeLimit.
	ViolationEmptyDir = "emptydirfs.limit"
	// ViolationPod is a pod over the sum of its containers' ephemeral-storage limits.
	ViolationPod = "ephemeralpodfs.limit"
	// ViolationContainer is a container over its own ephemeral-storage limit.
	ViolationContainer = "ephemeralcontainerfs.limit"
)

// Violation is a pod to evict for going over a local storage limit.
type Violation struct {
	Pod PodStats
	// Message is the pod's status message, the kubelet's text.
	Message string
	// Annotations are the eviction event's annotations: none, as the kubelet gives none
	// for these evictions.
	Annotations map[string]string
	// Kind is ViolationEmptyDir, ViolationPod or ViolationContainer.
	Kind string
}

// LocalStorageViolations finds the pods the kubelet evicts for local storage use
// (localStorageCapacityIsolation), in the order given, one violation per pod, checked in
// the kubelet's order:
//
//   - an emptyDir volume using more than its sizeLimit (the first such volume of the pod
//     spec): "Usage of EmptyDir volume "cache" exceeds the limit "1Gi". ";
//   - the pod's ephemeral storage (PodStats.EphemeralStorage) above its ephemeral-storage
//     limit, the sum of its containers' by the sidecar-aware rule: "Pod ephemeral local
//     storage usage exceeds the total limit of containers 2Gi. ";
//   - a container (not an init container) whose logs, and writable layer unless the
//     node has a dedicated image filesystem, are above its ephemeral-storage limit:
//     "Container app exceeded its local ephemeral storage limit "1Gi". ".
//
// Critical pods, NoStats pods and entries without a Pod are left out, as the kubelet
// neither measures nor evicts them. The kubelet evicts every pod found, each with
// ImmediateGracePeriodSeconds, and skips pressure eviction in a round where it evicted
// any; it makes this check only when Config.LocalStorageCapacityIsolation is on.
func LocalStorageViolations(pods []PodStats, layout FsLayout) []Violation {
	var out []Violation
	for _, ps := range pods {
		if ps.Pod == nil || ps.NoStats || ps.critical() {
			continue
		}
		if msg, ok := emptyDirViolation(ps); ok {
			out = append(out, Violation{Pod: ps, Message: msg, Kind: ViolationEmptyDir})
		} else if msg, ok := podStorageViolation(ps); ok {
			out = append(out, Violation{Pod: ps, Message: msg, Kind: ViolationPod})
		} else if msg, ok := containerStorageViolation(ps, layout); ok {
			out = append(out, Violation{Pod: ps, Message: msg, Kind: ViolationContainer})
		}
	}
	return out
}

// emptyDirViolation finds the first emptyDir volume over its positive sizeLimit.
func emptyDirViolation(ps PodStats) (string, bool) {
	for _, v := range ps.Pod.Spec.Volumes {
		if v.EmptyDir == nil {
			continue
		}
		used, measured := ps.Volumes[v.Name]
		limit := v.EmptyDir.SizeLimit
		if !measured || limit == nil || limit.Sign() <= 0 {
			continue
		}
		if resource.NewQuantity(used, resource.BinarySI).Cmp(*limit) > 0 {
			return fmt.Sprintf("Usage of EmptyDir volume %q exceeds the limit %q. ", v.Name, limit.String()), true
		}
	}
	return "", false
}

// podEphemeralStorage is the pod's ephemeral storage use: EphemeralStorage, or the
// containers' writable layers and logs and the local ephemeral volumes.
func podEphemeralStorage(ps PodStats) int64 {
	if ps.EphemeralStorage != nil {
		return *ps.EphemeralStorage
	}
	var n int64
	for _, c := range ps.Containers {
		n += c.Rootfs + c.Logs
	}
	for _, v := range ps.Pod.Spec.Volumes {
		if isLocalEphemeral(v) {
			n += ps.Volumes[v.Name]
		}
	}
	return n
}

// podStorageViolation checks the pod's use against its ephemeral-storage limit.
func podStorageViolation(ps PodStats) (string, bool) {
	limit, ok := resourcehelper.PodLimits(ps.Pod, resourcehelper.PodResourcesOptions{})[corev1.ResourceEphemeralStorage]
	if !ok {
		return "", false
	}
	if resource.NewQuantity(podEphemeralStorage(ps), resource.BinarySI).Cmp(limit) > 0 {
		return fmt.Sprintf("Pod ephemeral local storage usage exceeds the total limit of containers %s. ", limit.String()), true
	}
	return "", false
}

// containerStorageViolation finds the first measured container over its non-zero
// ephemeral-storage limit.
func containerStorageViolation(ps PodStats, layout FsLayout) (string, bool) {
	limits := map[string]*resource.Quantity{}
	for _, c := range ps.Pod.Spec.Containers {
		if l := c.Resources.Limits.StorageEphemeral(); l != nil && l.Value() != 0 {
			limits[c.Name] = l
		}
	}
	for _, cu := range ps.Containers {
		used := cu.Logs
		if !layout.DedicatedImageFs {
			used += cu.Rootfs
		}
		if l, ok := limits[cu.Name]; ok && l.Cmp(*resource.NewQuantity(used, resource.BinarySI)) < 0 {
			return fmt.Sprintf("Container %s exceeded its local ephemeral storage limit %q. ", cu.Name, l.String()), true
		}
	}
	return "", false
}
