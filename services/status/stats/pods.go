package stats

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// The labels the node agent puts on sandboxes and containers.
const (
	labelPodName       = "io.kubernetes.pod.name"
	labelPodNamespace  = "io.kubernetes.pod.namespace"
	labelPodUID        = "io.kubernetes.pod.uid"
	labelContainerName = "io.kubernetes.container.name"
)

// podStats lists the stats of the pods with running containers: from the runtime's pod
// sandbox stats when it has them, otherwise summed from its container stats (containerd 1.6
// answers Unimplemented for ListPodSandboxStats). Ephemeral storage is the containers'
// writable layers on the node's filesystem nodeFs (nil: sizes left out).
func (p *Provider) podStats(ctx context.Context, onlyCPUAndMemory bool, nodeFs *statsv1alpha1.FsStats) ([]statsv1alpha1.PodStats, error) {
	sandboxes, containers, err := p.listRunning(ctx)
	if err != nil {
		return nil, err
	}

	var pods map[string]*statsv1alpha1.PodStats
	sbResp, err := p.rt.ListPodSandboxStats(ctx, &runtimeapi.ListPodSandboxStatsRequest{Filter: &runtimeapi.PodSandboxStatsFilter{}})
	switch {
	case err == nil:
		pods = p.fromSandboxStats(sbResp.GetStats(), sandboxes, containers, onlyCPUAndMemory)
	default:
		// Unimplemented (containerd 1.6), or a runtime that fails the whole list for one
		// sandbox it cannot read (containerd, for a sandbox going away: "failed to decode
		// sandbox container metrics"): the pods' stats are summed from their containers'
		// rather than the summary failing.
		if status.Code(err) != codes.Unimplemented {
			p.log.Warn("pod sandbox stats failed; the pods' stats are summed from their containers' this time", "err", err)
		}
		ctrResp, cerr := p.rt.ListContainerStats(ctx, &runtimeapi.ListContainerStatsRequest{Filter: &runtimeapi.ContainerStatsFilter{}})
		if cerr != nil {
			return nil, fmt.Errorf("list container stats: %w (pod sandbox stats: %v)", cerr, err)
		}
		pods = p.fromContainerStats(ctrResp.GetStats(), sandboxes, containers, onlyCPUAndMemory)
	}
	p.sweepCPU()

	var volumes map[string][]statsv1alpha1.VolumeStats
	var volumesUsed map[string][2]uint64
	if !onlyCPUAndMemory {
		if volumes, volumesUsed, err = p.podVolumes(ctx); err != nil {
			// As the kubelet, whose volume stats are gathered apart: the summary is
			// served without them rather than not at all.
			p.log.Warn("the summary has no volume stats this time", "err", err)
			volumes, volumesUsed = nil, nil
		}
	}
	now := p.clock.Now()
	result := make([]statsv1alpha1.PodStats, 0, len(pods))
	for _, ps := range pods {
		slices.SortFunc(ps.Containers, func(a, b statsv1alpha1.ContainerStats) int { return cmp.Compare(a.Name, b.Name) })
		if !onlyCPUAndMemory {
			p.addLogs(ps, nodeFs, now)
			used, inodes := p.podFiles(ps.PodRef)
			vols := volumesUsed[ps.PodRef.UID]
			ps.VolumeStats = volumes[ps.PodRef.UID]
			ps.EphemeralStorage = ephemeralStorage(ps.Containers, nodeFs, used+vols[0], inodes+vols[1])
		}
		result = append(result, *ps)
	}
	slices.SortFunc(result, func(a, b statsv1alpha1.PodStats) int {
		return cmp.Or(cmp.Compare(a.PodRef.Namespace, b.PodRef.Namespace), cmp.Compare(a.PodRef.Name, b.PodRef.Name), cmp.Compare(a.PodRef.UID, b.PodRef.UID))
	})
	return result, nil
}

