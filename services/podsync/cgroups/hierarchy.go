package cgroups

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// hierarchies is what is mounted at the mount point: one cgroup v2 tree, or the cgroup v1
// hierarchies, one directory each.
type hierarchies struct {
	mount   string
	unified bool
	// v1 only: each hierarchy's root directory by controller (a combined mount such as
	// "cpu,cpuacct" under both names; a named hierarchy such as "systemd" under its
	// directory's name), and the distinct roots, sorted.
	byController map[string]string
	roots        []string
	// write sets one cgroup file and mkdir makes one v2 cgroup directory; tests substitute
	// them to record the writes and to play the kernel in a temporary directory.
	write func(path, value string) error
	mkdir func(path string) error
}

// detect finds the cgroup v2 mount or the cgroup v1 hierarchies at mount. A directory
// under mount is a v1 hierarchy when its root has cgroup.procs and no cgroup.controllers
// (the latter is the v2 tree of a hybrid host, "unified", which is left alone).
func detect(mount string) (*hierarchies, error) {
	h := &hierarchies{mount: mount, write: writeFile, mkdir: mkdirOne, byController: map[string]string{}}
	switch _, err := os.Stat(filepath.Join(mount, "cgroup.controllers")); {
	case err == nil:
		h.unified = true
		return h, nil
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("detect cgroups at %s: %w", mount, err)
	}
	entries, err := os.ReadDir(mount)
	if err != nil {
		return nil, fmt.Errorf("detect cgroups at %s: %w", mount, err)
	}
	for _, e := range entries {
		dir, err := filepath.EvalSymlinks(filepath.Join(mount, e.Name()))
		if err != nil || !isDir(dir) || exists(filepath.Join(dir, "cgroup.controllers")) || !exists(filepath.Join(dir, "cgroup.procs")) {
			continue
		}
		if !slices.Contains(h.roots, dir) {
			h.roots = append(h.roots, dir)
		}
		h.byController[e.Name()] = dir
		for _, c := range strings.Split(filepath.Base(dir), ",") {
			h.byController[strings.TrimPrefix(c, "name=")] = dir
		}
	}
	slices.Sort(h.roots)
	for _, c := range []string{"memory", "cpu"} {
		if _, ok := h.byController[c]; !ok {
			return nil, fmt.Errorf("detect cgroups at %s: neither a cgroup v2 mount (no cgroup.controllers) nor a cgroup v1 %s hierarchy", mount, c)
		}
	}
	return h, nil
}

// dirs is the cgroup's directory in every hierarchy.
func (h *hierarchies) dirs(rel string) []string {
	if h.unified {
		return []string{filepath.Join(h.mount, rel)}
	}
	out := make([]string, len(h.roots))
	for i, r := range h.roots {
		out[i] = filepath.Join(r, rel)
	}
	return out
}

// dir is the cgroup's directory for controller, if that controller is mounted (v1).
func (h *hierarchies) dir(controller, rel string) (string, bool) {
	if h.unified {
		return filepath.Join(h.mount, rel), true
	}
	root, ok := h.byController[controller]
	if !ok {
		return "", false
	}
	return filepath.Join(root, rel), true
}

// mainDir is the cgroup's directory for reading: the v2 one, or the v1 memory one.
func (h *hierarchies) mainDir(rel string) string {
	d, _ := h.dir("memory", rel)
	return d
}

// existsIn reports whether the cgroup is there: its v2 directory, or its v1 directory in
// each of controllers that is mounted.
func (h *hierarchies) existsIn(rel string, controllers []string) bool {
	if h.unified {
		return isDir(filepath.Join(h.mount, rel))
	}
	for _, c := range controllers {
		if d, ok := h.dir(c, rel); ok && !isDir(d) {
			return false
		}
	}
	return true
}

// set writes value to dir/file.
func (h *hierarchies) set(dir, file, value string) error {
	p := filepath.Join(dir, file)
	if err := h.write(p, value); err != nil {
		return fmt.Errorf("set %s to %q: %w", p, value, err)
	}
	return nil
}

