package cgroups

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// v2Controllers are the controllers the node's cgroups use on cgroup v2, enabled in this
// order in each ancestor's cgroup.subtree_control where the ancestor has them.
var v2Controllers = []string{"cpu", "memory", "pids", "cpuset", "hugetlb", "io"}

// v1Checked are the v1 hierarchies Exists looks at for the cgroupfs driver (the ones the
// kubelet checks), where mounted.
var v1Checked = []string{"cpu", "cpuacct", "cpuset", "memory", "pids", "hugetlb", "systemd"}

// cgroupfsManager makes the cgroups itself, as directories under the mount point.
type cgroupfsManager struct {
	h *hierarchies
}

func (m *cgroupfsManager) Driver() Driver       { return Cgroupfs }
func (m *cgroupfsManager) Unified() bool        { return m.h.unified }
func (m *cgroupfsManager) Parent(n Name) string { return n.CgroupfsPath() }
func (m *cgroupfsManager) Path(n Name) string   { return m.h.mainDir(n.CgroupfsPath()) }
func (m *cgroupfsManager) Close() error         { return nil }

func (m *cgroupfsManager) Exists(n Name) bool {
	return m.h.existsIn(n.CgroupfsPath(), v1Checked)
}

func (m *cgroupfsManager) Ensure(ctx context.Context, n Name, r Resources) error {
	if err := checkEnsure(ctx, n, Cgroupfs); err != nil {
		return err
	}
	rel := n.CgroupfsPath()
	if m.h.unified {
		controllers, err := m.h.makeV2(n)
		if err != nil {
			return err
		}
		return m.h.setV2(filepath.Join(m.h.mount, rel), controllers, r)
	}
	for _, d := range m.h.dirs(rel) {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("create cgroup %s: %w", rel, err)
		}
	}
	if err := m.h.fillCpuset(n); err != nil {
		return err
	}
	return m.h.setV1(rel, r)
}

func (m *cgroupfsManager) Remove(ctx context.Context, n Name) error {
	if len(n) == 0 {
		return errors.New("remove the root cgroup: it is the host's")
	}
	rel := n.CgroupfsPath()
	if err := m.h.checkEmpty(rel, rel); err != nil {
		return err
	}
	return m.h.rmdir(ctx, rel, rel)
}

func (m *cgroupfsManager) Kill(ctx context.Context, n Name) ([]int, error) {
	if len(n) == 0 {
		return nil, errors.New("kill the processes of the root cgroup: it is the host's")
	}
	rel := n.CgroupfsPath()
	return m.h.kill(ctx, rel, rel)
}

func (m *cgroupfsManager) Children(n Name) ([]string, error) {
	return m.h.children(n.CgroupfsPath(), func(s string) (string, bool) { return s, true })
}

// checkEnsure refuses what Ensure must not do: a malformed name, or the root, which is the
// host's.
func checkEnsure(ctx context.Context, n Name, d Driver) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("ensure cgroup %s: %w", n, err)
	}
	if len(n) == 0 {
		return errors.New("ensure the root cgroup: it is the host's and is never changed")
	}
	return n.validate(d)
}

// makeV2 creates the cgroup n (and its missing ancestors) on cgroup v2, enabling on each
// ancestor, from the root down, those of v2Controllers that the ancestor has. It returns
// the controllers n ends up with: its parent's cgroup.subtree_control, which the kernel
// shows as n's cgroup.controllers.
func (h *hierarchies) makeV2(n Name) (map[string]bool, error) {
	dir := h.mount
	have, err := readList(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return nil, fmt.Errorf("create cgroup %s: %w", n, err)
	}
	for _, comp := range n {
		control := filepath.Join(dir, "cgroup.subtree_control")
		enabled, err := readList(control)
		if err != nil {
			return nil, fmt.Errorf("create cgroup %s: %w", n, err)
		}
		changed := false
		for _, c := range v2Controllers {
			if slices.Contains(have, c) && !slices.Contains(enabled, c) {
				if err := h.set(dir, "cgroup.subtree_control", "+"+c); err != nil {
					return nil, fmt.Errorf("create cgroup %s: enable %s: %w", n, c, err)
				}
				changed = true
			}
		}
		if changed {
			if enabled, err = readList(control); err != nil {
				return nil, fmt.Errorf("create cgroup %s: %w", n, err)
			}
		}
		dir = filepath.Join(dir, comp)
		if err := h.mkdir(dir); err != nil {
			return nil, fmt.Errorf("create cgroup %s: %w", n, err)
		}
		have = enabled
	}
	out := map[string]bool{}
	for _, c := range have {
		out[c] = true
	}
	return out, nil
}

// setV2 writes r into the cgroup v2 directory dir, for the controllers it has.
func (h *hierarchies) setV2(dir string, controllers map[string]bool, r Resources) error {
	if controllers["memory"] && r.Memory != nil && *r.Memory != 0 {
		if err := h.set(dir, "memory.max", limitString(*r.Memory, "max")); err != nil {
			return err
		}
	}
	if controllers["cpu"] {
		if r.CPUShares != nil && *r.CPUShares != 0 {
			if err := h.set(dir, "cpu.weight", strconv.FormatUint(SharesToWeight(*r.CPUShares), 10)); err != nil {
				return err
			}
		}
		if err := h.setCPUMax(dir, r); err != nil {
			return err
		}
	}
	if controllers["pids"] && r.PidsLimit != nil {
		if err := h.set(dir, "pids.max", pidsString(*r.PidsLimit)); err != nil {
			return err
		}
	}
	if controllers["hugetlb"] {
		for _, size := range slices.Sorted(maps.Keys(r.HugePages)) {
			file := "hugetlb." + hugePageUnit(size) + ".max"
			if err := h.set(dir, file, strconv.FormatInt(r.HugePages[size], 10)); err != nil {
				return err
			}
		}
	}
	return nil
}

