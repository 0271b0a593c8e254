package subpath

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// FuzzOpen shapes a volume's directory tree, resolves a subPath in it the ways a subPath
// is resolved, changes the tree and resolves again. The property: whatever the tree and
// the subPath, nothing outside the volume is ever handed out or made.
//
// The tree is the volume of the subpath tests (seedTree: symlinks within, to the volume
// root, climbing out, absolute, to an "outside" directory beside the volume, dangling,
// looping) and the fuzzer's own lines, one operation each:
//
//	d PATH          a directory (and its parents)
//	f PATH          an empty file
//	l PATH TARGET   a symlink
//	m FROM TO       a rename, inside the volume
//	x PATH TARGET   PATH moved aside and a symlink to TARGET put in its place: the swap of a
//	                container writing into the volume
//
// In a TARGET, @out is the outside directory's absolute path, @root the volume's and
// @parent the directory holding both. Every operation is made beneath the volume without
// following symlinks; one that cannot be is skipped.
//
// Each round resolves the subPath through Open (openat2), through the element walk alone
// (what a kernel without openat2 uses), through Resolve, and, as root, through Bind with
// the swaps made in Bind's window between the check and the mount. Every descriptor,
// path and mount must show an object a walk of the volume that follows no symlink finds,
// never a symlink; nothing outside the volume may appear; Open and the walk agree; a
// refusal names the subPath; a refused Bind leaves its target unmounted.
func FuzzOpen(f *testing.F) {
	// Plain subPaths through the seed tree; the corpus (testdata/fuzz/FuzzOpen) holds the
	// trees and swaps of the attacks.
	for _, sub := range []string{"a/b/file", "cfg", "inside/file", "up/secret", "a/abs/secret", "abs/passwd", "a/deep", "dangling", "loop", "x/y/z", "..", "/etc", "\x00"} {
		f.Add("", "", sub)
	}
	f.Fuzz(func(t *testing.T, tree, swaps, sub string) {
		v := newFuzzVolume(t)
		v.apply(t, seedTree)
		v.apply(t, tree)
		outside := v.outsideNow(t)

		v.resolveAll(t, "before the swaps", sub)
		v.unchangedOutside(t, "before the swaps", outside)
		if os.Geteuid() != 0 {
			v.apply(t, swaps)
		} else {
			v.bind(t, "with the swaps in its window", sub, swaps)
		}
		v.unchangedOutside(t, "with the swaps", outside)

		v.resolveAll(t, "after the swaps", sub)
		if os.Geteuid() == 0 {
			v.bind(t, "after the swaps", sub, "")
		}
		v.unchangedOutside(t, "after the swaps", outside)
	})
}

// seedTree is the volume every fuzz round starts from (the volume of the subpath tests).
const seedTree = `d a/b
f a/b/file
d ..v1
f ..v1/cfg
f file
l ..data ..v1
l cfg ..data/cfg
l inside a/b
l dot .
l abs /etc
l a/abs @out
l up ../outside
l a/up ../../outside
l a/deep ../a/../../outside
l a/back ../a/b
l loop loop
l dangling nowhere/x
l a/sub @out/sub`

// maxOps bounds the operations of one tree, so that a round stays quick.
const maxOps = 32

type fuzzVolume struct {
	parent, root, outside string
	rootFD                int
	targets               string // made on the first Bind
	moved                 int
}

