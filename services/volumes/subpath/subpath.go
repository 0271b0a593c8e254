// Package subpath resolves a volumeMount's subPath inside its volume without letting it
// escape: a subPath that is absolute, climbs with "..", or reaches outside the volume
// through a symlink is refused with an error naming the subPath and the culprit, ready
// for a FailedMount event.
//
// Symlinks that stay inside the volume are followed (a subPath into a configMap volume
// goes through "name -> ..data/name -> ..<version>/name"). Symlinks with an absolute
// target are refused: inside the container they would mean something else than on the
// host. A missing subPath is created as a directory (with its missing parents) with the
// volume root's mode, as the kubelet does, one directory at a time relative to an open
// descriptor so a concurrent symlink swap cannot redirect the creation.
//
// Resolution uses openat2(2) with RESOLVE_BENEATH when the kernel has it, and otherwise
// (or to explain a refusal, or to create what is missing) walks the path one element at
// a time with O_NOFOLLOW descriptors.
package subpath

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// maxSymlinks bounds the symlinks followed in one resolution, as the kernel's ELOOP does.
const maxSymlinks = 40

// RefusedError says why a subPath may not be used. Retrying does not help until the pod
// spec or the volume's content changes.
type RefusedError struct {
	SubPath string
	Reason  string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("subPath %q refused: %s", e.SubPath, e.Reason)
}

// Resolve returns the host path that subPath names inside volumeRoot, creating it as a
// directory when it does not exist. The path is the real one (no symlinks in it). A
// refusal is a *RefusedError.
//
// The answer is a path: between Resolve and its use, a container writing into the
// volume could swap a directory for a symlink. A caller that bind-mounts the result
// should use Open and mount /proc/self/fd/<fd> instead.
func Resolve(volumeRoot, subPath string) (string, error) {
	f, err := Open(volumeRoot, subPath)
	if err != nil {
		return "", err
	}
	defer f.Close()
	real, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(f.Fd())))
	if err != nil {
		return "", fmt.Errorf("resolve subPath %q: read the path of its descriptor: %w", subPath, err)
	}
	root, err := filepath.EvalSymlinks(volumeRoot)
	if err != nil {
		return "", fmt.Errorf("resolve subPath %q: resolve volume root: %w", subPath, err)
	}
	if real != root && !strings.HasPrefix(real, root+"/") {
		return "", &RefusedError{SubPath: subPath, Reason: fmt.Sprintf("it resolves to %q, outside the volume %q", real, root)}
	}
	return real, nil
}

// Open resolves subPath inside volumeRoot like Resolve and returns a descriptor of it
// (O_PATH, or a read-only directory descriptor for a directory it created).
func Open(volumeRoot, subPath string) (*os.File, error) {
	if err := validate(subPath); err != nil {
		return nil, err
	}
	rootFD, err := unix.Open(volumeRoot, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("resolve subPath %q: open volume root %s: %w", subPath, volumeRoot, err)
	}
	defer unix.Close(rootFD)

	fd, err := unix.Openat2(rootFD, subPath, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err == nil {
		return os.NewFile(uintptr(fd), filepath.Join(volumeRoot, subPath)), nil
	}
	// Whatever went wrong (missing path, escape, no openat2), the walk creates what is
	// missing, names what escaped, or resolves without openat2.
	fd, err = walk(rootFD, volumeRoot, subPath)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), filepath.Join(volumeRoot, subPath)), nil
}

// validate refuses subPaths that are empty, absolute, or contain a ".." element.
func validate(subPath string) error {
	switch {
	case subPath == "":
		return &RefusedError{SubPath: subPath, Reason: "it is empty"}
	case filepath.IsAbs(subPath):
		return &RefusedError{SubPath: subPath, Reason: "it is an absolute path"}
	}
	for _, e := range strings.Split(subPath, "/") {
		if e == ".." {
			return &RefusedError{SubPath: subPath, Reason: "it contains '..'"}
		}
	}
	return nil
}

// element is one path element still to resolve; link names the symlink (relative to the
// volume root) whose target it came from, empty for the subPath's own elements.
type element struct {
	name   string
	link   string
	target string
}

func split(p, link string) []element {
	var out []element
	for _, e := range strings.Split(p, "/") {
		if e != "" && e != "." {
			out = append(out, element{name: e, link: link, target: p})
		}
	}
	return out
}

