package usage

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"testing"
	"time"

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

// peakHeapGrowth runs f and returns how far the heap's objects grew above what they took
// before, sampled every millisecond meanwhile.
func peakHeapGrowth(f func()) uint64 {
	runtime.GC()
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	read := func() uint64 {
		metrics.Read(sample)
		return sample[0].Value.Uint64()
	}
	base := read()
	done, peak := make(chan struct{}), make(chan uint64)
	go func() {
		var max uint64
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			max = maxOf(max, read())
			select {
			case <-done:
				peak <- max
				return
			case <-tick.C:
			}
		}
	}()
	f()
	close(done)
	top := maxOf(<-peak, read())
	if top < base {
		return 0
	}
	return top - base
}

func maxOf(a, b uint64) uint64 {
	if a > b {
		return a
	}
	return b
}

// walkHeapBound is the most the heap may grow while one volume is walked, however many
// entries it holds: the directories' buffers (4 MiB at the deepest), a full set of
// hard-linked inodes (9 MiB) and the garbage between two collections. unitlet-eviction's
// MemoryMax= is 128 MiB for everything it does; reading a directory whole took some 130
// MiB for a million entries.
const walkHeapBound = 24 * mib

// linkAll makes n hard links to dir/target in dir, named <prefix><i>.
func linkAll(t *testing.T, dir, target, prefix string, n int) {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	for i := range n {
		if err := unix.Linkat(fd, target, fd, prefix+strconv.Itoa(i), 0); err != nil {
			t.Fatalf("link %d of %s: %v", i, target, err)
		}
	}
}

