package observe

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// registration reads what the notifier wrote to a fixture's cgroup.event_control:
// "<eventfd> <watched file's fd> <usage threshold>".
func registration(t *testing.T, dir string) (efd int, usage int64) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.event_control"))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b))
	if len(f) != 3 {
		t.Fatalf("cgroup.event_control holds %q, want three numbers", b)
	}
	efd, err = strconv.Atoi(f[0])
	if err != nil {
		t.Fatal(err)
	}
	if usage, err = strconv.ParseInt(f[2], 10, 64); err != nil {
		t.Fatal(err)
	}
	return efd, usage
}

// signal plays the kernel: one event on the eventfd.
func signal(t *testing.T, efd int) {
	t.Helper()
	if _, err := unix.Write(efd, binary.NativeEndian.AppendUint64(nil, 1)); err != nil {
		t.Fatalf("write eventfd %d: %v", efd, err)
	}
}

func wantNotice(t *testing.T, n Notifier, within time.Duration) {
	t.Helper()
	select {
	case _, ok := <-n.C():
		if !ok {
			t.Fatal("notifier channel closed")
		}
	case <-time.After(within):
		t.Fatalf("no notice within %v", within)
	}
}

func wantQuiet(t *testing.T, n Notifier, during time.Duration) {
	t.Helper()
	select {
	case <-n.C():
		t.Fatal("a notice without a crossing")
	case <-time.After(during):
	}
}

func wantClosed(t *testing.T, n Notifier) {
	t.Helper()
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case _, ok := <-n.C():
		if ok {
			t.Fatal("a notice after Close")
		}
	case <-time.After(time.Second):
		t.Fatal("channel not closed by Close")
	}
	if err := n.Set(1); err == nil {
		t.Error("Set after Close succeeded")
	}
}

func TestEventNotifierCgroupV1(t *testing.T) {
	mnt, proc, root := v1Fixture(t), procFixture(t), t.TempDir()
	s, err := New(Options{CgroupMount: mnt, CgroupRoot: "/unitlet", CgroupDriver: "cgroupfs", RootDir: root, ProcRoot: proc, Runtime: &fakeRuntime{}})
	if err != nil {
		t.Fatal(err)
	}
	n, err := s.MemoryNotifier()
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Set(gib); err != nil {
		t.Fatal(err)
	}
	// MemTotal 8 GiB less the threshold, plus the 2 GiB of inactive file pages.
	efd, usage := registration(t, filepath.Join(mnt, "memory"))
	if usage != 9*gib {
		t.Errorf("usage threshold %d, want %d", usage, 9*gib)
	}
	signal(t, efd)
	wantNotice(t, n, time.Second)
	// Several events before one is received make one notice.
	signal(t, efd)
	time.Sleep(20 * time.Millisecond)
	signal(t, efd)
	time.Sleep(50 * time.Millisecond)
	wantNotice(t, n, time.Second)
	wantQuiet(t, n, 50*time.Millisecond)

	// A new threshold is a new registration; its eventfd is the one heard.
	write(t, mnt, "memory/cgroup.event_control", "")
	if err := n.Set(3 * gib); err != nil {
		t.Fatal(err)
	}
	efd2, usage := registration(t, filepath.Join(mnt, "memory"))
	if usage != 7*gib {
		t.Errorf("usage threshold %d, want %d", usage, 7*gib)
	}
	signal(t, efd2)
	wantNotice(t, n, time.Second)
	wantClosed(t, n)

	// The allocatable notifier is on kubepods: its 7 GiB limit less the threshold, plus
	// its 1 GiB inactive.
	a, err := s.AllocatableMemoryNotifier()
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Set(gib); err != nil {
		t.Fatal(err)
	}
	if _, usage := registration(t, filepath.Join(mnt, "memory/unitlet/kubepods")); usage != 7*gib {
		t.Errorf("allocatable usage threshold %d, want %d", usage, 7*gib)
	}
	wantClosed(t, a)

	// A threshold above the capacity cannot be crossed from above; the usage threshold
	// is floored at zero.
	b, err := s.MemoryNotifier()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	write(t, mnt, "memory/cgroup.event_control", "")
	if err := b.Set(100 * gib); err != nil {
		t.Fatal(err)
	}
	if _, usage := registration(t, filepath.Join(mnt, "memory")); usage != 0 {
		t.Errorf("usage threshold %d, want 0", usage)
	}

	// Without a cgroup.event_control to write, the signal is sampled.
	if err := os.Remove(filepath.Join(mnt, "memory/unitlet/kubepods/cgroup.event_control")); err != nil {
		t.Fatal(err)
	}
	if a, _ = s.AllocatableMemoryNotifier(); a == nil {
		t.Fatal("no notifier")
	}
	if _, ok := a.(*sampler); !ok {
		t.Errorf("allocatable notifier without cgroup.event_control is a %T, want a sampler", a)
	}
	wantClosed(t, a)
}

