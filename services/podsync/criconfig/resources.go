package criconfig

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/unitlet/unitlet/services/podsync/cgroups"
)

// cfsPeriodUsec is the CFS period the kubelet uses: 100ms.
const cfsPeriodUsec = 100000

// OOM score adjustments per QoS class, as the kubelet sets them.
const (
	oomScoreAdjGuaranteed = -997
	oomScoreAdjBestEffort = 1000
)

const (
	// systemNodeCriticalClass is the priority class of a node-critical pod.
	systemNodeCriticalClass       = "system-node-critical"
	resourceHugePagesPrefixLength = len(corev1.ResourceHugePagesPrefix)
)

// CPUShares converts milli-CPUs to cgroup cpu.shares, the kubelet's rule
// (cgroups.MilliCPUToShares): 1024 per CPU, at least 2 (also for zero), at most 262144.
func CPUShares(milliCPU int64) int64 {
	return int64(cgroups.MilliCPUToShares(milliCPU))
}

// CPUQuota converts a milli-CPU limit to a CFS quota in microseconds per period; zero
// means no limit. A quota is at least 1ms.
func CPUQuota(milliCPU, periodUsec int64) int64 {
	return cgroups.MilliCPUToQuota(milliCPU, periodUsec)
}

// linuxResources is the common part of container, sandbox and overhead resources.
// A nil cpuRequest means "not set", when the limit stands in for it.
func linuxResources(cpuRequest *int64, cpuLimit, memLimit int64) *runtimeapi.LinuxContainerResources {
	r := &runtimeapi.LinuxContainerResources{
		CpuPeriod: cfsPeriodUsec,
		CpuQuota:  CPUQuota(cpuLimit, cfsPeriodUsec),
	}
	if cpuRequest == nil {
		r.CpuShares = CPUShares(cpuLimit)
	} else {
		r.CpuShares = CPUShares(*cpuRequest)
	}
	if memLimit != 0 {
		r.MemoryLimitInBytes = memLimit
	}
	return r
}

// ContainerResources are the Linux resources of c in pod, as its container is created
// with them: what an in-place resize gives a running container.
func ContainerResources(pod *corev1.Pod, c *corev1.Container, o Options) *runtimeapi.LinuxContainerResources {
	return containerResources(pod, c, o)
}

// containerResources maps the container's requests and limits (falling back to the
// pod-level limits when the container sets none) to Linux resources.
func containerResources(pod *corev1.Pod, c *corev1.Container, o Options) *runtimeapi.LinuxContainerResources {
	var cpuReq *int64
	if q, ok := c.Resources.Requests[corev1.ResourceCPU]; ok {
		m := q.MilliValue()
		cpuReq = &m
	}
	cpuLim := c.Resources.Limits.Cpu()
	memLim := c.Resources.Limits.Memory()
	if pr := pod.Spec.Resources; pr != nil {
		if cpuLim.IsZero() {
			cpuLim = pr.Limits.Cpu()
		}
		if memLim.IsZero() {
			memLim = pr.Limits.Memory()
		}
	}
	r := linuxResources(cpuReq, cpuLim.MilliValue(), memLim.Value())
	r.OomScoreAdj = OOMScoreAdj(pod, c, o.MemoryCapacity)
	r.HugepageLimits = hugepageLimits(pod, c, o.HugePageSizes)
	if o.OOMKillGroup {
		r.Unified = map[string]string{"memory.oom.group": "1"}
	}
	if limit, ok := limitedSwap(pod, c, o); ok {
		if r.Unified == nil {
			r.Unified = map[string]string{}
		}
		r.Unified["memory.swap.max"] = strconv.FormatInt(limit, 10)
	} else {
		noSwap(r, o)
	}
	return r
}

// MaySwap reports whether c of pod may swap (memorySwap.swapBehavior LimitedSwap applies
// to it): the kubelet refuses to resize such a container's memory request in place.
func MaySwap(pod *corev1.Pod, c *corev1.Container, o Options) bool {
	_, ok := limitedSwap(pod, c, o)
	return ok
}