// listRunning lists the sandboxes of the pods, one per pod (its ready sandbox, or the newest
// when none is ready), and the running containers, by ID.
func (p *Provider) listRunning(ctx context.Context) (map[string]*runtimeapi.PodSandbox, map[string]*runtimeapi.Container, error) {
	sbResp, err := p.rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return nil, nil, fmt.Errorf("list pod sandboxes: %w", err)
	}
	byPod := map[statsv1alpha1.PodReference][]*runtimeapi.PodSandbox{}
	for _, sb := range sbResp.GetItems() {
		ref := podRef(sb)
		ref.UID = ""
		byPod[ref] = append(byPod[ref], sb)
	}
	sandboxes := map[string]*runtimeapi.PodSandbox{}
	for _, sbs := range byPod {
		ready := false
		for _, sb := range sbs {
			if sb.GetState() == runtimeapi.PodSandboxState_SANDBOX_READY {
				sandboxes[sb.GetId()] = sb
				ready = true
			}
		}
		if !ready {
			newest := slices.MaxFunc(sbs, func(a, b *runtimeapi.PodSandbox) int { return cmp.Compare(a.GetCreatedAt(), b.GetCreatedAt()) })
			sandboxes[newest.GetId()] = newest
		}
	}

	ctrResp, err := p.rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
		State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
	}})
	if err != nil {
		return nil, nil, fmt.Errorf("list containers: %w", err)
	}
	containers := map[string]*runtimeapi.Container{}
	for _, c := range ctrResp.GetContainers() {
		if c.GetState() == runtimeapi.ContainerState_CONTAINER_RUNNING {
			containers[c.GetId()] = c
		}
	}
	return sandboxes, containers, nil
}

// fromContainerStats groups the stats of running containers by their sandbox; a pod's CPU
// and memory are its containers' sums.
func (p *Provider) fromContainerStats(stats []*runtimeapi.ContainerStats, sandboxes map[string]*runtimeapi.PodSandbox, containers map[string]*runtimeapi.Container, onlyCPUAndMemory bool) map[string]*statsv1alpha1.PodStats {
	pods := map[string]*statsv1alpha1.PodStats{}
	for _, st := range stats {
		c, ok := containers[st.GetAttributes().GetId()]
		if !ok {
			continue
		}
		sb, ok := sandboxes[c.GetPodSandboxId()]
		if !ok {
			continue
		}
		ps, ok := pods[sb.GetId()]
		if !ok {
			ps = newPodStats(sb)
			pods[sb.GetId()] = ps
		}
		cs := p.containerStats(st, c, onlyCPUAndMemory)
		addCPU(ps, cs.CPU)
		addMemory(ps, cs.Memory)
		ps.Containers = append(ps.Containers, cs)
	}
	return pods
}

// fromSandboxStats takes each ready pod's CPU, memory, network and process count from its
// sandbox's stats and its containers' from the container stats inside.
func (p *Provider) fromSandboxStats(stats []*runtimeapi.PodSandboxStats, sandboxes map[string]*runtimeapi.PodSandbox, containers map[string]*runtimeapi.Container, onlyCPUAndMemory bool) map[string]*statsv1alpha1.PodStats {
	pods := map[string]*statsv1alpha1.PodStats{}
	for _, st := range stats {
		sb, ok := sandboxes[st.GetAttributes().GetId()]
		if !ok {
			continue
		}
		ps := newPodStats(sb)
		for _, cst := range st.GetLinux().GetContainers() {
			c, ok := containers[cst.GetAttributes().GetId()]
			if !ok {
				continue
			}
			ps.Containers = append(ps.Containers, p.containerStats(cst, c, onlyCPUAndMemory))
		}
		if len(ps.Containers) == 0 {
			continue
		}
		linux := st.GetLinux()
		if cpu := linux.GetCpu(); cpu != nil {
			ps.CPU = p.cpuStats("pod/"+sb.GetId(), cpu)
		}
		if mem := linux.GetMemory(); mem != nil {
			ps.Memory = memoryStats(mem)
		}
		if !onlyCPUAndMemory {
			ps.Network = networkStats(linux.GetNetwork(), p.sampleTime)
			if n := linux.GetProcess().GetProcessCount(); n != nil {
				v := n.GetValue()
				ps.ProcessStats = &statsv1alpha1.ProcessStats{ProcessCount: &v}
			}
		}
		pods[sb.GetId()] = ps
	}
	return pods
}