func newFuzzVolume(t *testing.T) *fuzzVolume {
	t.Helper()
	parent := t.TempDir()
	v := &fuzzVolume{parent: parent, root: filepath.Join(parent, "root"), outside: filepath.Join(parent, "outside")}
	for _, d := range []string{v.root, filepath.Join(v.outside, "sub")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(v.outside, "secret"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(v.root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	v.rootFD = fd
	t.Cleanup(func() { unix.Close(fd) })
	return v
}

// apply makes the operations of tree in the volume.
func (v *fuzzVolume) apply(t *testing.T, tree string) {
	t.Helper()
	lines := strings.Split(tree, "\n")
	if len(lines) > maxOps {
		lines = lines[:maxOps]
	}
	for _, line := range lines {
		op, rest, _ := strings.Cut(line, " ")
		p, arg, _ := strings.Cut(rest, " ")
		arg = strings.NewReplacer("@out", v.outside, "@root", v.root, "@parent", v.parent).Replace(arg)
		switch op {
		case "d":
			if fd, name, ok := v.parentOf(p); ok {
				_ = unix.Mkdirat(fd, name, 0o755)
				unix.Close(fd)
			}
		case "f":
			if fd, name, ok := v.parentOf(p); ok {
				if ffd, err := unix.Openat(fd, name, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644); err == nil {
					unix.Close(ffd)
				}
				unix.Close(fd)
			}
		case "l":
			if fd, name, ok := v.parentOf(p); ok {
				_ = unix.Symlinkat(arg, fd, name)
				unix.Close(fd)
			}
		case "m":
			v.rename(p, arg)
		case "x":
			v.moved++
			v.rename(p, fmt.Sprintf(".moved-%d", v.moved))
			if fd, name, ok := v.parentOf(p); ok {
				_ = unix.Symlinkat(arg, fd, name)
				unix.Close(fd)
			}
		}
	}
}

func (v *fuzzVolume) rename(from, to string) {
	ffd, fname, ok := v.parentOf(from)
	if !ok {
		return
	}
	defer unix.Close(ffd)
	tfd, tname, ok := v.parentOf(to)
	if !ok {
		return
	}
	defer unix.Close(tfd)
	_ = unix.Renameat(ffd, fname, tfd, tname)
}

// parentOf opens the directory that holds rel in the volume, making the missing ones,
// following no symlink. ok is false when rel is not a name below the volume or its
// directories are not all plain directories.
func (v *fuzzVolume) parentOf(rel string) (fd int, name string, ok bool) {
	rel = path.Clean(rel)
	if !filepath.IsLocal(rel) || rel == "." || strings.ContainsRune(rel, 0) {
		return -1, "", false
	}
	dir, name := path.Split(rel)
	fd, err := unix.Dup(v.rootFD)
	if err != nil {
		return -1, "", false
	}
	for _, e := range strings.Split(strings.TrimSuffix(dir, "/"), "/") {
		if e == "" {
			continue
		}
		_ = unix.Mkdirat(fd, e, 0o755)
		next, err := unix.Openat(fd, e, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			return -1, "", false
		}
		fd = next
	}
	return fd, name, true
}

type object struct{ dev, ino uint64 }

// objects is every object of the volume, found by a walk that follows no symlink.
func (v *fuzzVolume) objects(t *testing.T) map[object]string {
	t.Helper()
	in := map[object]string{}
	err := filepath.WalkDir(v.root, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		in[object{st.Dev, st.Ino}] = p
		return nil
	})
	if err != nil {
		t.Fatalf("walk the volume: %v", err)
	}
	return in
}

// outsideNow lists what the volume's parent holds besides the volume, recursively.
func (v *fuzzVolume) outsideNow(t *testing.T) []string {
	t.Helper()
	var names []string
	err := filepath.WalkDir(v.parent, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == v.root {
			return filepath.SkipDir
		}
		names = append(names, p+" "+d.Type().String())
		return nil
	})
	if err != nil {
		t.Fatalf("walk beside the volume: %v", err)
	}
	return names
}

func (v *fuzzVolume) unchangedOutside(t *testing.T, stage string, was []string) {
	t.Helper()
	if now := v.outsideNow(t); !slices.Equal(now, was) {
		t.Errorf("%s: beside the volume there was %q, now %q: something was made outside the volume", stage, was, now)
	}
}

// shows checks that st, what a resolution of sub handed out, is an object of the volume and
// not a symlink.
func (v *fuzzVolume) shows(t *testing.T, how, sub string, st *unix.Stat_t, where func() string) {
	t.Helper()
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		t.Errorf("%s(%q) handed out a symlink, %s", how, sub, where())
		return
	}
	if _, ok := v.objects(t)[object{st.Dev, st.Ino}]; !ok {
		t.Errorf("%s(%q) handed out %s, not an object of the volume %s", how, sub, where(), v.root)
	}
}

