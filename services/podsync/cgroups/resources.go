package cgroups

import (
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
)

// Resources are what a cgroup is given. A nil field is not written, so a new cgroup keeps
// the kernel's default (unlimited) and an existing one keeps its value. As with runc, a
// zero Memory, CPUShares or CPUPeriod is not written either.
type Resources struct {
	Memory    *int64          // bytes; -1 unlimited
	CPUShares *uint64         // cgroup v1 cpu.shares; on v2 written as cpu.weight through SharesToWeight
	CPUQuota  *int64          // microseconds per CPUPeriod; -1 unlimited, and so is 0 (MilliCPUToQuota's "no limit")
	CPUPeriod *uint64         // microseconds
	PidsLimit *int64          // -1 unlimited; 0 is written as 1, as runc does, since systemd cannot say 0
	HugePages map[int64]int64 // page size in bytes → limit in bytes
}

// The kernel's and the kubelet's CFS numbers.
const (
	minShares        = 2
	maxShares        = 262144
	sharesPerCPU     = 1024
	milliCPUPerCPU   = 1000
	minQuotaUsec     = 1000   // 1ms
	defaultPeriodUs  = 100000 // 100ms
	maxWeight        = 10000
	pidsResourceName = corev1.ResourceName("pid")
)

// MilliCPUToShares is the kubelet's cpu.shares for a CPU request: 1024 per CPU, rounded
// down, at least 2 (also for no request, which the kernel would otherwise read as 1024) and
// at most 262144.
func MilliCPUToShares(milli int64) uint64 {
	shares := milli * sharesPerCPU / milliCPUPerCPU
	return uint64(min(max(shares, minShares), maxShares))
}

// MilliCPUToQuota is the kubelet's CFS quota for a CPU limit over period microseconds,
// at least 1ms. No limit (0) gives 0: the caller decides what "unlimited" is written as.
func MilliCPUToQuota(milli, period int64) int64 {
	if milli == 0 {
		return 0
	}
	return max(milli*period/milliCPUPerCPU, minQuotaUsec)
}

// SharesToWeight is the kubelet's linear map from cpu.shares [2, 262144] to cgroup v2
// cpu.weight [1, 10000] (v1.36 still uses this one, not runc's newer quadratic curve).
// Shares below 2 count as 2.
func SharesToWeight(shares uint64) uint64 {
	if shares >= maxShares {
		return maxWeight
	}
	shares = max(shares, minShares)
	return 1 + (shares-minShares)*(maxWeight-1)/(maxShares-minShares)
}

