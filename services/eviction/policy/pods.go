package policy

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
)

// Reason is the pod status reason, and the admission refusal reason, of an eviction.
const Reason = "Evicted"

// Annotation keys the kubelet puts on the event of an eviction for node pressure.
const (
	// AnnotationOffendingContainers lists, comma-separated, the containers using more of
	// the starved resource than they request.
	AnnotationOffendingContainers = "offending_containers"
	// AnnotationOffendingContainersUsage lists those containers' usage, in the same order.
	AnnotationOffendingContainersUsage = "offending_containers_usage"
	// AnnotationOffendingPod is the pod's name when it has pod-level memory requests.
	AnnotationOffendingPod = "offending_pod"
	// AnnotationOffendingPodUsage is then the pod's memory usage.
	AnnotationOffendingPodUsage = "offending_pod_usage"
	// AnnotationStarvedResource is the resource the node was low on.
	AnnotationStarvedResource = "starved_resource"
)

// Pod annotations that tell where a pod came from.
const (
	// SourceAnnotation is the kubelet's annotation naming a pod's source: "api" for a pod
	// from the API server, "file" or "http" for a static pod.
	SourceAnnotation = "kubernetes.io/config.source"
	// sourceAPI is SourceAnnotation's value for a pod from the API server.
	sourceAPI = "api"
	// SystemCriticalPriority is the priority from which a pod is critical
	// (system-cluster-critical and system-node-critical are at or above it).
	SystemCriticalPriority int32 = 2000000000
)

// ContainerUsage is one container's measured usage.
type ContainerUsage struct {
	Name string
	// Memory is the container's working set, in bytes.
	Memory int64
	// Rootfs and Logs are the bytes used by the container's writable layer and its logs.
	Rootfs, Logs int64
	// RootfsInodes and LogsInodes are the inodes they use (the inode signals rank by them).
	RootfsInodes, LogsInodes int64
}

// PodStats is a pod with its measured usage.
type PodStats struct {
	Pod *corev1.Pod
	// Memory is the pod's working set, in bytes.
	Memory int64
	// Containers are the pod's containers' usage (init containers included while they
	// run), in the order measured.
	Containers []ContainerUsage
	// Volumes is the bytes used by each of the pod's volumes that could be measured
	// (emptyDir of any medium, configMap, ...), by volume name.
	Volumes map[string]int64
	// VolumeInodes is the inodes used by those volumes, by volume name.
	VolumeInodes map[string]int64
	// EphemeralStorage is the pod's total local ephemeral storage use as the kubelet's
	// summary counts it (the containers' writable layers and logs, local ephemeral
	// volumes, pod logs, its /etc/hosts). When nil, LocalStorageViolations sums the
	// containers' Rootfs and Logs and the local ephemeral volumes (emptyDir on disk,
	// configMap, gitRepo) in Volumes.
	EphemeralStorage *int64
	// Processes is the number of processes in the pod.
	Processes int64
	// Static is true for a pod from a static manifest. IsCritical also finds it from the
	// kubernetes.io/config.source annotation.
	Static bool
	// NoStats is true when the pod's usage could not be measured: the kubelet then ranks it
	// first for every resource but PIDs (where priority comes first), gives no usage in its
	// message, and skips it for local storage limits.
	NoStats bool
}

// isStatic tells whether p came from a static manifest rather than the API server.
func isStatic(p *corev1.Pod) bool {
	src, ok := p.Annotations[SourceAnnotation]
	return ok && src != sourceAPI
}

// isMirror tells whether p is the mirror of a static pod.
func isMirror(p *corev1.Pod) bool {
	_, ok := p.Annotations[corev1.MirrorPodAnnotationKey]
	return ok
}

// IsCritical is the kubelet's IsCriticalPod: a static pod (its
// kubernetes.io/config.source annotation says other than "api"), a mirror pod, or a pod
// whose priority is at least SystemCriticalPriority. The kubelet neither evicts a critical
// pod for pressure nor refuses to admit it.
func IsCritical(p *corev1.Pod) bool {
	if p == nil {
		return false
	}
	return isStatic(p) || isMirror(p) || (p.Spec.Priority != nil && *p.Spec.Priority >= SystemCriticalPriority)
}

// critical is IsCritical for a measured pod, which also knows it is static.
func (ps PodStats) critical() bool {
	return ps.Static || IsCritical(ps.Pod)
}