// tmpfsDir is a directory inside a fresh tmpfs (not its root, which Measure does not walk).
func tmpfsDir(t *testing.T) string {
	t.Helper()
	requireRoot(t)
	root := t.TempDir()
	// Links and empty files take no pages; the directory's entries are kernel memory,
	// freed at the unmount.
	mountTmpfs(t, root, "16m")
	dir := filepath.Join(root, "dir")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestMeasureMillionLinksInBoundedMemory: a directory of a million hard links to one file
// is walked with the heap growing by less than walkHeapBound (reading the whole directory
// at once took some 130 MiB), and the file is counted once.
func TestMeasureMillionLinksInBoundedMemory(t *testing.T) {
	dir := tmpfsDir(t)
	writeFile(t, filepath.Join(dir, "f"), 10)
	empty, _ := measure(t, t.TempDir())
	var fst unix.Stat_t
	if err := unix.Lstat(filepath.Join(dir, "f"), &fst); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	linkAll(t, dir, "f", "l", 1_000_000)
	t.Logf("1,000,000 links made in %s", time.Since(start).Round(time.Millisecond))

	var got, inodes int64
	start = time.Now()
	grew := peakHeapGrowth(func() { got, inodes = measure(t, dir) })
	t.Logf("walked in %s, heap grew by %.1f MiB at most", time.Since(start).Round(time.Millisecond), float64(grew)/mib)
	if grew > walkHeapBound {
		t.Errorf("the walk of a million links grew the heap by %.1f MiB, want at most %d MiB", float64(grew)/mib, walkHeapBound/mib)
	}
	if inodes != 2 {
		t.Errorf("%d inodes, want 2 (dir and the one file)", inodes)
	}
	var dst unix.Stat_t
	if err := unix.Lstat(dir, &dst); err != nil {
		t.Fatal(err)
	}
	if want := (dst.Blocks + fst.Blocks) * 512; got != want {
		t.Errorf("%d bytes, want %d (the directory's and the file's blocks; empty dir elsewhere %d)", got, want, empty)
	}
}

// TestMeasureManyHardLinkedFilesInBoundedMemory: more hard-linked files than the walk
// remembers, every file met before any of its second links (the set fills): the heap stays
// under walkHeapBound, and the files past the set are counted at each link, too many, never
// too few.
func TestMeasureManyHardLinkedFilesInBoundedMemory(t *testing.T) {
	dir := tmpfsDir(t)
	const files = maxLinked + 50_000
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	start := time.Now()
	for i := range files {
		name := "f" + strconv.Itoa(i)
		nfd, err := unix.Openat(fd, name, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		unix.Close(nfd)
	}
	// In a second directory: the first is read whole before any second link is met.
	other := filepath.Join(dir, "z-links")
	if err := os.Mkdir(other, 0o755); err != nil {
		t.Fatal(err)
	}
	ofd, err := unix.Open(other, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(ofd)
	for i := range files {
		if err := unix.Linkat(fd, "f"+strconv.Itoa(i), ofd, "l"+strconv.Itoa(i), 0); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d files with two links each made in %s", files, time.Since(start).Round(time.Millisecond))

	var inodes int64
	grew := peakHeapGrowth(func() { _, inodes = measure(t, dir) })
	t.Logf("heap grew by %.1f MiB at most", float64(grew)/mib)
	if grew > walkHeapBound {
		t.Errorf("the walk of %d hard-linked files grew the heap by %.1f MiB, want at most %d MiB", files, float64(grew)/mib, walkHeapBound/mib)
	}
	// dir, z-links and the files; those the set had no room for once more.
	exact := int64(2 + files)
	if inodes < exact || inodes > exact+files-maxLinked {
		t.Errorf("%d inodes, want from %d (exact) to %d (the %d files past the set counted twice)", inodes, exact, exact+files-maxLinked, files-maxLinked)
	}
}

// TestWalkLinkSetLimit: a hard-linked inode is counted once while the set has room; with
// the set full, a further one is counted at each link met (too many, never too few); an
// inode leaves the set once all its links are met, which makes room again.
func TestWalkLinkSetLimit(t *testing.T) {
	file := func(ino, nlink uint64) *unix.Stat_t {
		return &unix.Stat_t{Ino: ino, Nlink: nlink, Blocks: 8, Mode: unix.S_IFREG}
	}
	w := &walker{linkLimit: 2}
	for _, st := range []*unix.Stat_t{
		file(1, 2), file(2, 3), // remembered
		file(3, 2),             // the set is full: counted, not remembered
		file(1, 2),             // 1's last link: not counted, leaves the set
		file(3, 2),             // not in the set: counted again, and remembered (room again)
		file(2, 3), file(2, 3), // 2 counted once for its three links
		file(4, 1), // one link: counted, never remembered
	} {
		w.countOnce(st)
	}
	if w.inodes != 5 || w.bytes != 5*8*512 {
		t.Errorf("%d inodes, %d bytes; want 5 (1, 2, 4 once, 3 twice), %d", w.inodes, w.bytes, 5*8*512)
	}
	if w.overLinked != 1 {
		t.Errorf("%d inodes counted past the set, want 1", w.overLinked)
	}
	if _, ok := w.linked[3]; !ok || len(w.linked) != 1 {
		t.Errorf("left in the set: %v, want inode 3 only (its link already met is not known)", w.linked)
	}
}

// mkdirChain makes depth nested directories d/d/... below dir.
func mkdirChain(t *testing.T, dir string, depth int) {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range depth {
		if err := unix.Mkdirat(fd, "d", 0o755); err != nil {
			t.Fatalf("mkdir at depth %d: %v", i+1, err)
		}
		next, err := unix.Openat(fd, "d", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			t.Fatal(err)
		}
		fd = next
	}
	unix.Close(fd)
}

// TestMeasureDeepTree: a tree deeper than the walk goes is measured down to maxDepth
// levels, the directory below counted but not entered, and the measurement says so with
// ErrTooDeep and gives that lower bound; the heap stays under walkHeapBound.
func TestMeasureDeepTree(t *testing.T) {
	dir := t.TempDir()
	mkdirChain(t, dir, maxDepth+10)
	var got, inodes int64
	var err error
	grew := peakHeapGrowth(func() { got, inodes, err = Measure(dir) })
	if !errors.Is(err, ErrTooDeep) {
		t.Fatalf("Measure of a tree %d levels deep: %v, want ErrTooDeep", maxDepth+10, err)
	}
	if !strings.Contains(err.Error(), dir) {
		t.Errorf("error %q does not name %s", err, dir)
	}
	// dir, then levels 1 to maxDepth walked, level maxDepth+1 counted and not entered.
	if want := int64(maxDepth + 2); inodes != want {
		t.Errorf("%d inodes, want %d", inodes, want)
	}
	if got <= 0 {
		t.Errorf("%d bytes, want the directories' blocks", got)
	}
	if grew > walkHeapBound {
		t.Errorf("the walk of %d levels grew the heap by %.1f MiB, want at most %d MiB", maxDepth, float64(grew)/mib, walkHeapBound/mib)
	}
	// DiskUsage walks the same way.
	if _, n, err := DiskUsage(dir); !errors.Is(err, ErrTooDeep) || n != int64(maxDepth+2) {
		t.Errorf("DiskUsage: %d inodes, %v; want %d and ErrTooDeep", n, err, maxDepth+2)
	}
	// Within the limit nothing is left out.
	shallow := t.TempDir()
	mkdirChain(t, shallow, maxDepth)
	if _, n, err := Measure(shallow); err != nil || n != int64(maxDepth+1) {
		t.Errorf("a tree %d levels deep: %d inodes, %v; want %d and no error", maxDepth, n, err, maxDepth+1)
	}
}

// TestDiskUsage: DiskUsage measures a file as well as a directory, follows a symbolic link
// given to it (and none below it).
func TestDiskUsage(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "f"), mib)
	b, n, err := DiskUsage(filepath.Join(dir, "f"))
	if err != nil || n != 1 || b < mib || b > 2*mib {
		t.Errorf("a 1 MiB file: %d bytes, %d inodes, %v; want about 1 MiB, 1", b, n, err)
	}
	if err := os.Symlink(dir, filepath.Join(dir, "loop")); err != nil {
		t.Fatal(err)
	}
	db, dn, err := DiskUsage(dir)
	if err != nil || dn != 3 || db < mib || db > 2*mib {
		t.Errorf("the directory: %d bytes, %d inodes, %v; want about 1 MiB and 3 (dir, f, loop not followed)", db, dn, err)
	}
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	if lb, ln, err := DiskUsage(link); err != nil || lb != db || ln != dn {
		t.Errorf("through a link to it: %d bytes, %d inodes, %v; want %d, %d", lb, ln, err, db, dn)
	}
	if _, _, err := Measure(link); err == nil {
		t.Error("Measure of a link to a directory = nil error, want it refused as before")
	}
	if _, _, err := DiskUsage(filepath.Join(dir, "missing")); err == nil {
		t.Error("DiskUsage of a missing path = nil error")
	}
}
