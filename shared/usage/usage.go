// Package usage measures how much disk (or memory, for a tmpfs) and how many inodes a
// directory uses: unitlet-volumes' volume usage, unitlet-eviction's pod usage and the
// containers' log usage in unitlet-status's /stats/summary.
//
// The walk is bounded in memory whatever a pod puts in the directory, as the services
// that walk run under a MemoryMax= of their own: it reads each directory in small batches
// (getdents into a fixed buffer, never a whole directory at once), keeps one open directory
// and one buffer per level it is in, goes at most maxDepth levels down, and remembers at
// most maxLinked hard-linked inodes. A million entries in one directory cost what ten do.
package usage

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

const (
	// maxDepth is how many directory levels below the top the walk enters; a directory
	// deeper is counted (its own inode and blocks) but not entered, and the measurement
	// ends with ErrTooDeep. Each level holds an open directory and a dirBufSize buffer:
	// 1024 levels are at most 4 MiB and 1024 descriptors. The kubelet's path-based walk
	// fails outright on paths longer than PATH_MAX (4096 bytes): about 2000 levels of
	// one-letter names, 16 of the longest.
	maxDepth = 1024
	// dirBufSize is one level's getdents buffer: a page, some 100 to 170 entries of short
	// names, at least 14 of the longest (255 bytes).
	dirBufSize = 4096
	// maxLinked is how many hard-linked inodes (files with more than one link) the walk
	// remembers to count each once; an inode leaves the set when all its links have been
	// met. Past it, a further hard-linked inode is counted at each of its links met: the
	// measurement can then be too high, never too low (see walker.countOnce). The set
	// takes about 9 MiB when full.
	maxLinked = 1 << 18
)

// ErrTooDeep is wrapped by the error of a measurement that met directories deeper than it
// walks (maxDepth levels). The bytes and inodes returned with it are what was counted
// above that depth: a lower bound of the usage.
var ErrTooDeep = errors.New("directories nested too deep to walk")

// Measure returns the bytes (allocated blocks, not apparent sizes) and inodes used under
// dir, dir itself included. It walks without following symbolic links, counts a file with
// several hard links once, and does not enter other file systems mounted below dir. When
// dir is itself the root of a tmpfs (a memory-backed emptyDir), the file system's own
// counters are used instead of a walk; they also count files deleted but still open.
//
// On an error the counts are 0, except with ErrTooDeep (see there).
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
	return walk(dir, &top, unix.O_NOFOLLOW)
}

// DiskUsage is the kubelet's du of path (pkg/volume/util/fs.DiskUsage): the blocks
// allocated (times 512) and the inodes of path and of everything below it, a file with
// several links counted once, entries on another device than path's (mounts below it)
// left out, files that vanish meanwhile not used. Unlike Measure, path may be a file and
// is followed if it is a symbolic link, and a tmpfs is walked as any directory. The walk
// is Measure's, bounded in memory; on an error the counts are 0, except with ErrTooDeep.
func DiskUsage(path string) (bytes, inodes int64, err error) {
	var top unix.Stat_t
	if err := unix.Stat(path, &top); err != nil {
		return 0, 0, fmt.Errorf("measure %s: %w", path, err)
	}
	if top.Mode&unix.S_IFMT != unix.S_IFDIR {
		return top.Blocks * 512, 1, nil
	}
	return walk(path, &top, 0)
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

// walk measures the directory top (stat as st; flags add to its open, O_NOFOLLOW for
// Measure) and everything below it on its device.
func walk(top string, st *unix.Stat_t, flags int) (bytes, inodes int64, err error) {
	w := &walker{top: top, dev: st.Dev, depthLimit: maxDepth, linkLimit: maxLinked}
	if err := w.run(st, flags); err != nil {
		return 0, 0, fmt.Errorf("measure %s: %w", top, err)
	}
	if w.tooDeep > 0 {
		return w.bytes, w.inodes, fmt.Errorf("measure %s: %d directories %d levels below it were counted but not entered: %w",
			top, w.tooDeep, w.depthLimit, ErrTooDeep)
	}
	return w.bytes, w.inodes, nil
}

// walker is one walk's state: the counts, the hard-linked inodes met, and the directories
// it is in, top first.
type walker struct {
	top   string
	dev   uint64
	stack []level
	// linked holds, per hard-linked inode counted, how many of its links are still to be
	// met; overLinked counts the inodes counted without being remembered (the set full).
	linked     map[uint64]uint32
	overLinked int64
	// tooDeep counts the directories not entered for depthLimit.
	tooDeep int64

	bytes, inodes         int64
	depthLimit, linkLimit int
	names                 []string // ParseDirent's result, reused
}

// level is a directory the walk is in: its descriptor and what getdents read of it.
type level struct {
	fd     int
	name   string // below its parent; the top's is ""
	buf    []byte
	pos, n int
}

func (w *walker) run(st *unix.Stat_t, flags int) (err error) {
	fd, err := unix.Open(w.top, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|flags, 0)
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	defer func() {
		for _, l := range w.stack {
			unix.Close(l.fd)
		}
		w.stack = w.stack[:0]
	}()
	var opened unix.Stat_t
	if err := unix.Fstat(fd, &opened); err != nil {
		unix.Close(fd)
		return fmt.Errorf("stat: %w", err)
	}
	if opened.Dev != st.Dev || opened.Ino != st.Ino {
		unix.Close(fd)
		return errors.New("replaced while it was opened")
	}
	w.count(st)
	w.push(fd, "")

	for len(w.stack) > 0 {
		l := &w.stack[len(w.stack)-1]
		name, ok, err := w.next(l)
		if err != nil {
			return fmt.Errorf("read directory %s: %w", w.path(""), err)
		}
		if !ok {
			unix.Close(l.fd)
			w.stack = w.stack[:len(w.stack)-1]
			continue
		}
		var st unix.Stat_t
		if err := unix.Fstatat(l.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue // removed since it was listed: no longer used
			}
			return fmt.Errorf("lstat %s: %w", w.path(name), err)
		}
		if st.Dev != w.dev {
			continue // another file system mounted here is not this one's usage
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			w.countOnce(&st)
			continue
		}
		w.count(&st)
		if len(w.stack) > w.depthLimit {
			w.tooDeep++
			continue
		}
		cfd, err := unix.Openat(l.fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
				continue // removed or replaced by a file or link since: what it held is gone
			}
			return fmt.Errorf("open %s: %w", w.path(name), err)
		}
		var opened unix.Stat_t
		if err := unix.Fstat(cfd, &opened); err != nil {
			unix.Close(cfd)
			return fmt.Errorf("stat %s: %w", w.path(name), err)
		}
		if opened.Dev != st.Dev || opened.Ino != st.Ino {
			// Replaced by another directory, or a mount made on it, since its stat.
			unix.Close(cfd)
			continue
		}
		w.push(cfd, name) // l is stale from here
	}
	return nil
}