func (v *fuzzVolume) refusal(t *testing.T, how, sub string, err error) {
	t.Helper()
	var re *RefusedError
	if errors.As(err, &re) && re.SubPath != sub {
		t.Errorf("%s(%q): the refusal names %q", how, sub, re.SubPath)
	}
}

// resolveAll resolves sub through Open, the walk alone and Resolve.
func (v *fuzzVolume) resolveAll(t *testing.T, stage, sub string) {
	t.Helper()
	opened := func(how string, fd int, err error) (object, bool) {
		t.Helper()
		if err != nil {
			v.refusal(t, stage+": "+how, sub, err)
			return object{}, false
		}
		defer unix.Close(fd)
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			t.Fatal(err)
		}
		v.shows(t, stage+": "+how, sub, &st, func() string {
			p, _ := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
			return p
		})
		return object{st.Dev, st.Ino}, true
	}

	fd, err := -1, error(nil)
	if f, oerr := Open(v.root, sub); oerr == nil {
		// A duplicate the check owns; f keeps its own.
		fd, err = unix.Dup(int(f.Fd()))
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
	} else {
		err = oerr
	}
	viaOpen, okOpen := opened("Open", fd, err)

	fd, err = -1, validate(sub)
	if err == nil {
		fd, err = walk(v.rootFD, v.root, sub)
	}
	viaWalk, okWalk := opened("walk", fd, err)
	if okOpen && okWalk && viaOpen != viaWalk {
		in := v.objects(t)
		t.Errorf("%s: Open(%q) and the walk disagree: %s and %s", stage, sub, in[viaOpen], in[viaWalk])
	}

	p, err := Resolve(v.root, sub)
	if err != nil {
		v.refusal(t, stage+": Resolve", sub, err)
		return
	}
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatalf("%s: Resolve(%q) = %s: %v", stage, sub, p, err)
	}
	v.shows(t, stage+": Resolve", sub, &st, func() string { return p })
}

// bind binds sub onto a target outside the volume, making swaps in the window between the
// check and the mount, and checks what the target shows. It needs root.
func (v *fuzzVolume) bind(t *testing.T, stage, sub, swaps string) {
	t.Helper()
	if v.targets == "" {
		v.targets = bindTargets(t)
	}
	target := filepath.Join(v.targets, "vol", "c", "0")
	swapped := false
	beforeMount = func() { swapped = true; v.apply(t, swaps) }
	err := Bind(v.root, sub, target, false)
	beforeMount = nil
	if !swapped {
		v.apply(t, swaps)
	}
	if err != nil {
		v.refusal(t, stage+": Bind", sub, err)
		if mounted(t, target) {
			t.Errorf("%s: Bind(%q) failed (%v) and left %s mounted", stage, sub, err, target)
		}
		return
	}
	if !mounted(t, target) {
		t.Errorf("%s: Bind(%q) succeeded and %s is not mounted", stage, sub, target)
	}
	var st unix.Stat_t
	if err := unix.Lstat(target, &st); err != nil {
		t.Fatal(err)
	}
	v.shows(t, stage+": Bind", sub, &st, func() string { return target + " showing " + v.find(object{st.Dev, st.Ino}) })
}

// find names an object by a path beside or in the volume, for a failure's message.
func (v *fuzzVolume) find(o object) string {
	found := fmt.Sprintf("device %d inode %d (not beside the volume)", o.dev, o.ino)
	_ = filepath.WalkDir(v.parent, func(p string, _ fs.DirEntry, err error) error {
		var st unix.Stat_t
		if err == nil && unix.Lstat(p, &st) == nil && st.Dev == o.dev && st.Ino == o.ino {
			found = p
			return filepath.SkipAll
		}
		return nil
	})
	return found
}

// bindTargets makes a directory for bind targets, and on cleanup unbinds everything in
// it. It is never removed recursively: a mount left in it would take its source along.
func bindTargets(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "subpath-fuzz-targets-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := UnbindAll(dir); err != nil {
			t.Errorf("unbind the fuzz targets in %s (left in place): %v", dir, err)
		}
	})
	return dir
}
