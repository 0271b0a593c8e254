// Package ownership gives a volume's files to a pod's fsGroup as the kubelet's
// SetVolumeOwnership does (pkg/volume/volume_linux.go): every file and directory takes
// the group; files gain group read and write (read only for a read-only volume),
// directories also group search and the set-group-ID bit, so that what is created in
// them later belongs to the group too. Symbolic links take the group and keep their mode.
//
// Unlike the kubelet's walk by path names, each entry is opened without following
// symbolic links, relative to its parent's descriptor, and changed through that
// descriptor: a container that swaps a directory of its volume for a symbolic link while
// the walk runs cannot make it change a file outside the volume.
package ownership

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// The bits a file or directory gains for its group.
const (
	readWrite = 0o660
	readOnly  = 0o440
	search    = 0o110
)

// mask is what the kubelet adds to the mode of a file of the given kind.
func mask(dir, ro bool) uint32 {
	m := uint32(readWrite)
	if ro {
		m = readOnly
	}
	if dir {
		m |= search | unix.S_ISGID
	}
	return m
}

// RootMatches reports whether the volume's root directory already has the group and
// the bits Set gives it: the kubelet's test for fsGroupChangePolicy OnRootMismatch.
func RootMatches(dir string, fsGroup int64, ro bool) bool {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return false
	}
	want := mask(true, ro)
	return int64(st.Gid) == fsGroup && st.Mode&want == want
}

// Set gives dir and everything below it, depth first and dir itself last, the group
// fsGroup and the group's bits. It stops at the first entry it cannot change, naming it;
// an entry removed while it walks is skipped.
func Set(dir string, fsGroup int64, ro bool) error {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("apply fsGroup %d to %s: %w", fsGroup, dir, err)
	}
	defer unix.Close(fd)
	if err := set(fd, dir, int(fsGroup), ro); err != nil {
		return fmt.Errorf("apply fsGroup %d to %s: %w", fsGroup, dir, err)
	}
	return nil
}

// set changes the entry open (O_PATH|O_NOFOLLOW) as fd, named path in errors.
func set(fd int, path string, gid int, ro bool) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	kind := st.Mode & unix.S_IFMT
	if kind == unix.S_IFDIR {
		if err := setChildren(fd, path, gid, ro); err != nil {
			return err
		}
	}
	// The entry itself, symbolic link or not: AT_EMPTY_PATH acts on fd.
	if err := unix.Fchownat(fd, "", -1, gid, unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("%s: set group: %w", path, err)
	}
	if kind == unix.S_IFLNK {
		return nil
	}
	// After chown, which clears set-user-ID and set-group-ID; through /proc, which names
	// the open inode, as fchmod does not take an O_PATH descriptor.
	mode := st.Mode&0o7777 | mask(kind == unix.S_IFDIR, ro)
	if err := unix.Chmod("/proc/self/fd/"+strconv.Itoa(fd), mode); err != nil {
		return fmt.Errorf("%s: set mode %#o: %w", path, mode, err)
	}
	return nil
}

func setChildren(fd int, path string, gid int, ro bool) error {
	dfd, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	d := os.NewFile(uintptr(dfd), path)
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	for _, name := range names {
		child := filepath.Join(path, name)
		cfd, err := unix.Openat(dfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) {
			continue // removed meanwhile by a container
		}
		if err != nil {
			return fmt.Errorf("%s: %w", child, err)
		}
		err = set(cfd, child, gid, ro)
		unix.Close(cfd)
		if err != nil {
			return err
		}
	}
	return nil
}