// limitedSwap is the swap the container may use under memorySwap.swapBehavior LimitedSwap,
// as the kubelet gives it: on cgroup v2 with a swap controller, to a container of a
// Burstable pod that is not critical and whose memory request is set and below its limit
// (or it has none), its request's share of the node's memory, of the node's swap. ok is
// false when the container gets none (NoSwap).
func limitedSwap(pod *corev1.Pod, c *corev1.Container, o Options) (limit int64, ok bool) {
	if !o.LimitedSwap || !o.SwapController || o.CgroupV1 || IsCriticalPod(pod) || QOSClass(pod) != corev1.PodQOSBurstable {
		return 0, false
	}
	req, lim := c.Resources.Requests.Memory(), c.Resources.Limits.Memory()
	if req.IsZero() && lim.IsZero() || req.Cmp(*lim) == 0 {
		return 0, false
	}
	if o.MemoryCapacity <= 0 || req.Value() > o.MemoryCapacity {
		return 0, false
	}
	return int64(float64(req.Value()) / float64(o.MemoryCapacity) * float64(o.SwapCapacity)), true
}

// noSwap keeps the container from swapping, the kubelet's NoSwap (memorySwap.swapBehavior's
// default) where the kernel has a swap controller: memory.swap.max 0 on cgroup v2, and on
// v1 a memory+swap limit equal to the memory limit.
func noSwap(r *runtimeapi.LinuxContainerResources, o Options) {
	switch {
	case !o.SwapController:
	case o.CgroupV1:
		r.MemorySwapLimitInBytes = r.MemoryLimitInBytes
	default:
		if r.Unified == nil {
			r.Unified = map[string]string{}
		}
		r.Unified["memory.swap.max"] = "0"
	}
}

// QOSClass is the pod's QoS class: status.qosClass when set, else computed from the
// CPU and memory requests and limits (pod-level ones when the pod sets them).
func QOSClass(pod *corev1.Pod) corev1.PodQOSClass {
	if pod.Status.QOSClass != "" {
		return pod.Status.QOSClass
	}
	requests := corev1.ResourceList{}
	limits := corev1.ResourceList{}
	guaranteed := true
	add := func(dst, src corev1.ResourceList) (found map[corev1.ResourceName]bool) {
		found = map[corev1.ResourceName]bool{}
		for name, q := range src {
			if (name != corev1.ResourceCPU && name != corev1.ResourceMemory) || q.Sign() <= 0 {
				continue
			}
			found[name] = true
			sum := q.DeepCopy()
			if prev, ok := dst[name]; ok {
				sum.Add(prev)
			}
			dst[name] = sum
		}
		return found
	}
	if pr := pod.Spec.Resources; pr != nil {
		add(requests, pr.Requests)
		if len(pr.Limits) > 0 {
			found := add(limits, pr.Limits)
			guaranteed = found[corev1.ResourceCPU] && found[corev1.ResourceMemory]
		}
	} else {
		for _, cs := range [][]corev1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
			for i := range cs {
				add(requests, cs[i].Resources.Requests)
				found := add(limits, cs[i].Resources.Limits)
				if !found[corev1.ResourceCPU] || !found[corev1.ResourceMemory] {
					guaranteed = false
				}
			}
		}
	}
	if len(requests) == 0 && len(limits) == 0 {
		return corev1.PodQOSBestEffort
	}
	if guaranteed && len(requests) == len(limits) {
		for name, req := range requests {
			if lim, ok := limits[name]; !ok || lim.Cmp(req) != 0 {
				guaranteed = false
				break
			}
		}
		if guaranteed {
			return corev1.PodQOSGuaranteed
		}
	}
	return corev1.PodQOSBurstable
}

