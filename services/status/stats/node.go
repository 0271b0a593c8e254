package stats

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/unitlet/unitlet/shared/cgroupfile"
)

const nodeCPUKey = ""

// unified tells whether CgroupRoot is a cgroup v2 hierarchy (its root lists controllers);
// otherwise it holds v1 controllers, each in its own directory.
func (p *Provider) unified() bool {
	_, err := os.Stat(filepath.Join(p.cgroupRoot, "cgroup.controllers"))
	return err == nil
}

// bootTime is when the node booted: btime in /proc/stat.
func (p *Provider) bootTime() (time.Time, error) {
	path := filepath.Join(p.procRoot, "stat")
	b, err := os.ReadFile(path)
	if err != nil {
		return time.Time{}, err
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "btime "); ok {
			secs, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return time.Time{}, fmt.Errorf("parse btime in %s: %w", path, err)
			}
			return time.Unix(secs, 0), nil
		}
	}
	return time.Time{}, fmt.Errorf("no btime in %s", path)
}

// nodeCPU is the root cgroup's cumulative CPU usage and the rate since the last summary.
func (p *Provider) nodeCPU(now time.Time) (*statsv1alpha1.CPUStats, error) {
	usage, err := p.nodeCPUUsage()
	if err != nil {
		return nil, err
	}
	return &statsv1alpha1.CPUStats{
		Time:                 metav1.NewTime(now),
		UsageCoreNanoSeconds: &usage,
		UsageNanoCores:       p.usageNanoCores(nodeCPUKey, now, usage),
	}, nil
}

// nodeCPUUsage reads the root cgroup's CPU time in nanoseconds: cpuacct.usage (v1) or
// usage_usec of cpu.stat (v2).
func (p *Provider) nodeCPUUsage() (uint64, error) {
	if p.unified() {
		path := filepath.Join(p.cgroupRoot, "cpu.stat")
		kv, err := cgroupfile.KeyValues[uint64](path)
		if err != nil {
			return 0, err
		}
		usec, ok := kv["usage_usec"]
		if !ok {
			return 0, fmt.Errorf("no usage_usec in %s", path)
		}
		return usec * 1000, nil
	}
	var firstErr error
	for _, dir := range []string{"cpuacct", "cpu,cpuacct", "cpuacct,cpu"} {
		v, err := cgroupfile.Read[uint64](filepath.Join(p.cgroupRoot, dir, "cpuacct.usage"))
		if err == nil {
			return v, nil
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	return 0, firstErr
}

// nodeMemory is the root cgroup's memory use, as cadvisor reports it for "/": the working
// set is the usage less inactive file pages, and what is available is the machine's memory
// less the working set. A v2 root cgroup has no memory.current; then the usage is what
// /proc/meminfo says is not free.
func (p *Provider) nodeMemory(now time.Time) (*statsv1alpha1.MemoryStats, error) {
	meminfo, err := readMeminfo(filepath.Join(p.procRoot, "meminfo"))
	if err != nil {
		return nil, err
	}
	total, ok := meminfo["MemTotal"]
	if !ok {
		return nil, errors.New("no MemTotal in meminfo")
	}

	var usage uint64
	var stat map[string]uint64
	var inactiveFile, rss, faults, majorFaults string
	if p.unified() {
		stat, err = cgroupfile.KeyValues[uint64](filepath.Join(p.cgroupRoot, "memory.stat"))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		usage, err = cgroupfile.Read[uint64](filepath.Join(p.cgroupRoot, "memory.current"))
		if errors.Is(err, fs.ErrNotExist) {
			usage, err = total-meminfo["MemFree"], nil
		}
		if err != nil {
			return nil, err
		}
		inactiveFile, rss, faults, majorFaults = "inactive_file", "anon", "pgfault", "pgmajfault"
	} else {
		dir := filepath.Join(p.cgroupRoot, "memory")
		if usage, err = cgroupfile.Read[uint64](filepath.Join(dir, "memory.usage_in_bytes")); err != nil {
			return nil, err
		}
		if stat, err = cgroupfile.KeyValues[uint64](filepath.Join(dir, "memory.stat")); err != nil {
			return nil, err
		}
		inactiveFile, rss, faults, majorFaults = "total_inactive_file", "total_rss", "total_pgfault", "total_pgmajfault"
	}

	// Without a cgroup memory.stat (a v2 root on older kernels) the same figures come from
	// /proc/meminfo and /proc/vmstat.
	inactive, ok := stat[inactiveFile]
	if !ok {
		inactive = meminfo["Inactive(file)"]
	}
	rssBytes, ok := stat[rss]
	if !ok {
		rssBytes = meminfo["AnonPages"]
	}
	pgfault, okFault := stat[faults]
	pgmajfault, okMajor := stat[majorFaults]
	if !okFault || !okMajor {
		vmstat, err := cgroupfile.KeyValues[uint64](filepath.Join(p.procRoot, "vmstat"))
		if err != nil {
			return nil, err
		}
		pgfault, pgmajfault = vmstat["pgfault"], vmstat["pgmajfault"]
	}

	workingSet := usage - min(usage, inactive)
	available := total - min(total, workingSet)
	return &statsv1alpha1.MemoryStats{
		Time:            metav1.NewTime(now),
		AvailableBytes:  &available,
		UsageBytes:      &usage,
		WorkingSetBytes: &workingSet,
		RSSBytes:        &rssBytes,
		PageFaults:      &pgfault,
		MajorPageFaults: &pgmajfault,
	}, nil
}

// rlimit is the node's limit on tasks (the lower of pid_max and threads-max) and how many
// there are (the total of /proc/loadavg's running/total).
func (p *Provider) rlimit(now time.Time) (*statsv1alpha1.RlimitStats, error) {
	r := &statsv1alpha1.RlimitStats{Time: metav1.NewTime(now)}
	for _, name := range []string{"pid_max", "threads-max"} {
		v, err := cgroupfile.Read[uint64](filepath.Join(p.procRoot, "sys", "kernel", name))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if r.MaxPID == nil || int64(v) < *r.MaxPID {
			limit := int64(v)
			r.MaxPID = &limit
		}
	}
	path := filepath.Join(p.procRoot, "loadavg")
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	fields := strings.Fields(string(b))
	if len(fields) < 4 {
		return nil, fmt.Errorf("parse %s: want at least 4 fields, got %q", path, b)
	}
	_, tasks, ok := strings.Cut(fields[3], "/")
	if !ok {
		return nil, fmt.Errorf("parse %s: want running/total, got %q", path, fields[3])
	}
	n, err := strconv.ParseInt(tasks, 10, 64)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", path, err)
	}
	r.NumOfRunningProcesses = &n
	return r, nil
}

// readMeminfo reads /proc/meminfo into bytes by name ("MemTotal:  16384 kB").
func readMeminfo(path string) (map[string]uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	m := map[string]uint64{}
	s := bufio.NewScanner(f)
	for s.Scan() {
		k, rest, ok := strings.Cut(s.Text(), ":")
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			continue
		}
		n, err := strconv.ParseUint(fields[0], 10, 64)
		if err != nil {
			continue
		}
		if len(fields) > 1 && fields[1] == "kB" {
			n *= 1024
		}
		m[k] = n
	}
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return m, nil
}