func TestSamplerCgroupV2(t *testing.T) {
	mnt, proc, root := v2Fixture(t), procFixture(t), t.TempDir()
	s, err := New(Options{CgroupMount: mnt, CgroupDriver: "systemd", RootDir: root, ProcRoot: proc, Runtime: &fakeRuntime{}})
	if err != nil {
		t.Fatal(err)
	}
	s.sampleGap = 5 * time.Millisecond
	n, err := s.MemoryNotifier()
	if err != nil {
		t.Fatal(err)
	}
	// 4 GiB available; the threshold 3 GiB.
	if err := n.Set(3 * gib); err != nil {
		t.Fatal(err)
	}
	wantQuiet(t, n, 50*time.Millisecond)

	stat := func(anon int64) string {
		return fmt.Sprintf("anon %d\nfile %d\ninactive_file %d\n", anon, 2*gib, gib)
	}
	// Anon up 1.5 GiB: 2.5 GiB available, below.
	write(t, mnt, "memory.stat", stat(3*gib+3*gib/2))
	wantNotice(t, n, 2*time.Second)
	wantQuiet(t, n, 50*time.Millisecond)
	// Back above.
	write(t, mnt, "memory.stat", stat(3*gib))
	wantNotice(t, n, 2*time.Second)

	// A new threshold is judged from where the signal stands when it is set: no notice
	// for being below it already.
	if err := n.Set(5 * gib); err != nil {
		t.Fatal(err)
	}
	wantQuiet(t, n, 50*time.Millisecond)
	write(t, mnt, "memory.stat", stat(2*gib))
	wantNotice(t, n, 2*time.Second)
	wantClosed(t, n)

	// A sampler closed before it was set.
	u, err := s.AllocatableMemoryNotifier()
	if err != nil {
		t.Fatal(err)
	}
	wantClosed(t, u)
}

// TestMemoryNotifierOnThisHost arms memory.available's notifier on this machine, first far
// below where it stands (no notice), then 64 MiB below, and uses 512 MiB more: the notice
// must come, from the kernel's threshold event on cgroup v1, from sampling on v2.
func TestMemoryNotifierOnThisHost(t *testing.T) {
	s := hostSource(t)
	n, err := s.MemoryNotifier()
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if _, ok := n.(*eventNotifier); ok == s.CgroupV2() {
		t.Fatalf("cgroup v2 %v, notifier %T", s.CgroupV2(), n)
	}
	available := func() int64 {
		v, err := s.rootMemory()
		if err != nil {
			t.Fatal(err)
		}
		return v.Available
	}
	// Far from where it stands: nothing, at registration or after.
	if err := n.Set(available() / 2); err != nil {
		t.Fatal(err)
	}
	wantQuiet(t, n, 1500*time.Millisecond)
	if err := n.Set(available() - 64*mib); err != nil {
		t.Fatal(err)
	}
	// Fresh pages from the kernel, which the Go heap might not ask for.
	ballast, err := unix.Mmap(-1, 0, int(512*mib), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(ballast)
	for i := 0; i < len(ballast); i += os.Getpagesize() {
		ballast[i] = 1
	}
	wantNotice(t, n, 10*time.Second)
}