// requestOf is the pod's request of a resource as the kubelet's eviction ranking reads
// it: its pod-level requests when the pod sets pod-level resources (the containers' are
// then ignored, for every resource), else the containers' by the sidecar-aware rule, plus
// the pod's overhead when that is not zero.
func requestOf(p *corev1.Pod, name corev1.ResourceName) resource.Quantity {
	reqs := resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{
		SkipContainerLevelResources: resourcehelper.IsPodLevelResourcesSet(p),
		ExcludeOverhead:             true,
	})
	q := resource.Quantity{Format: resource.BinarySI}
	if r, ok := reqs[name]; ok {
		q.Add(r)
	}
	if o, ok := p.Spec.Overhead[name]; ok && !q.IsZero() {
		q.Add(o)
	}
	return q
}

// fsParts says which of a pod's disk usage counts for a disk signal.
type fsParts struct{ root, logs, volumes bool }

// diskParts is what the kubelet measures of a pod for disk signal s under layout, and
// whether s is a disk signal. Images are on the list for some signals in the kubelet, but
// a pod's usage has no image share, so they count nothing.
func diskParts(s Signal, layout FsLayout) (fsParts, bool) {
	nodeFs := s == SignalNodeFsAvailable || s == SignalNodeFsInodesFree
	imageFs := s == SignalImageFsAvailable || s == SignalImageFsInodesFree
	containerFs := s == SignalContainerFsAvailable || s == SignalContainerFsInodesFree
	if !nodeFs && !imageFs && !containerFs {
		return fsParts{}, false
	}
	switch {
	case layout.DedicatedImageFs && !layout.SplitContainerFs:
		if nodeFs {
			return fsParts{logs: true, volumes: true}, true
		}
		return fsParts{root: true}, true
	case layout.DedicatedImageFs && layout.SplitContainerFs:
		if imageFs {
			return fsParts{}, true
		}
		return fsParts{root: true, logs: true, volumes: true}, true
	default:
		return fsParts{root: true, logs: true, volumes: true}, true
	}
}

// isLocalEphemeral is the kubelet's local ephemeral volume: gitRepo, emptyDir on disk,
// configMap.
func isLocalEphemeral(v corev1.Volume) bool {
	return v.GitRepo != nil || (v.EmptyDir != nil && v.EmptyDir.Medium == corev1.StorageMediumDefault) || v.ConfigMap != nil
}

// diskUsage is the pod's usage of a disk resource (ephemeral-storage in bytes, or
// inodes) counting parts; volumes are the pod's hostPath and local ephemeral volumes.
func diskUsage(ps PodStats, parts fsParts, inodes bool) resource.Quantity {
	var n int64
	for _, c := range ps.Containers {
		if parts.root {
			n += pick(inodes, c.RootfsInodes, c.Rootfs)
		}
		if parts.logs {
			n += pick(inodes, c.LogsInodes, c.Logs)
		}
	}
	if parts.volumes {
		for _, v := range ps.Pod.Spec.Volumes {
			if v.HostPath != nil || isLocalEphemeral(v) {
				n += pick(inodes, ps.VolumeInodes[v.Name], ps.Volumes[v.Name])
			}
		}
	}
	if inodes {
		return *resource.NewQuantity(n, resource.DecimalSI)
	}
	return *resource.NewQuantity(n, resource.BinarySI)
}

func pick(first bool, a, b int64) int64 {
	if first {
		return a
	}
	return b
}

// cmpTrueFirst orders true before false.
func cmpTrueFirst(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return -1
	default:
		return 1
	}
}

// cmpPriority orders lower priority first.
func cmpPriority(a, b PodStats) int {
	return cmp.Compare(corev1helpers.PodPriority(a.Pod), corev1helpers.PodPriority(b.Pod))
}

// cmpName orders by namespace, then name, then UID: the tie-break that keeps Rank stable.
func cmpName(a, b PodStats) int {
	return cmp.Or(
		cmp.Compare(a.Pod.Namespace, b.Pod.Namespace),
		cmp.Compare(a.Pod.Name, b.Pod.Name),
		cmp.Compare(a.Pod.UID, b.Pod.UID),
	)
}

