package observe

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	"github.com/unitlet/unitlet/shared/cgroupfile"
)

// hierarchy is what the cgroup mount holds: the v2 tree, or the v1 hierarchies, of which
// the memory and pids ones are read.
type hierarchy struct {
	unified bool
	// memory is the directory of the root cgroup for memory: the v2 mount, or the v1
	// memory hierarchy's root.
	memory string
	// pids is the same for the pids controller; "" when v1 has no pids hierarchy.
	pids string
}

// detectHierarchy tells v2 (cgroup.controllers at the mount's root) from v1 (a directory
// per hierarchy, "memory" or a combined "a,b" one). A hybrid host, v1 controllers beside a
// controller-less "unified" v2 tree, is v1, as runc and cadvisor see it.
func detectHierarchy(mount string) (*hierarchy, error) {
	_, err := os.Stat(filepath.Join(mount, "cgroup.controllers"))
	if err == nil {
		return &hierarchy{unified: true, memory: mount, pids: mount}, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("detect cgroups at %s: %w", mount, err)
	}
	entries, err := os.ReadDir(mount)
	if err != nil {
		return nil, fmt.Errorf("detect cgroups at %s: %w", mount, err)
	}
	h := &hierarchy{}
	for _, e := range entries {
		dir := filepath.Join(mount, e.Name())
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			continue
		}
		for _, c := range strings.Split(e.Name(), ",") {
			switch {
			case c == "memory" && h.memory == "":
				h.memory = dir
			case c == "pids" && h.pids == "":
				h.pids = dir
			}
		}
	}
	if h.memory == "" {
		return nil, fmt.Errorf("detect cgroups at %s: neither cgroup v2 (no cgroup.controllers) nor a cgroup v1 memory hierarchy", mount)
	}
	return h, nil
}

// podUIDFromCgroup returns the pod UID a pod cgroup's directory name carries: "pod<uid>"
// for cgroupfs, "<parent levels>-pod<uid with _ for ->.slice" for systemd.
func podUIDFromCgroup(name, driver string) (types.UID, bool) {
	if driver == "systemd" {
		base, ok := strings.CutSuffix(name, ".slice")
		if !ok {
			return "", false
		}
		if i := strings.LastIndexByte(base, '-'); i >= 0 {
			base = base[i+1:]
		}
		uid, ok := strings.CutPrefix(base, "pod")
		if !ok || uid == "" {
			return "", false
		}
		return types.UID(strings.ReplaceAll(uid, "_", "-")), true
	}
	uid, ok := strings.CutPrefix(name, "pod")
	if !ok || uid == "" {
		return "", false
	}
	return types.UID(uid), true
}

// podCgroups maps each pod cgroup found below kubepods to its path below the hierarchy
// root: a guaranteed pod's directly in kubepods, the others' in the QoS cgroup one level
// down. The memory hierarchy is scanned; on v1 the pids hierarchy has the same layout.
func (s *Source) podCgroups() (map[types.UID]string, error) {
	out := map[types.UID]string{}
	top := filepath.Join(s.h.memory, s.kubepods)
	entries, err := os.ReadDir(top)
	if err != nil {
		return nil, fmt.Errorf("list pod cgroups: %w", err)
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		if uid, ok := podUIDFromCgroup(e.Name(), s.driver); ok {
			out[uid] = path.Join(s.kubepods, e.Name())
			continue
		}
		// A QoS cgroup (burstable, besteffort).
		kids, err := os.ReadDir(filepath.Join(top, e.Name()))
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return nil, fmt.Errorf("list pod cgroups: %w", err)
		}
		for _, k := range kids {
			if !k.IsDir() {
				continue
			}
			if uid, ok := podUIDFromCgroup(k.Name(), s.driver); ok {
				out[uid] = path.Join(s.kubepods, e.Name(), k.Name())
			}
		}
	}
	return out, nil
}

// memoryUse is a memory cgroup's usage and working set, in bytes.
type memoryUse struct {
	usage, workingSet int64
}

// readMemory reads the memory cgroup dir as cadvisor does: usage less inactive file pages is
// the working set (floored at zero). root says dir is the hierarchy's root, where cgroup v2
// may have no memory.current.
func (h *hierarchy) readMemory(dir string, root bool) (memoryUse, error) {
	stat, err := cgroupfile.KeyValues[int64](filepath.Join(dir, "memory.stat"))
	if err != nil {
		return memoryUse{}, err
	}
	var usage int64
	inactiveKey := "total_inactive_file"
	if h.unified {
		inactiveKey = "inactive_file"
		usage, err = cgroupfile.Read[int64](filepath.Join(dir, "memory.current"))
		if errors.Is(err, fs.ErrNotExist) && root {
			// The real root cgroup has no memory.current: what runc makes of it.
			anon, okA := stat["anon"]
			file, okF := stat["file"]
			if !okA || !okF {
				return memoryUse{}, fmt.Errorf("read %s: no anon or file", filepath.Join(dir, "memory.stat"))
			}
			usage, err = anon+file, nil
		}
	} else {
		usage, err = cgroupfile.Read[int64](filepath.Join(dir, "memory.usage_in_bytes"))
	}
	if err != nil {
		return memoryUse{}, err
	}
	ws := usage
	if inactive, ok := stat[inactiveKey]; ok {
		ws = max(usage-inactive, 0)
	}
	return memoryUse{usage: usage, workingSet: ws}, nil
}

// memoryLimit reads the memory cgroup dir's limit; false when it has none (v2 "max", or a
// value past 2^62, as the kubelet's isMemoryUnlimited).
func (h *hierarchy) memoryLimit(dir string) (int64, bool, error) {
	file := "memory.limit_in_bytes"
	if h.unified {
		file = "memory.max"
	}
	p := filepath.Join(dir, file)
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, false, fmt.Errorf("read %s: %w", p, err)
	}
	v := strings.TrimSpace(string(b))
	if v == "max" {
		return 0, false, nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("read %s: %w", p, err)
	}
	if n > 1<<62 {
		return 0, false, nil
	}
	return int64(n), true, nil
}
