package containerlogs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// maxNameLen is the longest file name ext4 takes; longer link names are cut, as the
// kubelet cuts them.
const maxNameLen = 255

// linkName is the link to a container's log: <pod>_<namespace>_<container>-<id>.log in
// dir, cut to maxNameLen.
func linkName(dir, pod, namespace, container, id string) string {
	name := pod + "_" + namespace + "_" + container + "-" + id
	if len(name) > maxNameLen-len(".log") {
		name = name[:maxNameLen-len(".log")]
	}
	return filepath.Join(dir, name+".log")
}

// idOfLink is the container ID a link's name ends with ("...-<id>.log"): ok is false when
// the name has no ID of at least 6 characters (the shortest the runtime resolves).
func idOfLink(path string) (string, bool) {
	base, found := strings.CutSuffix(filepath.Base(path), ".log")
	if !found {
		return "", false
	}
	i := strings.LastIndex(base, "-")
	if i < 0 || len(base)-i-1 < 6 {
		return "", false
	}
	return base[i+1:], true
}

// link makes link point at target, replacing what is there.
func link(target, link string) error {
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		return fmt.Errorf("link %s: %w", link, err)
	}
	if err := os.Symlink(target, link); err != nil {
		if !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("link %s to %s: %w", link, target, err)
		}
		if err := os.Remove(link); err != nil {
			return fmt.Errorf("replace the link %s: %w", link, err)
		}
		if err := os.Symlink(target, link); err != nil {
			return fmt.Errorf("link %s to %s: %w", link, target, err)
		}
	}
	return nil
}

// danglingLinks are the links in dir whose log file is gone.
func danglingLinks(dir string) ([]string, error) {
	links, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil {
		return nil, fmt.Errorf("list the links in %s: %w", dir, err)
	}
	var out []string
	for _, l := range links {
		if _, err := os.Stat(l); errors.Is(err, fs.ErrNotExist) {
			out = append(out, l)
		}
	}
	return out, nil
}
