package stats

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/unitlet/unitlet/shared/cgroupfile"
)

// commLen is how much of a process's name the kernel keeps in /proc/<pid>/comm.
const commLen = 15

// cgroupSet is the cgroups of a group of processes, per controller ("" on cgroup v2), in
// the hierarchies mounted at mount, and when the earliest of them started.
type cgroupSet struct {
	mount string
	paths map[string][]string
	start time.Time
}

func (s *cgroupSet) add(controller, path string) {
	if s.paths == nil {
		s.paths = map[string][]string{}
	}
	if !slices.Contains(s.paths[controller], path) {
		s.paths[controller] = append(s.paths[controller], path)
	}
}

// systemContainers are the kubelet's system containers: "kubelet" (the cgroups of the node
// agent's services together), "runtime" (the cgroup of the process listening on the
// runtime's socket) and "pods" (the
// node-allocatable cgroup the pods' cgroups are made in), with CPU and memory. One whose
// processes or cgroup are not found is left out, as the kubelet leaves out a system
// container it has no cgroup for.
func (p *Provider) systemContainers(now time.Time) ([]statsv1alpha1.ContainerStats, error) {
	var out []statsv1alpha1.ContainerStats
	if len(p.services) > 0 {
		set, err := p.processCgroups(func(pid int, comm string) bool {
			return slices.ContainsFunc(p.services, func(s string) bool { return comm == s[:min(len(s), commLen)] })
		})
		if err != nil {
			return nil, fmt.Errorf("find the node agent's services: %w", err)
		}
		if set.paths != nil {
			out = append(out, p.cgroupStats(statsv1alpha1.SystemContainerKubelet, set, now))
		}
	}
	if p.runtimeSocket != "" {
		pid, err := socketPeer(p.runtimeSocket)
		if err != nil {
			return nil, fmt.Errorf("find the container runtime's process: %w", err)
		}
		// 0: the runtime runs in another pid namespace, out of sight; nothing matches.
		set, err := p.processCgroups(func(id int, _ string) bool { return pid != 0 && id == pid })
		if err != nil {
			return nil, fmt.Errorf("find the container runtime's cgroup: %w", err)
		}
		if set.paths != nil {
			out = append(out, p.cgroupStats(statsv1alpha1.SystemContainerRuntime, set, now))
		}
	}
	if p.podsCgroup != "" {
		set, ok := p.namedCgroup(p.podsMount, p.podsCgroup)
		if ok {
			out = append(out, p.cgroupStats(statsv1alpha1.SystemContainerPods, set, now))
		}
	}
	return out, nil
}

// socketPeer is the process listening on the unix socket at path.
func socketPeer(path string) (int, error) {
	conn, err := net.DialTimeout("unix", path, time.Second)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	raw, err := conn.(*net.UnixConn).SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) { cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil {
		return 0, err
	}
	if credErr != nil {
		return 0, fmt.Errorf("peer of %s: %w", path, credErr)
	}
	return int(cred.Pid), nil
}

// processCgroups is the cgroups of the processes match picks (by pid and name), and the
// earliest start among them.
func (p *Provider) processCgroups(match func(pid int, comm string) bool) (cgroupSet, error) {
	set := cgroupSet{mount: p.cgroupRoot}
	pfs, err := procfs.NewFS(p.procRoot)
	if err != nil {
		return set, err
	}
	procs, err := pfs.AllProcs()
	if err != nil {
		return set, err
	}
	unified := p.unified()
	for _, proc := range procs {
		comm, err := proc.Comm()
		if err != nil || !match(proc.PID, comm) {
			continue // gone since listed, or not one of them
		}
		cgroups, err := proc.Cgroups()
		if err != nil {
			continue
		}
		for _, cg := range cgroups {
			switch {
			case unified && cg.HierarchyID == 0:
				set.add("", cg.Path)
			case !unified:
				for _, c := range cg.Controllers {
					if c == "cpuacct" || c == "memory" {
						set.add(c, cg.Path)
					}
				}
			}
		}
		if st, err := proc.Stat(); err == nil {
			if secs, err := st.StartTime(); err == nil {
				start := time.Unix(0, int64(secs*float64(time.Second)))
				if set.start.IsZero() || start.Before(set.start) {
					set.start = start
				}
			}
		}
	}
	return set, nil
}

// namedCgroup is the cgroup at path in every hierarchy mounted at mount, if it exists; it
// started when its directory was made.
func (p *Provider) namedCgroup(mount, path string) (cgroupSet, bool) {
	set := cgroupSet{mount: mount}
	controllers := []string{"cpuacct", "memory"}
	if p.unified() {
		controllers = []string{""}
	}
	for _, c := range controllers {
		st, err := os.Stat(filepath.Join(controllerDir(mount, c), path))
		if err != nil {
			return set, false
		}
		set.add(c, path)
		if set.start.IsZero() || st.ModTime().Before(set.start) {
			set.start = st.ModTime()
		}
	}
	return set, true
}

