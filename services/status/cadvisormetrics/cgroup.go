package cadvisormetrics

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/unitlet/unitlet/shared/cgroupfile"
)

// cgroupStats is what one cgroup's files say, as cAdvisor reads them. A nil field is a file
// the hierarchy does not have (failcnt on v2) or a figure the kernel does not give.
type cgroupStats struct {
	at time.Time

	cpuUsage, cpuUser, cpuSystem *float64 // seconds
	periods, throttled           *float64
	throttledSeconds             *float64

	memUsage, workingSet, rss, cache, swap, failcnt, oomKills *float64

	// The spec: shares (a v2 weight converted back), quota (nil: none), period, memory
	// limit (0: none, as cAdvisor shows an unlimited cgroup).
	shares, quota, period, memLimit *float64
}

// cgroupReader reads cgroups under mount: the v2 hierarchy, or v1 controllers in
// mount/<controller>/.
type cgroupReader struct {
	mount string
	v2    bool
}

// newCgroupReader tells the hierarchy by mount's root: a v2 root lists its controllers.
func newCgroupReader(mount string) cgroupReader {
	_, err := os.Stat(filepath.Join(mount, "cgroup.controllers"))
	return cgroupReader{mount: mount, v2: err == nil}
}

// dir is where the files of controller for cgroup path (from the hierarchy's root) are.
func (r cgroupReader) dir(controller, path string) string {
	if r.v2 {
		return filepath.Join(r.mount, path)
	}
	return filepath.Join(r.mount, controller, path)
}

// read reads cgroup path's CPU and memory figures and limits.
func (r cgroupReader) read(path string, now time.Time) (cgroupStats, error) {
	if r.v2 {
		return r.readV2(path, now)
	}
	return r.readV1(path, now)
}

// clockTicks is USER_HZ, the unit of cpuacct.stat: 100 on every Linux architecture
// Kubernetes runs on.
const clockTicks = 100

func (r cgroupReader) readV1(path string, now time.Time) (cgroupStats, error) {
	s := cgroupStats{at: now}
	cpuacct, cpu, mem := r.dir("cpuacct", path), r.dir("cpu", path), r.dir("memory", path)
	usage, err := cgroupfile.Read[float64](filepath.Join(cpuacct, "cpuacct.usage"))
	if err != nil {
		return s, err
	}
	s.cpuUsage = ptr(usage / 1e9)
	if st, err := cgroupfile.KeyValues[float64](filepath.Join(cpuacct, "cpuacct.stat")); err == nil {
		s.cpuUser, s.cpuSystem = scaled(st, "user", 1.0/clockTicks), scaled(st, "system", 1.0/clockTicks)
	}
	if st, err := cgroupfile.KeyValues[float64](filepath.Join(cpu, "cpu.stat")); err == nil {
		s.periods, s.throttled, s.throttledSeconds = scaled(st, "nr_periods", 1), scaled(st, "nr_throttled", 1), scaled(st, "throttled_time", 1e-9)
	}
	if v, err := cgroupfile.Read[float64](filepath.Join(cpu, "cpu.shares")); err == nil {
		s.shares = &v
	}
	if v, err := cgroupfile.Read[float64](filepath.Join(cpu, "cpu.cfs_period_us")); err == nil {
		s.period = &v
	}
	if v, err := cgroupfile.Read[float64](filepath.Join(cpu, "cpu.cfs_quota_us")); err == nil && v > 0 {
		s.quota = &v
	}

	memUsage, err := cgroupfile.Read[float64](filepath.Join(mem, "memory.usage_in_bytes"))
	if err != nil {
		return s, err
	}
	s.memUsage = &memUsage
	st, err := cgroupfile.KeyValues[float64](filepath.Join(mem, "memory.stat"))
	if err != nil {
		return s, err
	}
	s.rss, s.cache = scaled(st, "total_rss", 1), scaled(st, "total_cache", 1)
	s.workingSet = workingSet(memUsage, st["total_inactive_file"])
	if v, err := cgroupfile.Read[float64](filepath.Join(mem, "memory.failcnt")); err == nil {
		s.failcnt = &v
	}
	if v, err := cgroupfile.Read[float64](filepath.Join(mem, "memory.memsw.usage_in_bytes")); err == nil {
		s.swap = ptr(max(v-memUsage, 0))
	}
	if oc, err := cgroupfile.KeyValues[float64](filepath.Join(mem, "memory.oom_control")); err == nil {
		s.oomKills = scaled(oc, "oom_kill", 1)
	}
	if v, err := cgroupfile.Read[float64](filepath.Join(mem, "memory.limit_in_bytes")); err == nil {
		s.memLimit = ptr(memoryLimit(v))
	}
	return s, nil
}

