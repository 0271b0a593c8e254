package cadvisormetrics

import (
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
)

// podCgroup is a pod's cgroup and its containers' cgroups, as paths from the hierarchy's
// root (cAdvisor's container names, its id label).
type podCgroup struct {
	path       string
	containers map[string]string // runtime container ID -> cgroup path
}

var (
	// podDir is a pod cgroup's directory: pod<uid> (cgroupfs driver) or
	// kubepods[-<qos>]-pod<uid with _ for ->.slice (systemd driver).
	podDir = regexp.MustCompile(`pod([0-9a-fA-F]{8}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{12})(\.slice)?$`)
	// containerDir is a container's: its ID (cgroupfs) or <runtime>-<ID>.scope (systemd).
	containerDir = regexp.MustCompile(`(?:^|-)([0-9a-f]{64})(?:\.scope)?$`)
)

// maxDepth bounds the walk below the root: the kubelet's deepest pod cgroup is
// <root>/kubepods/<qos>/pod<uid>, and a systemd root adds a few slices.
const maxDepth = 6

// podCgroups finds the pod cgroups under root (a path from the hierarchy's root) by pod
// UID, with their containers' cgroups. A missing root finds none.
func (r cgroupReader) podCgroups(root string) map[string]podCgroup {
	base := r.dir("memory", "")
	out := map[string]podCgroup{}
	var walk func(rel string, depth int)
	walk = func(rel string, depth int) {
		entries, err := os.ReadDir(filepath.Join(base, rel))
		if err != nil {
			return
		}
		for _, e := range entries {
			if !e.IsDir() {
				continue
			}
			child := path.Join(rel, e.Name())
			if m := podDir.FindStringSubmatch(e.Name()); m != nil {
				out[strings.ReplaceAll(m[1], "_", "-")] = podCgroup{path: child, containers: r.containerCgroups(base, child)}
				continue
			}
			if depth < maxDepth {
				walk(child, depth+1)
			}
		}
	}
	walk(path.Join("/", root), 0)
	return out
}

// containerCgroups are the cgroups below pod's named for a container ID.
func (r cgroupReader) containerCgroups(base, pod string) map[string]string {
	out := map[string]string{}
	entries, err := os.ReadDir(filepath.Join(base, pod))
	if err != nil {
		return out
	}
	for _, e := range entries {
		if m := containerDir.FindStringSubmatch(e.Name()); e.IsDir() && m != nil {
			out[m[1]] = path.Join(pod, e.Name())
		}
	}
	return out
}