// pids lists, sorted, the processes in the cgroup and every cgroup below it, in every
// hierarchy.
func (h *hierarchies) pids(rel string) ([]int, error) {
	var out []int
	for _, d := range h.dirs(rel) {
		err := filepath.WalkDir(d, func(p string, e fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil // gone meanwhile, or never made in this hierarchy
				}
				return err
			}
			if !e.IsDir() {
				return nil
			}
			ps, err := readPids(filepath.Join(p, "cgroup.procs"))
			if err != nil {
				return err
			}
			for _, pid := range ps {
				if !slices.Contains(out, pid) {
					out = append(out, pid)
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	slices.Sort(out)
	return out, nil
}

// children lists, sorted, the directories directly below the cgroup in any hierarchy,
// each turned into a component by decode (false leaves it out).
func (h *hierarchies) children(rel string, decode func(string) (string, bool)) ([]string, error) {
	var out []string
	for _, d := range h.dirs(rel) {
		entries, err := os.ReadDir(d)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("list child cgroups of %s: %w", d, err)
		}
		for _, e := range entries {
			if !e.IsDir() {
				continue
			}
			if c, ok := decode(e.Name()); ok && !slices.Contains(out, c) {
				out = append(out, c)
			}
		}
	}
	slices.Sort(out)
	return out, nil
}

// checkEmpty fails with a *NotEmptyError when a process is in the cgroup or below it, or
// a child cgroup is left. cgroup names it in the message.
func (h *hierarchies) checkEmpty(rel, cgroup string) error {
	pids, err := h.pids(rel)
	if err != nil {
		return fmt.Errorf("list processes of cgroup %s: %w", cgroup, err)
	}
	if len(pids) > 0 {
		return &NotEmptyError{Cgroup: cgroup, PIDs: pids}
	}
	kids, err := h.children(rel, func(s string) (string, bool) { return s, true })
	if err != nil {
		return err
	}
	if len(kids) > 0 {
		return &NotEmptyError{Cgroup: cgroup, Children: kids}
	}
	return nil
}

// rmdir removes the cgroup's directory in every hierarchy; a missing one is fine. The
// kernel can refuse for a moment after the last process exits, so a busy directory is
// tried a few times before it counts as not empty.
func (h *hierarchies) rmdir(ctx context.Context, rel, cgroup string) error {
	for _, d := range h.dirs(rel) {
		delay := 10 * time.Millisecond
		for attempt := 1; ; attempt++ {
			err := syscall.Rmdir(d)
			if err == nil || errors.Is(err, syscall.ENOENT) {
				break
			}
			busy := errors.Is(err, syscall.EBUSY) || errors.Is(err, syscall.ENOTEMPTY)
			if !busy {
				return fmt.Errorf("remove cgroup %s: rmdir %s: %w", cgroup, d, err)
			}
			if attempt == 5 {
				return &NotEmptyError{Cgroup: cgroup, Err: fmt.Errorf("rmdir %s: %w", d, err)}
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("remove cgroup %s: %w", cgroup, ctx.Err())
			case <-time.After(delay):
			}
			delay *= 2
		}
	}
	return nil
}

// awaitGone waits a moment for a v2 cgroup that systemd removes as its slice stops. The
// stop job can end while the kernel still holds the directory (just after a pod's last
// processes exit; systemd removes it once they are gone), and the unit's mount of the
// cgroup tree is read-only, so nothing is removed here: a directory still there is
// reported as not empty, for the next cleanup to look again.
func (h *hierarchies) awaitGone(ctx context.Context, rel, cgroup string) error {
	d := filepath.Join(h.mount, rel)
	for wait := 10 * time.Millisecond; ; wait *= 2 {
		if !exists(d) {
			return nil
		}
		if wait > time.Second {
			return &NotEmptyError{Cgroup: cgroup, Err: fmt.Errorf("its slice is stopped but %s is still there", d)}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("remove cgroup %s: %w", cgroup, ctx.Err())
		case <-time.After(wait):
		}
	}
}

// writeFile writes value to an existing cgroup file. It never creates one: a missing
// file is a controller that is not there. The error is the bare errno, for the caller to
// name the file once.
func writeFile(path, value string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err == nil {
		_, err = f.WriteString(value)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// mkdirOne makes one cgroup directory; one already there is fine.
func mkdirOne(path string) error {
	if err := os.Mkdir(path, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return nil
}

// readPids reads a cgroup.procs file; a missing one holds none.
func readPids(path string) ([]int, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("read %s: %q is not a pid", path, f)
		}
		out = append(out, pid)
	}
	return out, nil
}

// readList reads a space-separated list file such as cgroup.controllers.
func readList(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return strings.Fields(string(b)), nil
}

func readTrimmed(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	return strings.TrimSpace(string(b)), nil
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