func (r cgroupReader) readV2(path string, now time.Time) (cgroupStats, error) {
	s := cgroupStats{at: now}
	dir := r.dir("", path)
	st, err := cgroupfile.KeyValues[float64](filepath.Join(dir, "cpu.stat"))
	if err != nil {
		return s, err
	}
	s.cpuUsage, s.cpuUser, s.cpuSystem = scaled(st, "usage_usec", 1e-6), scaled(st, "user_usec", 1e-6), scaled(st, "system_usec", 1e-6)
	s.periods, s.throttled, s.throttledSeconds = scaled(st, "nr_periods", 1), scaled(st, "nr_throttled", 1), scaled(st, "throttled_usec", 1e-6)
	if w, err := cgroupfile.Read[float64](filepath.Join(dir, "cpu.weight")); err == nil {
		s.shares = ptr(weightToShares(w))
	}
	if b, err := os.ReadFile(filepath.Join(dir, "cpu.max")); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if q, err := strconv.ParseFloat(f[0], 64); err == nil {
				s.quota = &q
			}
			if p, err := strconv.ParseFloat(f[1], 64); err == nil {
				s.period = &p
			}
		}
	}

	memUsage, err := cgroupfile.Read[float64](filepath.Join(dir, "memory.current"))
	if err != nil {
		return s, err
	}
	s.memUsage = &memUsage
	ms, err := cgroupfile.KeyValues[float64](filepath.Join(dir, "memory.stat"))
	if err != nil {
		return s, err
	}
	s.rss, s.cache = scaled(ms, "anon", 1), scaled(ms, "file", 1)
	s.workingSet = workingSet(memUsage, ms["inactive_file"])
	if v, err := cgroupfile.Read[float64](filepath.Join(dir, "memory.swap.current")); err == nil {
		s.swap = &v
	}
	if ev, err := cgroupfile.KeyValues[float64](filepath.Join(dir, "memory.events")); err == nil {
		s.oomKills = scaled(ev, "oom_kill", 1)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "memory.max")); err == nil {
		if v := strings.TrimSpace(string(b)); v == "max" {
			s.memLimit = ptr(0.0)
		} else if n, err := strconv.ParseFloat(v, 64); err == nil {
			s.memLimit = ptr(memoryLimit(n))
		}
	}
	return s, nil
}

// workingSet is the usage less the inactive file pages, never below 0: the kubelet's
// (and cAdvisor's) working set.
func workingSet(usage, inactiveFile float64) *float64 {
	return ptr(max(usage-inactiveFile, 0))
}

// maxMemory is above any real limit: a v1 cgroup without one shows a page-rounded
// 2^63-1, which cAdvisor reports as 0.
const maxMemory = 1 << 62

func memoryLimit(v float64) float64 {
	if v > maxMemory {
		return 0
	}
	return v
}

// weightToShares turns a v2 cpu.weight back into the v1 cpu.shares it was set from, as
// cAdvisor does: the inverse of the runtime's shares-to-weight mapping.
func weightToShares(w float64) float64 {
	return float64(2 + (uint64(w)-1)*262142/9999)
}

// scaled is key's value times unit, nil when the file has no such key.
func scaled(m map[string]float64, key string, unit float64) *float64 {
	v, ok := m[key]
	if !ok {
		return nil
	}
	return ptr(v * unit)
}

func ptr[T any](v T) *T { return &v }

// gone tells a cgroup that went away between the walk and the read: its series are left
// out, not an error.
func gone(err error) bool { return errors.Is(err, fs.ErrNotExist) }