// controllerDir is where a controller's hierarchy is mounted below mount ("": the v2
// hierarchy, mount itself).
func controllerDir(mount, controller string) string {
	if controller == "" {
		return mount
	}
	for _, dir := range []string{controller, "cpu,cpuacct", "cpuacct,cpu"} {
		if !strings.Contains(dir, controller) {
			continue
		}
		if _, err := os.Stat(filepath.Join(mount, dir)); err == nil {
			return filepath.Join(mount, dir)
		}
	}
	return filepath.Join(mount, controller)
}

// cgroupStats is a system container's CPU and memory, summed over its cgroups. A figure no
// cgroup could give is left out.
func (p *Provider) cgroupStats(name string, set cgroupSet, now time.Time) statsv1alpha1.ContainerStats {
	cs := statsv1alpha1.ContainerStats{Name: name, StartTime: metav1.NewTime(set.start)}
	cpuController, memController := "cpuacct", "memory"
	if p.unified() {
		cpuController, memController = "", ""
	}
	var cpu *uint64
	for _, path := range set.paths[cpuController] {
		if v, err := p.cgroupCPUUsage(filepath.Join(controllerDir(set.mount, cpuController), path)); err == nil {
			cpu = sum(cpu, &v)
		}
	}
	if cpu != nil {
		cs.CPU = &statsv1alpha1.CPUStats{Time: metav1.NewTime(now), UsageCoreNanoSeconds: cpu, UsageNanoCores: p.usageNanoCores("system/"+name, now, *cpu)}
	}
	for _, path := range set.paths[memController] {
		m, err := p.cgroupMemory(filepath.Join(controllerDir(set.mount, memController), path), now)
		if err != nil {
			continue
		}
		if cs.Memory == nil {
			cs.Memory = &statsv1alpha1.MemoryStats{Time: m.Time}
		}
		mergeMemory(cs.Memory, m)
	}
	return cs
}

// cgroupCPUUsage is the CPU time of the cgroup at dir in nanoseconds.
func (p *Provider) cgroupCPUUsage(dir string) (uint64, error) {
	if !p.unified() {
		return cgroupfile.Read[uint64](filepath.Join(dir, "cpuacct.usage"))
	}
	kv, err := cgroupfile.KeyValues[uint64](filepath.Join(dir, "cpu.stat"))
	if err != nil {
		return 0, err
	}
	usec, ok := kv["usage_usec"]
	if !ok {
		return 0, fmt.Errorf("no usage_usec in %s/cpu.stat", dir)
	}
	return usec * 1000, nil
}

// cgroupMemory is the memory use of the cgroup at dir, as cadvisor reads it: the working
// set is the usage less inactive file pages; what is available is the limit (if any) less
// the working set.
func (p *Provider) cgroupMemory(dir string, now time.Time) (*statsv1alpha1.MemoryStats, error) {
	usageFile, limitFile := "memory.usage_in_bytes", "memory.limit_in_bytes"
	inactiveFile, rss, faults, majorFaults := "total_inactive_file", "total_rss", "total_pgfault", "total_pgmajfault"
	if p.unified() {
		usageFile, limitFile = "memory.current", "memory.max"
		inactiveFile, rss, faults, majorFaults = "inactive_file", "anon", "pgfault", "pgmajfault"
	}
	usage, err := cgroupfile.Read[uint64](filepath.Join(dir, usageFile))
	if err != nil {
		return nil, err
	}
	stat, err := cgroupfile.KeyValues[uint64](filepath.Join(dir, "memory.stat"))
	if err != nil {
		return nil, err
	}
	workingSet := usage - min(usage, stat[inactiveFile])
	m := &statsv1alpha1.MemoryStats{Time: metav1.NewTime(now), UsageBytes: &usage, WorkingSetBytes: &workingSet}
	for _, f := range []struct {
		key string
		to  **uint64
	}{{rss, &m.RSSBytes}, {faults, &m.PageFaults}, {majorFaults, &m.MajorPageFaults}} {
		if v, ok := stat[f.key]; ok {
			*f.to = &v
		}
	}
	// No limit: "max" (v2, not a number), a page-rounded 2^63 (v1), no file (a root).
	if limit, err := cgroupfile.Read[uint64](filepath.Join(dir, limitFile)); err == nil && limit < 1<<62 {
		available := limit - min(limit, workingSet)
		m.AvailableBytes = &available
	}
	return m, nil
}

// mergeMemory adds the memory of one more cgroup to m.
func mergeMemory(m, add *statsv1alpha1.MemoryStats) {
	m.Time = later(m.Time, add.Time)
	m.AvailableBytes = sum(m.AvailableBytes, add.AvailableBytes)
	m.UsageBytes = sum(m.UsageBytes, add.UsageBytes)
	m.WorkingSetBytes = sum(m.WorkingSetBytes, add.WorkingSetBytes)
	m.RSSBytes = sum(m.RSSBytes, add.RSSBytes)
	m.PageFaults = sum(m.PageFaults, add.PageFaults)
	m.MajorPageFaults = sum(m.MajorPageFaults, add.MajorPageFaults)
}