// push enters a directory, reusing the buffer of an earlier level at that depth.
func (w *walker) push(fd int, name string) {
	if len(w.stack) < cap(w.stack) {
		w.stack = w.stack[:len(w.stack)+1]
		l := &w.stack[len(w.stack)-1]
		l.fd, l.name, l.pos, l.n = fd, name, 0, 0
		if l.buf == nil {
			l.buf = make([]byte, dirBufSize)
		}
		return
	}
	w.stack = append(w.stack, level{fd: fd, name: name, buf: make([]byte, dirBufSize)})
}

// next is the next entry of the directory l ("." and ".." left out); ok is false at its end.
func (w *walker) next(l *level) (name string, ok bool, err error) {
	for {
		if l.pos >= l.n {
			n, err := unix.Getdents(l.fd, l.buf)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil {
				return "", false, err
			}
			if n <= 0 {
				return "", false, nil
			}
			l.pos, l.n = 0, n
		}
		consumed, count, names := unix.ParseDirent(l.buf[l.pos:l.n], 1, w.names[:0])
		w.names = names
		if consumed <= 0 {
			return "", false, fmt.Errorf("a directory entry of %d bytes does not parse", l.n-l.pos)
		}
		l.pos += consumed
		if count == 1 {
			return names[0], true, nil
		}
	}
}

func (w *walker) count(st *unix.Stat_t) {
	w.bytes += st.Blocks * 512
	w.inodes++
}

// countOnce counts a file that is not a directory, once for all its hard links while the
// set of hard-linked inodes has room. With the set full (maxLinked inodes of which links
// are still to be met) a further hard-linked inode is counted at each of its links met: a
// pod's usage may then be over-stated, never under-stated, which is the safe side for
// eviction and for a sizeLimit (hiding data behind links gains nothing), and takes a
// quarter of a million hard-linked files in one volume.
func (w *walker) countOnce(st *unix.Stat_t) {
	if st.Nlink > 1 {
		if left, ok := w.linked[st.Ino]; ok {
			if left <= 1 {
				delete(w.linked, st.Ino)
			} else {
				w.linked[st.Ino] = left - 1
			}
			return
		}
		if w.linked == nil {
			w.linked = map[uint64]uint32{}
		}
		if len(w.linked) < w.linkLimit {
			w.linked[st.Ino] = uint32(min(uint64(st.Nlink)-1, uint64(^uint32(0))))
		} else {
			w.overLinked++
		}
	}
	w.count(st)
}

// path names name in the directory the walk is in, for an error.
func (w *walker) path(name string) string {
	parts := []string{w.top}
	for _, l := range w.stack[1:] {
		parts = append(parts, l.name)
	}
	if name != "" {
		parts = append(parts, name)
	}
	p := filepath.Join(parts...)
	if len(p) > 512 {
		p = w.top + "/…" + p[len(p)-256:]
	}
	return strings.ToValidUTF8(p, "?")
}