// newPodStats names the pod of a sandbox from its labels (the sandbox's metadata when a label
// is missing); the pod started when its sandbox was created.
func newPodStats(sb *runtimeapi.PodSandbox) *statsv1alpha1.PodStats {
	return &statsv1alpha1.PodStats{
		PodRef:    podRef(sb),
		StartTime: metav1.NewTime(time.Unix(0, sb.GetCreatedAt())),
	}
}

func podRef(sb *runtimeapi.PodSandbox) statsv1alpha1.PodReference {
	l, md := sb.GetLabels(), sb.GetMetadata()
	return statsv1alpha1.PodReference{
		Name:      cmp.Or(l[labelPodName], md.GetName()),
		Namespace: cmp.Or(l[labelPodNamespace], md.GetNamespace()),
		UID:       cmp.Or(l[labelPodUID], md.GetUid()),
	}
}

// containerStats is one container's CPU, memory and writable layer; it started when it was
// created.
func (p *Provider) containerStats(st *runtimeapi.ContainerStats, c *runtimeapi.Container, onlyCPUAndMemory bool) statsv1alpha1.ContainerStats {
	cs := statsv1alpha1.ContainerStats{
		Name:      cmp.Or(c.GetLabels()[labelContainerName], c.GetMetadata().GetName(), st.GetAttributes().GetMetadata().GetName()),
		StartTime: metav1.NewTime(time.Unix(0, c.GetCreatedAt())),
	}
	if cpu := st.GetCpu(); cpu != nil {
		cs.CPU = p.cpuStats(c.GetId(), cpu)
	}
	if mem := st.GetMemory(); mem != nil {
		cs.Memory = memoryStats(mem)
	}
	if wl := st.GetWritableLayer(); wl != nil && !onlyCPUAndMemory {
		cs.Rootfs = filesystemStats(wl, p.clock.Now())
	}
	return cs
}

// cpuStats converts CRI CPU usage; the rate is the runtime's when it gives one, otherwise
// computed from the last sample of key.
func (p *Provider) cpuStats(key string, cpu *runtimeapi.CpuUsage) *statsv1alpha1.CPUStats {
	at := p.sampleTime(cpu.GetTimestamp())
	s := &statsv1alpha1.CPUStats{Time: metav1.NewTime(at)}
	if u := cpu.GetUsageCoreNanoSeconds(); u != nil {
		v := u.GetValue()
		s.UsageCoreNanoSeconds = &v
		s.UsageNanoCores = p.usageNanoCores(key, at, v)
	}
	if n := cpu.GetUsageNanoCores(); n != nil {
		v := n.GetValue()
		s.UsageNanoCores = &v
	}
	return s
}

func (p *Provider) sampleTime(ns int64) time.Time {
	if ns == 0 {
		return p.clock.Now()
	}
	return time.Unix(0, ns)
}

func memoryStats(m *runtimeapi.MemoryUsage) *statsv1alpha1.MemoryStats {
	return &statsv1alpha1.MemoryStats{
		Time:            metav1.NewTime(time.Unix(0, m.GetTimestamp())),
		AvailableBytes:  value(m.GetAvailableBytes()),
		UsageBytes:      value(m.GetUsageBytes()),
		WorkingSetBytes: value(m.GetWorkingSetBytes()),
		RSSBytes:        value(m.GetRssBytes()),
		PageFaults:      value(m.GetPageFaults()),
		MajorPageFaults: value(m.GetMajorPageFaults()),
	}
}