// PodResources is the pod cgroup's Resources as the kubelet's ResourceConfigForPod
// computes them, with pod-level resources honoured (the feature is on by default in
// v1.36):
//   - requests and limits are the pod's effective ones (init containers, native sidecars,
//     overhead and pod-level resources included);
//   - every class but BestEffort gets cpu.shares from the CPU request; BestEffort gets only
//     the minimum shares;
//   - Guaranteed gets its CPU quota and memory limit; Burstable gets each only when every
//     container declares that limit or the pod sets it at pod level;
//   - with enforceCPULimits false the quota is unlimited (-1);
//   - hugepage limits come from the requests, and every page size in hugePageSizes (bytes)
//     the pod does not ask for is limited to 0;
//   - pidsLimit > 0 sets PidsLimit.
//
// cpuPeriod 0 means the kernel's default 100ms.
func PodResources(pod *corev1.Pod, qos corev1.PodQOSClass, enforceCPULimits bool, cpuPeriod uint64, pidsLimit int64, hugePageSizes []int64) Resources {
	if cpuPeriod == 0 {
		cpuPeriod = defaultPeriodUs
	}
	reqs := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	cpuLimited, memoryLimited := true, true
	limits := resourcehelper.PodLimits(pod, resourcehelper.PodResourcesOptions{
		ContainerFn: func(res corev1.ResourceList, _ resourcehelper.ContainerType) {
			if res.Cpu().IsZero() {
				cpuLimited = false
			}
			if res.Memory().IsZero() {
				memoryLimited = false
			}
		},
	})
	if resourcehelper.IsPodLevelResourcesSet(pod) {
		if !pod.Spec.Resources.Limits.Cpu().IsZero() {
			cpuLimited = true
		}
		if !pod.Spec.Resources.Limits.Memory().IsZero() {
			memoryLimited = true
		}
	}

	var cpuRequest, cpuLimit, memoryLimit int64
	if q, ok := reqs[corev1.ResourceCPU]; ok {
		cpuRequest = q.MilliValue()
	}
	if q, ok := limits[corev1.ResourceCPU]; ok {
		cpuLimit = q.MilliValue()
	}
	if q, ok := limits[corev1.ResourceMemory]; ok {
		memoryLimit = q.Value()
	}
	shares := MilliCPUToShares(cpuRequest)
	quota := MilliCPUToQuota(cpuLimit, int64(cpuPeriod))
	if !enforceCPULimits {
		quota = -1
	}

	var r Resources
	switch qos {
	case corev1.PodQOSGuaranteed:
		r.CPUShares, r.CPUQuota, r.CPUPeriod, r.Memory = &shares, &quota, &cpuPeriod, &memoryLimit
	case corev1.PodQOSBurstable:
		r.CPUShares = &shares
		if cpuLimited {
			r.CPUQuota, r.CPUPeriod = &quota, &cpuPeriod
		}
		if memoryLimited {
			r.Memory = &memoryLimit
		}
	default:
		least := uint64(minShares)
		r.CPUShares = &least
	}

	r.HugePages = hugePageLimits(reqs)
	for _, size := range hugePageSizes {
		if _, ok := r.HugePages[size]; !ok {
			r.HugePages[size] = 0
		}
	}
	if pidsLimit > 0 {
		r.PidsLimit = &pidsLimit
	}
	return r
}

// AllocatableResources is the node-allocatable cgroup's Resources for rl, as the kubelet's
// getCgroupConfig(rl, false) builds them: memory, cpu as shares, "pid" and hugepages-<size>.
// Nothing else in rl is enforced.
func AllocatableResources(rl corev1.ResourceList) Resources {
	var r Resources
	if rl == nil {
		return r
	}
	if q, ok := rl[corev1.ResourceMemory]; ok {
		v := q.Value()
		r.Memory = &v
	}
	if q, ok := rl[corev1.ResourceCPU]; ok {
		v := MilliCPUToShares(q.MilliValue())
		r.CPUShares = &v
	}
	if q, ok := rl[pidsResourceName]; ok {
		v := q.Value()
		r.PidsLimit = &v
	}
	r.HugePages = hugePageLimits(rl)
	return r
}

// hugePageLimits sums the hugepages-<size> entries of rl by page size in bytes. An entry
// whose size does not parse is not a hugepage resource and is left out.
func hugePageLimits(rl corev1.ResourceList) map[int64]int64 {
	out := map[int64]int64{}
	for name, q := range rl {
		size, ok := strings.CutPrefix(string(name), corev1.ResourceHugePagesPrefix)
		if !ok {
			continue
		}
		pageSize, err := resource.ParseQuantity(size)
		if err != nil {
			continue
		}
		out[pageSize.Value()] += q.Value()
	}
	return out
}

// hugePageUnit names a page size the way the hugetlb controller's files do: in the
// largest 1024-based unit that divides it, "2MB" for 2MiB, "1GB" for 1GiB, "64KB".
func hugePageUnit(size int64) string {
	units := []string{"B", "KB", "MB", "GB", "TB", "PB"}
	i := 0
	for size > 0 && size%1024 == 0 && i < len(units)-1 {
		size /= 1024
		i++
	}
	return strconv.FormatInt(size, 10) + units[i]
}