// setCPUMax writes cpu.max, "<quota|max> <period>". Without a new quota the current one
// is kept; without a new period the kernel keeps its own.
func (h *hierarchies) setCPUMax(dir string, r Resources) error {
	hasPeriod := r.CPUPeriod != nil && *r.CPUPeriod != 0
	if r.CPUQuota == nil && !hasPeriod {
		return nil
	}
	var quota string
	if r.CPUQuota != nil {
		quota = limitString(*r.CPUQuota, "max")
		if *r.CPUQuota == 0 {
			quota = "max"
		}
	} else {
		cur, err := readTrimmed(filepath.Join(dir, "cpu.max"))
		if err != nil {
			return err
		}
		quota, _, _ = strings.Cut(cur, " ")
	}
	value := quota
	if hasPeriod {
		value += " " + strconv.FormatUint(*r.CPUPeriod, 10)
	}
	return h.set(dir, "cpu.max", value)
}

// setV1 writes r into the cgroup's directory of each cgroup v1 hierarchy it concerns.
func (h *hierarchies) setV1(rel string, r Resources) error {
	if dir, ok := h.dir("memory", rel); ok && r.Memory != nil && *r.Memory != 0 {
		if err := h.set(dir, "memory.limit_in_bytes", limitString(*r.Memory, "-1")); err != nil {
			return err
		}
	}
	if dir, ok := h.dir("cpu", rel); ok {
		if r.CPUShares != nil && *r.CPUShares != 0 {
			if err := h.set(dir, "cpu.shares", strconv.FormatUint(*r.CPUShares, 10)); err != nil {
				return err
			}
		}
		if err := h.setCFS(dir, r); err != nil {
			return err
		}
	}
	if dir, ok := h.dir("pids", rel); ok && r.PidsLimit != nil {
		if err := h.set(dir, "pids.max", pidsString(*r.PidsLimit)); err != nil {
			return err
		}
	}
	if dir, ok := h.dir("hugetlb", rel); ok {
		for _, size := range slices.Sorted(maps.Keys(r.HugePages)) {
			file := "hugetlb." + hugePageUnit(size) + ".limit_in_bytes"
			if err := h.set(dir, file, strconv.FormatInt(r.HugePages[size], 10)); err != nil {
				return err
			}
		}
	}
	return nil
}

// setCFS writes cpu.cfs_period_us, then cpu.cfs_quota_us. The kernel refuses (EINVAL) a
// shorter period while the old quota over it would exceed the parent's; then the quota
// goes first and the period is written again.
func (h *hierarchies) setCFS(dir string, r Resources) error {
	retryPeriod := false
	if r.CPUPeriod != nil && *r.CPUPeriod != 0 {
		err := h.set(dir, "cpu.cfs_period_us", strconv.FormatUint(*r.CPUPeriod, 10))
		if err != nil && (r.CPUQuota == nil || !errors.Is(err, syscall.EINVAL)) {
			return err
		}
		retryPeriod = err != nil
	}
	if r.CPUQuota != nil {
		quota := *r.CPUQuota
		if quota <= 0 {
			quota = -1
		}
		if err := h.set(dir, "cpu.cfs_quota_us", strconv.FormatInt(quota, 10)); err != nil {
			return err
		}
	}
	if retryPeriod {
		return h.set(dir, "cpu.cfs_period_us", strconv.FormatUint(*r.CPUPeriod, 10))
	}
	return nil
}

// fillCpuset gives each level of n in the v1 cpuset hierarchy, from the top down, its
// parent's cpuset.cpus and cpuset.mems where its own are empty: the kernel starts a new
// cpuset cgroup with none, and no process could run in it.
func (h *hierarchies) fillCpuset(n Name) error {
	root, ok := h.byController["cpuset"]
	if !ok {
		return nil
	}
	parent := root
	for i := range n {
		dir := filepath.Join(root, n[:i+1].CgroupfsPath())
		for _, file := range []string{"cpuset.cpus", "cpuset.mems"} {
			cur, err := readTrimmed(filepath.Join(dir, file))
			if err != nil {
				return fmt.Errorf("create cgroup %s: %w", n, err)
			}
			if cur != "" {
				continue
			}
			from, err := readTrimmed(filepath.Join(parent, file))
			if err != nil {
				return fmt.Errorf("create cgroup %s: %w", n, err)
			}
			if err := h.set(dir, file, from); err != nil {
				return fmt.Errorf("create cgroup %s: %w", n, err)
			}
		}
		parent = dir
	}
	return nil
}

// limitString is v as a limit, with unlimited (any negative) written as max.
func limitString(v int64, max string) string {
	if v < 0 {
		return max
	}
	return strconv.FormatInt(v, 10)
}

// pidsString is a pids.max value: negative is "max"; 0 is 1, as runc writes it.
func pidsString(v int64) string {
	if v == 0 {
		v = 1
	}
	return limitString(v, "max")
}