// Rank orders pods for eviction on signal s as the kubelet does, first to evict first,
// leaving out critical pods (the kubelet never evicts them for pressure) and entries
// without a Pod. It returns nil for a signal it cannot rank for.
//
//   - memory signals: pods using more memory than they request first, then lower
//     priority first, then the most memory used above the request first;
//   - disk signals: the same with the pod's disk usage and its ephemeral-storage request.
//     On one filesystem the usage is the writable layers, the logs and the hostPath and
//     local ephemeral volumes (emptyDir on disk, configMap, gitRepo) for every disk
//     signal. With a dedicated image filesystem, nodefs counts logs and volumes, imagefs
//     and containerfs the writable layers. With the writable layers split from the
//     images, nodefs and containerfs count all three and imagefs nothing (a pod has no
//     share of the images). For the inode signals usage is in inodes, measured against
//     the pod's (absent) inodes request for the first key and, as the kubelet does, less
//     its ephemeral-storage request for the last;
//   - pid.available: lower priority first, then the most processes first.
//
// A pod with NoStats comes first within its priority for PIDs and before every measured
// pod otherwise. Ties keep namespace/name order.
func Rank(s Signal, pods []PodStats, layout FsLayout) []PodStats {
	var cmps []func(a, b PodStats) int
	found := func(a, b PodStats) (int, bool) {
		if a.NoStats || b.NoStats {
			return cmpTrueFirst(a.NoStats, b.NoStats), true
		}
		return 0, false
	}
	switch parts, disk := diskParts(s, layout); {
	case isMemory(s):
		exceeds := func(ps PodStats) bool {
			return resource.NewQuantity(ps.Memory, resource.BinarySI).Cmp(requestOf(ps.Pod, corev1.ResourceMemory)) > 0
		}
		above := func(ps PodStats) resource.Quantity {
			q := *resource.NewQuantity(ps.Memory, resource.BinarySI)
			q.Sub(requestOf(ps.Pod, corev1.ResourceMemory))
			return q
		}
		cmps = []func(a, b PodStats) int{
			func(a, b PodStats) int {
				if c, ok := found(a, b); ok {
					return c
				}
				return cmpTrueFirst(exceeds(a), exceeds(b))
			},
			cmpPriority,
			func(a, b PodStats) int {
				if c, ok := found(a, b); ok {
					return c
				}
				qa, qb := above(a), above(b)
				return qb.Cmp(qa)
			},
		}
	case disk:
		inodes := Resource(s) == ResourceInodes
		res := Resource(s)
		exceeds := func(ps PodStats) bool {
			u := diskUsage(ps, parts, inodes)
			return u.Cmp(requestOf(ps.Pod, res)) > 0
		}
		above := func(ps PodStats) resource.Quantity {
			u := diskUsage(ps, parts, inodes)
			u.Sub(requestOf(ps.Pod, corev1.ResourceEphemeralStorage))
			return u
		}
		cmps = []func(a, b PodStats) int{
			func(a, b PodStats) int {
				if c, ok := found(a, b); ok {
					return c
				}
				return cmpTrueFirst(exceeds(a), exceeds(b))
			},
			cmpPriority,
			func(a, b PodStats) int {
				if c, ok := found(a, b); ok {
					return c
				}
				qa, qb := above(a), above(b)
				return qb.Cmp(qa)
			},
		}
	case s == SignalPIDAvailable:
		cmps = []func(a, b PodStats) int{
			cmpPriority,
			func(a, b PodStats) int {
				if c, ok := found(a, b); ok {
					return c
				}
				return cmp.Compare(b.Processes, a.Processes)
			},
		}
	default:
		return nil
	}
	out := make([]PodStats, 0, len(pods))
	for _, ps := range pods {
		if ps.Pod != nil && !ps.critical() {
			out = append(out, ps)
		}
	}
	slices.SortStableFunc(out, func(a, b PodStats) int {
		for _, c := range cmps {
			if r := c(a, b); r != 0 {
				return r
			}
		}
		return cmpName(a, b)
	})
	return out
}

