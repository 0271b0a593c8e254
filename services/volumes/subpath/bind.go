package subpath

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// Bind resolves subPath inside volumeRoot as Open does and bind-mounts what it resolved
// to onto target, through the descriptor of that open (/proc/self/fd/N): the object
// mounted is the one that was checked, whatever the volume's content became since. A
// container that swaps a directory of the volume for a symlink after the check changes
// nothing of what target holds. The runtime is then given target, a path in a directory
// no container can write.
//
// With keep set, a target that is already mounted is kept as it is, unresolved: the
// mounts of running containers do not move. Without it the subPath is resolved again, and
// a target mounted on something else is unmounted and mounted anew; a refusal leaves
// target unmounted, so nothing stale is handed out. target's parent directories are made
// 0750; target itself is a directory or an empty file, as the resolved object is.
func Bind(volumeRoot, subPath, target string, keep bool) error {
	if keep {
		mounted, err := mountinfo.Mounted(target)
		if err == nil && mounted {
			return nil
		}
	}
	f, err := Open(volumeRoot, subPath)
	if err != nil {
		if uerr := Unbind(target); uerr != nil {
			return fmt.Errorf("%w (and %v)", err, uerr)
		}
		return err
	}
	defer f.Close()
	var src unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &src); err != nil {
		return fmt.Errorf("subPath %q: stat what it resolved to: %w", subPath, err)
	}
	if same(target, &src) {
		return nil
	}
	if err := unmountAll(target); err != nil {
		return err
	}
	isDir := src.Mode&unix.S_IFMT == unix.S_IFDIR
	if err := makeTarget(target, isDir); err != nil {
		return fmt.Errorf("subPath %q: %w", subPath, err)
	}
	if beforeMount != nil {
		beforeMount()
	}
	source := "/proc/self/fd/" + strconv.Itoa(int(f.Fd()))
	if err := unix.Mount(source, target, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("subPath %q: bind-mount it onto %s: %w", subPath, target, err)
	}
	if !same(target, &src) {
		_ = unmountAll(target)
		return fmt.Errorf("subPath %q: %s does not show what was mounted onto it", subPath, target)
	}
	return nil
}

// beforeMount, when set (by tests), runs between the resolution and the mount: the
// window a container's swap aims for.
var beforeMount func()

// same reports whether target is a mount point showing the object src describes.
func same(target string, src *unix.Stat_t) bool {
	var st unix.Stat_t
	if err := unix.Lstat(target, &st); err != nil || st.Dev != src.Dev || st.Ino != src.Ino {
		return false
	}
	mounted, err := mountinfo.Mounted(target)
	return err == nil && mounted
}

// makeTarget makes target a directory or an empty regular file, its parents 0750
// directories, replacing an unmounted target of the other kind.
func makeTarget(target string, isDir bool) error {
	if err := os.MkdirAll(filepath.Dir(target), 0o750); err != nil {
		return fmt.Errorf("make the directory of %s: %w", target, err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(target, &st); err == nil {
		if (st.Mode&unix.S_IFMT == unix.S_IFDIR) == isDir && st.Mode&unix.S_IFMT != unix.S_IFLNK {
			return nil
		}
		// Not mounted (unmountAll ran): an empty directory or file of ours, or a symlink
		// nothing should have made. Remove never recurses.
		if err := os.Remove(target); err != nil {
			return fmt.Errorf("replace %s: %w", target, err)
		}
	}
	if isDir {
		if err := os.Mkdir(target, 0o750); err != nil {
			return fmt.Errorf("make %s: %w", target, err)
		}
		return nil
	}
	fd, err := unix.Open(target, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o640)
	if err != nil {
		return fmt.Errorf("make %s: %w", target, err)
	}
	return unix.Close(fd)
}

// maxStacked bounds the mounts unmountAll takes off one target.
const maxStacked = 32

// unmountAll unmounts every mount stacked on target; a target that does not exist or is
// not mounted is fine.
func unmountAll(target string) error {
	for range maxStacked {
		mounted, err := mountinfo.Mounted(target)
		if errors.Is(err, os.ErrNotExist) || (err == nil && !mounted) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("is %s mounted: %w", target, err)
		}
		if err := unix.Unmount(target, unix.UMOUNT_NOFOLLOW); err != nil {
			return fmt.Errorf("unmount %s: %w", target, err)
		}
	}
	return fmt.Errorf("unmount %s: still mounted after %d unmounts", target, maxStacked)
}

// Unbind unmounts target and removes it (an empty directory or file). It never removes
// anything that is still mounted or not empty: what target showed stays untouched.
func Unbind(target string) error {
	if err := unmountAll(target); err != nil {
		return err
	}
	if err := os.Remove(target); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", target, err)
	}
	return nil
}

// UnbindAll unbinds every target below dir, laid out as <dir>/<volume>/<container>/<index>
// (the kubelet's volume-subpaths layout), then removes the emptied directories and dir.
func UnbindAll(dir string) error {
	vols, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, v := range vols {
		vdir := filepath.Join(dir, v.Name())
		containers, err := os.ReadDir(vdir)
		if err != nil {
			return err
		}
		for _, c := range containers {
			cdir := filepath.Join(vdir, c.Name())
			targets, err := os.ReadDir(cdir)
			if err != nil {
				return err
			}
			for _, t := range targets {
				if err := Unbind(filepath.Join(cdir, t.Name())); err != nil {
					return err
				}
			}
			if err := os.Remove(cdir); err != nil {
				return fmt.Errorf("remove %s: %w", cdir, err)
			}
		}
		if err := os.Remove(vdir); err != nil {
			return fmt.Errorf("remove %s: %w", vdir, err)
		}
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	return nil
}
