package nodeinfo

import (
	"fmt"
	"path"
	"strings"
)

// PodsCgroupPath is the node-allocatable cgroup's path below a hierarchy's root, as the
// kubelet and podsync name it: <cgroupRoot>/kubepods for cgroupfs, the slice
// <cgroupRoot slice>-kubepods.slice nested in its parents for systemd.
func PodsCgroupPath(cgroupRoot, driver string) (string, error) {
	switch driver {
	case "cgroupfs":
		if cgroupRoot == "" || cgroupRoot == "/" {
			return "/kubepods", nil
		}
		clean := path.Clean("/" + cgroupRoot)
		if clean != "/"+strings.Trim(cgroupRoot, "/") {
			return "", fmt.Errorf("cgroupRoot %q: not a clean cgroup path", cgroupRoot)
		}
		return path.Join(clean, "kubepods"), nil
	case "systemd":
		var levels []string
		if cgroupRoot != "" && cgroupRoot != "/" {
			leaf := path.Base(cgroupRoot)
			base, ok := strings.CutSuffix(leaf, ".slice")
			if !ok || base == "" {
				return "", fmt.Errorf("cgroupRoot %q: with the systemd driver it must be a slice", cgroupRoot)
			}
			if base != "-" {
				levels = strings.Split(base, "-")
			}
		}
		levels = append(levels, "kubepods")
		var b strings.Builder
		for i := range levels {
			if levels[i] == "" {
				return "", fmt.Errorf("cgroupRoot %q: a slice level is empty", cgroupRoot)
			}
			b.WriteString("/")
			b.WriteString(strings.Join(levels[:i+1], "-"))
			b.WriteString(".slice")
		}
		return b.String(), nil
	default:
		return "", fmt.Errorf("cgroup driver %q: want cgroupfs or systemd", driver)
	}
}