// Message is the kubelet's status message for a pod evicted to reclaim signal s, and the
// annotations of its eviction event. t is the met threshold reported on and obs its
// signal's observation: the kubelet reports the first actionable threshold of s's
// resource, which is the threshold it reclaims, Result.Actionable[0]. For example:
//
//	The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. Container x was using 200Mi, request is 0, has larger consumption of memory.
//
// (with a trailing space). Each container using more memory, or more ephemeral storage
// (writable layer plus logs), than it requests is named, and listed in the
// offending_containers annotations; a pod with pod-level memory requests also gets a
// sentence of its own and the offending_pod annotations. For a NoStats pod the message
// stops after the available amount and the annotations are empty.
func Message(s Signal, t Threshold, obs Observation, p PodStats) (message string, annotations map[string]string) {
	res := Resource(s)
	annotations = map[string]string{}
	threshold := t.Resolve(obs.Capacity)
	message = fmt.Sprintf("The node was low on resource: %v. Threshold quantity: %v, available: %v. ", res, threshold.String(), obs.Available.String())
	if p.NoStats || p.Pod == nil {
		return message, annotations
	}
	pod := p.Pod
	if res == corev1.ResourceMemory && resourcehelper.IsPodLevelResourcesSet(pod) {
		if req, ok := pod.Spec.Resources.Requests[res]; ok {
			usage := resource.NewQuantity(p.Memory, resource.BinarySI).String()
			message += fmt.Sprintf("Pod %s was using %s, request is %s, has larger consumption of %v. ", pod.Name, usage, req.String(), res)
			annotations[AnnotationOffendingPod] = pod.Name
			annotations[AnnotationOffendingPodUsage] = usage
		}
	}
	specs := slices.Concat(pod.Spec.Containers, pod.Spec.InitContainers)
	var names, usages []string
	for _, cu := range p.Containers {
		i := slices.IndexFunc(specs, func(c corev1.Container) bool { return c.Name == cu.Name })
		if i < 0 {
			continue
		}
		var usage *resource.Quantity
		switch res {
		case corev1.ResourceMemory:
			usage = resource.NewQuantity(cu.Memory, resource.BinarySI)
		case corev1.ResourceEphemeralStorage:
			usage = resource.NewQuantity(cu.Rootfs+cu.Logs, resource.BinarySI)
		}
		req := specs[i].Resources.Requests[res]
		if usage != nil && usage.Cmp(req) > 0 {
			message += fmt.Sprintf("Container %s was using %s, request is %s, has larger consumption of %v. ", cu.Name, usage.String(), req.String(), res)
			names = append(names, cu.Name)
			usages = append(usages, usage.String())
		}
	}
	annotations[AnnotationOffendingContainers] = strings.Join(names, ",")
	annotations[AnnotationOffendingContainersUsage] = strings.Join(usages, ",")
	annotations[AnnotationStarvedResource] = string(res)
	return message, annotations
}

// GracePeriod is the grace period override, in seconds, the kubelet gives pod p evicted
// for threshold t: ImmediateGracePeriodSeconds (1) for a hard threshold (or a soft one
// with a zero grace period), and for a soft one cfg.MaxPodGracePeriod, or the pod's
// terminationGracePeriodSeconds when that is less. A MaxPodGracePeriod of 0 thus gives 0,
// as in the kubelet, whose runtime then applies its own minimum.
func GracePeriod(t Threshold, cfg Config, p *corev1.Pod) int64 {
	if t.hard() {
		return ImmediateGracePeriodSeconds
	}
	g := cfg.MaxPodGracePeriod
	if p != nil && p.Spec.TerminationGracePeriodSeconds != nil {
		g = min(g, *p.Spec.TerminationGracePeriodSeconds)
	}
	return g
}

// isBestEffort is whether p's QoS class is BestEffort: its status says so, or when the
// status has no class, neither its pod-level resources (when it has any) nor else its
// containers and init containers request or limit any CPU or memory.
func isBestEffort(p *corev1.Pod) bool {
	if p.Status.QOSClass != "" {
		return p.Status.QOSClass == corev1.PodQOSBestEffort
	}
	positive := func(l corev1.ResourceList) bool {
		for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			if q, ok := l[name]; ok && q.Sign() > 0 {
				return true
			}
		}
		return false
	}
	if p.Spec.Resources != nil {
		return !positive(p.Spec.Resources.Requests) && !positive(p.Spec.Resources.Limits)
	}
	for _, c := range slices.Concat(p.Spec.Containers, p.Spec.InitContainers) {
		if positive(c.Resources.Requests) || positive(c.Resources.Limits) {
			return false
		}
	}
	return true
}

// memoryPressureTaint is the taint a BestEffort pod must tolerate to be admitted under
// memory pressure.
var memoryPressureTaint = corev1.Taint{Key: corev1.TaintNodeMemoryPressure, Effect: corev1.TaintEffectNoSchedule}

// Admit is the kubelet's eviction admission verdict for a new pod on a node with the given
// pressure conditions. With none, or for a critical pod, it admits. Under memory pressure
// alone it admits a pod that is not BestEffort, and a BestEffort pod that tolerates the
// node.kubernetes.io/memory-pressure:NoSchedule taint. Otherwise it refuses, with reason
// "Evicted" and the message "The node had condition: [MemoryPressure]. " listing the
// conditions in the order given.
func Admit(p *corev1.Pod, conditions []corev1.NodeConditionType) (admit bool, reason, message string) {
	if len(conditions) == 0 || IsCritical(p) {
		return true, "", ""
	}
	if p != nil && len(conditions) == 1 && conditions[0] == corev1.NodeMemoryPressure {
		if !isBestEffort(p) {
			return true, "", ""
		}
		if corev1helpers.TolerationsTolerateTaint(logr.Discard(), p.Spec.Tolerations, &memoryPressureTaint, false) {
			return true, "", ""
		}
	}
	return false, Reason, fmt.Sprintf("The node had condition: %v. ", conditions)
}
