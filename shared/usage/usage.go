// Package usage measures how much disk (or memory, for a tmpfs) and how many inodes a
// directory uses: unitlet-volumes' volume usage and the containers' log usage in
// unitlet-status's /stats/summary.
package usage

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Measure returns the bytes (allocated blocks, not apparent sizes) and inodes used under
// dir, dir itself included. It walks without following symbolic links, counts a file with
// several hard links once, and does not enter other file systems mounted below dir. When
// dir is itself the root of a tmpfs (a memory-backed emptyDir), the file system's own
// counters are used instead of a walk; they also count files deleted but still open.
func Measure(dir string) (bytes, inodes int64, err error) {
	var top unix.Stat_t
	if err := unix.Lstat(dir, &top); err != nil {
		return 0, 0, fmt.Errorf("measure %s: %w", dir, err)
	}
	if top.Mode&unix.S_IFMT != unix.S_IFDIR {
		return 0, 0, fmt.Errorf("measure %s: not a directory", dir)
	}
	tmpfsRoot, err := isTmpfsRoot(dir, &top)
	if err != nil {
		return 0, 0, fmt.Errorf("measure %s: %w", dir, err)
	}
	if tmpfsRoot {
		return statfsUsage(dir)
	}
	return walk(dir, top.Dev)
}

// isTmpfsRoot tells whether dir is the root of a tmpfs: its file system is a tmpfs and its
// parent lies on another device.
func isTmpfsRoot(dir string, st *unix.Stat_t) (bool, error) {
	var sfs unix.Statfs_t
	if err := unix.Statfs(dir, &sfs); err != nil {
		return false, fmt.Errorf("statfs: %w", err)
	}
	if sfs.Type != unix.TMPFS_MAGIC {
		return false, nil
	}
	var parent unix.Stat_t
	if err := unix.Stat(filepath.Join(dir, ".."), &parent); err != nil {
		return false, fmt.Errorf("stat parent: %w", err)
	}
	return parent.Dev != st.Dev || parent.Ino == st.Ino, nil
}

func statfsUsage(dir string) (bytes, inodes int64, err error) {
	var sfs unix.Statfs_t
	if err := unix.Statfs(dir, &sfs); err != nil {
		return 0, 0, fmt.Errorf("measure %s: statfs: %w", dir, err)
	}
	bytes = int64(sfs.Blocks-sfs.Bfree) * int64(sfs.Bsize)
	inodes = int64(sfs.Files - sfs.Ffree)
	return bytes, inodes, nil
}

func walk(dir string, dev uint64) (bytes, inodes int64, err error) {
	seen := make(map[uint64]struct{})
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			// A file removed while the walk runs is no longer used.
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(path, &st); err != nil {
			if errors.Is(err, unix.ENOENT) {
				return nil
			}
			return fmt.Errorf("lstat %s: %w", path, err)
		}
		if st.Dev != dev {
			// Another file system mounted here is not this volume's usage.
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if st.Nlink > 1 && st.Mode&unix.S_IFMT != unix.S_IFDIR {
			if _, ok := seen[st.Ino]; ok {
				return nil
			}
			seen[st.Ino] = struct{}{}
		}
		bytes += st.Blocks * 512
		inodes++
		return nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("measure %s: %w", dir, err)
	}
	return bytes, inodes, nil
}
