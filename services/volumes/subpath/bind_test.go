package subpath

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatalf("this test bind-mounts and must run as root (CAP_SYS_ADMIN); running as euid %d", os.Geteuid())
	}
}

func inode(t *testing.T, p string) (uint64, uint64) {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st.Dev, st.Ino
}

func mounted(t *testing.T, p string) bool {
	t.Helper()
	m, err := mountinfo.Mounted(p)
	if errors.Is(err, os.ErrNotExist) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestBindMountsWhatWasChecked(t *testing.T) {
	requireRoot(t)
	root := volume(t)
	targets := t.TempDir()
	t.Cleanup(func() { _ = UnbindAll(targets) })

	dir := filepath.Join(targets, "vol", "app", "0")
	if err := Bind(root, "a/b", dir, true); err != nil {
		t.Fatal(err)
	}
	if !mounted(t, dir) {
		t.Fatalf("%s is not a mount point", dir)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "file")); err != nil || string(b) != "x" {
		t.Fatalf("read a/b/file through the bind mount: %q, %v", b, err)
	}
	file := filepath.Join(targets, "vol", "app", "1")
	if err := Bind(root, "cfg", file, true); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(file); err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("a file subPath's target: %v, %v; want a regular file", fi, err)
	}

	// The attack: a/b becomes a symlink to / after the check.
	if err := os.Rename(filepath.Join(root, "a/b"), filepath.Join(root, "a/moved")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/", filepath.Join(root, "a/b")); err != nil {
		t.Fatal(err)
	}
	rootDev, rootIno := inode(t, "/")
	if dev, ino := inode(t, dir); dev == rootDev && ino == rootIno {
		t.Fatalf("the bind mount shows the host's root after the swap")
	}
	if b, err := os.ReadFile(filepath.Join(dir, "file")); err != nil || string(b) != "x" {
		t.Fatalf("the bind mount no longer shows the directory checked: %q, %v", b, err)
	}
	// Kept while running...
	if err := Bind(root, "a/b", dir, true); err != nil {
		t.Fatalf("keep: %v", err)
	}
	// ...refused at the next start, and the stale mount is gone.
	err := Bind(root, "a/b", dir, false)
	var refused *RefusedError
	if !errors.As(err, &refused) {
		t.Fatalf("Bind after the swap = %v, want a refusal", err)
	}
	if mounted(t, dir) {
		t.Errorf("%s still mounted after the refusal", dir)
	}
	if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s left behind after the refusal: %v", dir, err)
	}

	// Back to a directory: mounted anew on the new one.
	if err := os.Remove(filepath.Join(root, "a/b")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(root, "a/b"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := Bind(root, "a/b", dir, false); err != nil {
		t.Fatal(err)
	}
	wd, wi := inode(t, filepath.Join(root, "a/b"))
	if d, i := inode(t, dir); d != wd || i != wi {
		t.Errorf("the target shows %d/%d, want the new a/b %d/%d", d, i, wd, wi)
	}

	if err := UnbindAll(targets); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(targets); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("UnbindAll left %s: %v", targets, err)
	}
	if b, err := os.ReadFile(filepath.Join(root, "a/moved/file")); err != nil || string(b) != "x" {
		t.Errorf("UnbindAll touched the volume's content: %q, %v", b, err)
	}
}

// TestBindMountsTheDescriptorNotThePath swaps the subPath for a symlink to / in the window
// between its check and its mount: the mount still shows the directory checked.
func TestBindMountsTheDescriptorNotThePath(t *testing.T) {
	requireRoot(t)
	root := t.TempDir()
	targets := t.TempDir()
	t.Cleanup(func() { _ = UnbindAll(targets) })
	sub := filepath.Join(root, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sub, "mine"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	beforeMount = func() {
		if err := os.Rename(sub, filepath.Join(root, "moved")); err != nil {
			t.Error(err)
		}
		if err := os.Symlink("/", sub); err != nil {
			t.Error(err)
		}
	}
	t.Cleanup(func() { beforeMount = nil })
	target := filepath.Join(targets, "vol", "victim", "0")
	if err := Bind(root, "sub", target, false); err != nil {
		t.Fatal(err)
	}
	rootDev, rootIno := inode(t, "/")
	if d, i := inode(t, target); d == rootDev && i == rootIno {
		t.Fatal("the target shows the host's root: the path was mounted, not the descriptor")
	}
	if _, err := os.Stat(filepath.Join(target, "mine")); err != nil {
		t.Errorf("the target does not show the directory checked: %v", err)
	}
}

// TestBindUnderASwapLoop races Bind against a writer that swaps the subPath between a
// directory and a symlink to / as fast as it can: every Bind either is refused or mounts
// a directory of the volume, never the host's root.
func TestBindUnderASwapLoop(t *testing.T) {
	requireRoot(t)
	root := t.TempDir()
	targets := t.TempDir()
	t.Cleanup(func() { _ = UnbindAll(targets) })
	sub := filepath.Join(root, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			_ = os.RemoveAll(sub)
			_ = os.Symlink("/", sub)
			_ = os.Remove(sub)
			_ = os.Mkdir(sub, 0o755)
		}
	}()
	rootDev, rootIno := inode(t, "/")
	volDev, _ := inode(t, root)
	target := filepath.Join(targets, "vol", "victim", "0")
	var ok, refused int
	for range 500 {
		err := Bind(root, "sub", target, false)
		var r *RefusedError
		switch {
		case errors.As(err, &r):
			refused++
			continue
		case err != nil:
			// The directory vanished under the open: not an escape.
			continue
		}
		ok++
		d, i := inode(t, target)
		if d == rootDev && i == rootIno {
			stop.Store(true)
			wg.Wait()
			t.Fatalf("after %d binds the target shows the host's root", ok)
		}
		if d != volDev {
			stop.Store(true)
			wg.Wait()
			t.Fatalf("the target shows device %d, not the volume's %d", d, volDev)
		}
	}
	stop.Store(true)
	wg.Wait()
	t.Logf("500 binds under the swap loop: %d mounted a directory of the volume, %d refused", ok, refused)
	if ok == 0 {
		t.Errorf("no bind succeeded: the loop proved nothing")
	}
}