// networkStats converts CRI network usage, stamped by at (containerd 1.6 gives no time).
func networkStats(n *runtimeapi.NetworkUsage, at func(ns int64) time.Time) *statsv1alpha1.NetworkStats {
	if n == nil {
		return nil
	}
	s := &statsv1alpha1.NetworkStats{Time: metav1.NewTime(at(n.GetTimestamp()))}
	if d := n.GetDefaultInterface(); d != nil {
		s.InterfaceStats = interfaceStats(d)
	}
	for _, i := range n.GetInterfaces() {
		s.Interfaces = append(s.Interfaces, interfaceStats(i))
	}
	return s
}

func interfaceStats(i *runtimeapi.NetworkInterfaceUsage) statsv1alpha1.InterfaceStats {
	return statsv1alpha1.InterfaceStats{
		Name:     i.GetName(),
		RxBytes:  value(i.GetRxBytes()),
		RxErrors: value(i.GetRxErrors()),
		TxBytes:  value(i.GetTxBytes()),
		TxErrors: value(i.GetTxErrors()),
	}
}

// addCPU adds a container's CPU to its pod's.
func addCPU(ps *statsv1alpha1.PodStats, c *statsv1alpha1.CPUStats) {
	if c == nil {
		return
	}
	if ps.CPU == nil {
		ps.CPU = &statsv1alpha1.CPUStats{Time: c.Time}
	}
	ps.CPU.Time = later(ps.CPU.Time, c.Time)
	ps.CPU.UsageCoreNanoSeconds = sum(ps.CPU.UsageCoreNanoSeconds, c.UsageCoreNanoSeconds)
	ps.CPU.UsageNanoCores = sum(ps.CPU.UsageNanoCores, c.UsageNanoCores)
}

// addMemory adds a container's memory to its pod's.
func addMemory(ps *statsv1alpha1.PodStats, m *statsv1alpha1.MemoryStats) {
	if m == nil {
		return
	}
	if ps.Memory == nil {
		ps.Memory = &statsv1alpha1.MemoryStats{Time: m.Time}
	}
	mergeMemory(ps.Memory, m)
}

// ephemeralStorage is what a pod uses of the node's filesystem nodeFs, as the kubelet sums
// it: its containers' writable layers and logs, and the rest of the pod (podUsed bytes,
// podInodes inodes: its local ephemeral volumes, its hosts file, logs outside the
// containers' directories).
func ephemeralStorage(containers []statsv1alpha1.ContainerStats, nodeFs *statsv1alpha1.FsStats, podUsed, podInodes uint64) *statsv1alpha1.FsStats {
	s := onFs(nodeFs, time.Time{}, podUsed, podInodes)
	s.Time = metav1.Time{}
	if nodeFs != nil {
		s.Time = nodeFs.Time
	}
	for _, c := range containers {
		for _, fs := range []*statsv1alpha1.FsStats{c.Rootfs, c.Logs} {
			if fs == nil {
				continue
			}
			s.Time = later(s.Time, fs.Time)
			*s.UsedBytes += deref(fs.UsedBytes)
			*s.InodesUsed += deref(fs.InodesUsed)
		}
	}
	return s
}

func deref(v *uint64) uint64 {
	if v == nil {
		return 0
	}
	return *v
}

// sum adds b to a; nil when both are unknown.
func sum(a, b *uint64) *uint64 {
	if a == nil && b == nil {
		return nil
	}
	var v uint64
	if a != nil {
		v += *a
	}
	if b != nil {
		v += *b
	}
	return &v
}

func value(v *runtimeapi.UInt64Value) *uint64 {
	if v == nil {
		return nil
	}
	n := v.GetValue()
	return &n
}

func later(a, b metav1.Time) metav1.Time {
	if b.After(a.Time) {
		return b
	}
	return a
}