// OOMScoreAdj is the container's oom_score_adj: -997 for Guaranteed and node-critical
// pods, 1000 for BestEffort, and for Burstable 1000 minus the container's memory request
// in thousandths of the node's memory, kept within 3..999.
func OOMScoreAdj(pod *corev1.Pod, c *corev1.Container, memoryCapacity int64) int64 {
	if isNodeCritical(pod) {
		return oomScoreAdjGuaranteed
	}
	switch QOSClass(pod) {
	case corev1.PodQOSGuaranteed:
		return oomScoreAdjGuaranteed
	case corev1.PodQOSBestEffort:
		return oomScoreAdjBestEffort
	}
	if memoryCapacity <= 0 {
		return oomScoreAdjBestEffort - 1
	}
	adj := 1000 - 1000*c.Resources.Requests.Memory().Value()/memoryCapacity
	if isSidecar(pod, c) {
		// A sidecar is killed no later than the regular container with the least memory.
		if minReg, ok := minRegularMemoryRequest(pod); ok {
			adj = min(adj, 1000-1000*minReg/memoryCapacity)
		}
	}
	if adj < 1000+oomScoreAdjGuaranteed {
		return 1000 + oomScoreAdjGuaranteed
	}
	if adj == oomScoreAdjBestEffort {
		return adj - 1
	}
	return adj
}

func isNodeCritical(pod *corev1.Pod) bool {
	return pod.Spec.PriorityClassName == systemNodeCriticalClass && IsCriticalPod(pod)
}

func isSidecar(pod *corev1.Pod, c *corev1.Container) bool {
	if c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		return false
	}
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == c.Name {
			return true
		}
	}
	return false
}

func minRegularMemoryRequest(pod *corev1.Pod) (int64, bool) {
	var m int64
	found := false
	for i := range pod.Spec.Containers {
		v := pod.Spec.Containers[i].Resources.Requests.Memory().Value()
		if !found || v < m {
			m, found = v, true
		}
	}
	return m, found
}

// hugepageLimits gives every host page size a limit: the container's hugepages-<size>
// limit (else the pod-level one), or 0.
func hugepageLimits(pod *corev1.Pod, c *corev1.Container, sizes []string) []*runtimeapi.HugepageLimit {
	want := map[string]uint64{}
	collect := func(l corev1.ResourceList) {
		for name, q := range l {
			size, ok := hugePageSize(name)
			if !ok {
				continue
			}
			want[size] = uint64(q.Value())
		}
	}
	if pod.Spec.Resources != nil {
		collect(pod.Spec.Resources.Limits)
	}
	collect(c.Resources.Limits)
	var out []*runtimeapi.HugepageLimit
	for _, s := range sizes {
		out = append(out, &runtimeapi.HugepageLimit{PageSize: s, Limit: want[s]})
	}
	return out
}

// hugePageSize turns a hugepages-<quantity> resource name into the runtime's page size
// notation ("2MB").
func hugePageSize(name corev1.ResourceName) (string, bool) {
	if !strings.HasPrefix(string(name), corev1.ResourceHugePagesPrefix) {
		return "", false
	}
	q, err := resource.ParseQuantity(string(name)[resourceHugePagesPrefixLength:])
	if err != nil || q.Value() <= 0 {
		return "", false
	}
	return pageSizeString(q.Value())
}

// pageSizeString writes a byte size in the largest binary unit that divides it, with
// the runtime's unit names (B, KB, MB, GB, TB, PB).
func pageSizeString(size int64) (string, bool) {
	units := []string{"B", "KB", "MB", "GB", "TB", "PB"}
	i := 0
	for size%1024 == 0 && i < len(units)-1 {
		size /= 1024
		i++
	}
	if size > 1024 && i < len(units)-1 {
		return "", false
	}
	return strconv.FormatInt(size, 10) + units[i], true
}

// HostHugePageSizes lists the huge page sizes the kernel offers, from
// /sys/kernel/mm/hugepages, in the notation Options.HugePageSizes takes. A host without
// huge page support gives none.
func HostHugePageSizes() ([]string, error) {
	const dir = "/sys/kernel/mm/hugepages"
	entries, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list huge page sizes: %w", err)
	}
	var sizes []string
	for _, e := range entries {
		kb, ok := strings.CutPrefix(e.Name(), "hugepages-")
		if !ok {
			continue
		}
		kb, ok = strings.CutSuffix(kb, "kB")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(kb, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("list huge page sizes: %s/%s: %w", dir, e.Name(), err)
		}
		if s, ok := pageSizeString(n * 1024); ok {
			sizes = append(sizes, s)
		}
	}
	return sizes, nil
}
