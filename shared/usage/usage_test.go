package usage

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

const mib = 1 << 20

func writeFile(t *testing.T, path string, size int) {
	t.Helper()
	if err := os.WriteFile(path, bytes.Repeat([]byte{'x'}, size), 0o644); err != nil {
		t.Fatal(err)
	}
	// Allocate blocks now rather than at a delayed writeback.
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}

func measure(t *testing.T, dir string) (int64, int64) {
	t.Helper()
	b, i, err := Measure(dir)
	if err != nil {
		t.Fatalf("Measure(%s): %v", dir, err)
	}
	return b, i
}

func TestMeasureCountsBlocksAndInodes(t *testing.T) {
	dir := t.TempDir()
	emptyBytes, emptyInodes := measure(t, dir)
	if emptyInodes != 1 {
		t.Errorf("empty dir: %d inodes, want 1 (the directory)", emptyInodes)
	}

	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "sub", "a"), mib)
	writeFile(t, filepath.Join(dir, "b"), 10)

	got, inodes := measure(t, dir)
	if inodes != 4 {
		t.Errorf("%d inodes, want 4 (dir, sub, a, b)", inodes)
	}
	// a takes at least 1 MiB of blocks, b at least one block; nothing near 2 MiB.
	if got < emptyBytes+mib+512 || got > emptyBytes+2*mib {
		t.Errorf("%d bytes, want between %d and %d", got, emptyBytes+mib+512, emptyBytes+2*mib)
	}
}

func TestMeasureCountsAllocatedNotApparentSize(t *testing.T) {
	dir := t.TempDir()
	before, _ := measure(t, dir)
	sparse := filepath.Join(dir, "sparse")
	f, err := os.Create(sparse)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(100 * mib); err != nil {
		t.Fatal(err)
	}
	f.Close()
	got, inodes := measure(t, dir)
	if got-before > mib {
		t.Errorf("a 100 MiB sparse file counted as %d bytes, want its allocated blocks only", got-before)
	}
	if inodes != 2 {
		t.Errorf("%d inodes, want 2", inodes)
	}
}

func TestMeasureDoesNotFollowSymlinksAndCountsHardLinksOnce(t *testing.T) {
	outside := t.TempDir()
	big := filepath.Join(outside, "big")
	writeFile(t, big, 4*mib)

	dir := t.TempDir()
	base, _ := measure(t, dir)
	if err := os.Symlink(big, filepath.Join(dir, "link-to-file")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "link-to-dir")); err != nil {
		t.Fatal(err)
	}
	got, inodes := measure(t, dir)
	if got-base >= mib {
		t.Errorf("symlinks counted as %d bytes: their targets were followed", got-base)
	}
	if inodes != 3 {
		t.Errorf("%d inodes, want 3 (dir and two links)", inodes)
	}

	hard := t.TempDir()
	writeFile(t, filepath.Join(hard, "one"), mib)
	if err := os.Link(filepath.Join(hard, "one"), filepath.Join(hard, "two")); err != nil {
		t.Fatal(err)
	}
	got, inodes = measure(t, hard)
	if got >= 2*mib {
		t.Errorf("hard-linked 1 MiB file counted as %d bytes, want once", got)
	}
	if inodes != 2 {
		t.Errorf("%d inodes, want 2 (dir and the one file)", inodes)
	}
}

func TestMeasureErrors(t *testing.T) {
	if _, _, err := Measure(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("Measure of a missing dir = nil error")
	}
	file := filepath.Join(t.TempDir(), "f")
	writeFile(t, file, 1)
	if _, _, err := Measure(file); err == nil {
		t.Error("Measure of a file = nil error")
	}
}

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatalf("this test mounts a tmpfs and must run as root (euid %d)", os.Geteuid())
	}
}

func mountTmpfs(t *testing.T, dir, size string) {
	t.Helper()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size="+size); err != nil {
		t.Fatalf("mount tmpfs at %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
}

func TestMeasureDoesNotCrossIntoOtherFileSystems(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "after"), 10) // sorts after mnt: still counted
	mountTmpfs(t, mnt, "8m")
	writeFile(t, filepath.Join(mnt, "hidden"), 4*mib)

	got, inodes := measure(t, dir)
	if got >= mib {
		t.Errorf("%d bytes: the tmpfs mounted below was measured", got)
	}
	if inodes != 2 {
		t.Errorf("%d inodes, want 2 (dir and after; the mount point is another file system)", inodes)
	}
}

func TestMeasureTmpfsMountedAtDir(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	mountTmpfs(t, dir, "8m")
	writeFile(t, filepath.Join(dir, "a"), 2*mib)
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "sub", "b"), mib)

	got, inodes := measure(t, dir)
	if got < 3*mib || got > 4*mib {
		t.Errorf("%d bytes, want about 3 MiB", got)
	}
	if inodes < 3 {
		t.Errorf("%d inodes, want at least 3 (sub, a, b)", inodes)
	}

	// A deleted but open file still takes memory.
	f, err := os.Open(filepath.Join(dir, "a"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := os.Remove(filepath.Join(dir, "a")); err != nil {
		t.Fatal(err)
	}
	if got, _ := measure(t, dir); got < 3*mib {
		t.Errorf("%d bytes with a deleted open 2 MiB file, want it counted", got)
	}
}

// TestMeasureDirectoryInsideTmpfs checks the tmpfs shortcut is for a tmpfs mounted at dir, not
// for a plain directory inside a tmpfs.
func TestMeasureDirectoryInsideTmpfs(t *testing.T) {
	requireRoot(t)
	root := t.TempDir()
	mountTmpfs(t, root, "8m")
	writeFile(t, filepath.Join(root, "outside"), 2*mib)
	dir := filepath.Join(root, "dir")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "inside"), mib)

	got, inodes := measure(t, dir)
	if got < mib || got >= 2*mib {
		t.Errorf("%d bytes, want about 1 MiB (only dir's own files)", got)
	}
	if inodes != 2 {
		t.Errorf("%d inodes, want 2", inodes)
	}
}