// walk resolves subPath below rootFD one element at a time and returns a descriptor
// of the result, creating missing directories.
func walk(rootFD int, volumeRoot, subPath string) (int, error) {
	first, err := unix.Dup(rootFD)
	if err != nil {
		return -1, fmt.Errorf("resolve subPath %q: %w", subPath, err)
	}
	// stack holds the descriptors of the directories from the root to the current one;
	// names their names relative to the root.
	stack := []int{first}
	var names []string
	defer func() {
		for _, fd := range stack {
			unix.Close(fd)
		}
	}()
	here := func() string {
		if len(names) == 0 {
			return "."
		}
		return strings.Join(names, "/")
	}

	todo := split(subPath, "")
	links := 0
	for len(todo) > 0 {
		e := todo[0]
		if e.name == ".." {
			if len(stack) == 1 {
				return -1, &RefusedError{SubPath: subPath, Reason: escapeReason(e)}
			}
			unix.Close(stack[len(stack)-1])
			stack = stack[:len(stack)-1]
			names = names[:len(names)-1]
			todo = todo[1:]
			continue
		}
		parent := stack[len(stack)-1]
		fd, err := unix.Openat(parent, e.name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) {
			return create(rootFD, volumeRoot, subPath, &stack, &names, todo)
		}
		if err != nil {
			return -1, fmt.Errorf("resolve subPath %q: open %s: %w", subPath, filepath.Join(here(), e.name), err)
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("resolve subPath %q: stat %s: %w", subPath, filepath.Join(here(), e.name), err)
		}
		rel := filepath.Join(here(), e.name)
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFLNK:
			target, err := readlinkFD(fd)
			unix.Close(fd)
			if err != nil {
				return -1, fmt.Errorf("resolve subPath %q: read symlink %s: %w", subPath, rel, err)
			}
			links++
			if links > maxSymlinks {
				return -1, &RefusedError{SubPath: subPath, Reason: fmt.Sprintf("more than %d symlinks to follow", maxSymlinks)}
			}
			if filepath.IsAbs(target) {
				return -1, &RefusedError{SubPath: subPath, Reason: fmt.Sprintf("symlink %q points to the absolute path %q, outside the volume", rel, target)}
			}
			todo = append(split(target, rel), todo[1:]...)
			continue
		case unix.S_IFDIR:
		default:
			if len(todo) > 1 {
				unix.Close(fd)
				return -1, &RefusedError{SubPath: subPath, Reason: fmt.Sprintf("%q is not a directory", rel)}
			}
		}
		stack = append(stack, fd)
		names = append(names, e.name)
		todo = todo[1:]
	}
	if len(stack) == 1 {
		// The subPath resolved to the volume root itself ("." or a symlink to ".").
		return unix.Dup(stack[0])
	}
	fd := stack[len(stack)-1]
	stack = stack[:len(stack)-1]
	return fd, nil
}

// escapeReason names the symlink that climbed out of the volume.
func escapeReason(e element) string {
	if e.link == "" {
		return "it climbs above the volume"
	}
	return fmt.Sprintf("symlink %q points to %q, outside the volume", e.link, e.target)
}

// create makes the remaining elements as directories below the top of stack, each
// with the volume root's mode.
func create(rootFD int, volumeRoot, subPath string, stack *[]int, names *[]string, todo []element) (int, error) {
	for _, e := range todo {
		if e.link != "" {
			return -1, &RefusedError{SubPath: subPath, Reason: fmt.Sprintf("symlink %q points to a missing path", e.link)}
		}
	}
	var rootStat unix.Stat_t
	if err := unix.Fstat(rootFD, &rootStat); err != nil {
		return -1, fmt.Errorf("create subPath %q: stat volume root %s: %w", subPath, volumeRoot, err)
	}
	perm := rootStat.Mode & (unix.S_ISUID | unix.S_ISGID | unix.S_ISVTX | 0o777)
	for _, e := range todo {
		parent := (*stack)[len(*stack)-1]
		rel := strings.Join(append(append([]string(nil), *names...), e.name), "/")
		if err := unix.Mkdirat(parent, e.name, perm&0o777); err != nil && !errors.Is(err, unix.EEXIST) {
			return -1, fmt.Errorf("create subPath %q: create directory %s: %w", subPath, rel, err)
		}
		fd, err := unix.Openat(parent, e.name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			return -1, &RefusedError{SubPath: subPath, Reason: fmt.Sprintf("%q changed into a non-directory while it was created", rel)}
		}
		if err != nil {
			return -1, fmt.Errorf("create subPath %q: open directory %s: %w", subPath, rel, err)
		}
		*stack = append(*stack, fd)
		*names = append(*names, e.name)
		// Mkdirat applies the umask and ignores the special bits: set the mode exactly.
		if err := unix.Fchmod(fd, perm); err != nil {
			return -1, fmt.Errorf("create subPath %q: set mode of %s: %w", subPath, rel, err)
		}
	}
	fd := (*stack)[len(*stack)-1]
	*stack = (*stack)[:len(*stack)-1]
	return fd, nil
}

// readlinkFD reads the target of the symlink an O_PATH|O_NOFOLLOW descriptor holds.
func readlinkFD(fd int) (string, error) {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(fd, "", buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}
