package observe

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// v1Fixture is a cgroup v1 mount: the memory hierarchy (root usage 6 GiB of which 2 GiB
// inactive file, kubepods under /unitlet limited to 7 GiB with 3 GiB used, 1 GiB
// inactive) and the pids hierarchy.
func v1Fixture(t *testing.T) string {
	t.Helper()
	mnt := t.TempDir()
	write(t, mnt, "memory/memory.usage_in_bytes", fmt.Sprint(6*gib)+"\n")
	write(t, mnt, "memory/memory.stat", fmt.Sprintf("cache 1\nrss 2\ninactive_file 5\ntotal_cache %d\ntotal_rss %d\ntotal_inactive_file %d\n", 4*gib, 2*gib, 2*gib))
	write(t, mnt, "memory/cgroup.event_control", "")
	write(t, mnt, "memory/unitlet/kubepods/memory.usage_in_bytes", fmt.Sprint(3*gib)+"\n")
	write(t, mnt, "memory/unitlet/kubepods/memory.stat", fmt.Sprintf("total_inactive_file %d\n", gib))
	write(t, mnt, "memory/unitlet/kubepods/memory.limit_in_bytes", fmt.Sprint(7*gib)+"\n")
	write(t, mnt, "memory/unitlet/kubepods/cgroup.event_control", "")
	write(t, mnt, "pids/cgroup.procs", "1\n")
	write(t, mnt, "cpu,cpuacct/cgroup.procs", "1\n")
	return mnt
}

// v2Fixture is a cgroup v2 mount's root: no memory.current, anon 3 GiB and file 2 GiB of
// which 1 GiB inactive; kubepods.slice without a memory limit, 2 GiB used, 512 MiB
// inactive.
func v2Fixture(t *testing.T) string {
	t.Helper()
	mnt := t.TempDir()
	write(t, mnt, "cgroup.controllers", "cpuset cpu io memory hugetlb pids rdma misc\n")
	write(t, mnt, "memory.stat", fmt.Sprintf("anon %d\nfile %d\nkernel 12345\nactive_file %d\ninactive_file %d\n", 3*gib, 2*gib, gib, gib))
	write(t, mnt, "kubepods.slice/memory.current", fmt.Sprint(2*gib)+"\n")
	write(t, mnt, "kubepods.slice/memory.max", "max\n")
	write(t, mnt, "kubepods.slice/memory.stat", fmt.Sprintf("anon 1\nfile 2\ninactive_file %d\n", gib/2))
	return mnt
}

func TestNodeCgroupV1(t *testing.T) {
	mnt, proc, root := v1Fixture(t), procFixture(t), t.TempDir()
	s, err := New(Options{CgroupMount: mnt, CgroupRoot: "/unitlet", CgroupDriver: "cgroupfs", RootDir: root, ProcRoot: proc,
		Runtime: &fakeRuntime{imageFs: imageFsAt(root, "")}})
	if err != nil {
		t.Fatal(err)
	}
	if s.CgroupV2() {
		t.Fatal("v1 fixture detected as v2")
	}
	n, err := s.Node(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// MemTotal 8 GiB, working set 6 - 2 GiB.
	wantValue(t, n, SignalMemoryAvailable, 4*gib, 8*gib)
	// kubepods' limit 7 GiB, working set 3 - 1 GiB.
	wantValue(t, n, SignalAllocatableMemoryAvailable, 5*gib, 7*gib)
	// The lower limit is threads-max; 1234 tasks.
	wantValue(t, n, SignalPIDAvailable, 60000-1234, 60000)
	wantStatfs(t, n, root, SignalNodeFsAvailable, SignalNodeFsInodesFree)
	wantStatfs(t, n, root, SignalImageFsAvailable, SignalImageFsInodesFree)
	wantStatfs(t, n, root, SignalContainerFsAvailable, SignalContainerFsInodesFree)
	if n.SplitImageFs || n.SplitContainerFs {
		t.Errorf("one file system reported split: image %v, container %v", n.SplitImageFs, n.SplitContainerFs)
	}
	if n.Time.IsZero() {
		t.Error("no time")
	}
}

func TestNodeCgroupV2(t *testing.T) {
	mnt, proc, root := v2Fixture(t), procFixture(t), t.TempDir()
	s, err := New(Options{CgroupMount: mnt, CgroupRoot: "/", CgroupDriver: "systemd", RootDir: root, ProcRoot: proc,
		Runtime: &fakeRuntime{imageFs: imageFsAt(root, root)}, AllocatableMemory: func() int64 { return 6 * gib }})
	if err != nil {
		t.Fatal(err)
	}
	if !s.CgroupV2() {
		t.Fatal("v2 fixture detected as v1")
	}
	n, err := s.Node(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// The root's usage is anon + file = 5 GiB, working set 4 GiB.
	wantValue(t, n, SignalMemoryAvailable, 4*gib, 8*gib)
	// kubepods.slice has no limit: the allocatable memory given, less 1.5 GiB.
	wantValue(t, n, SignalAllocatableMemoryAvailable, 6*gib-3*gib/2, 6*gib)

	// A v2 root that has memory.current (a cgroup namespace's) uses it.
	write(t, mnt, "memory.current", fmt.Sprint(7*gib)+"\n")
	if n, err = s.Node(context.Background()); err != nil {
		t.Fatal(err)
	}
	wantValue(t, n, SignalMemoryAvailable, 2*gib, 8*gib)

	// A limit on kubepods is the capacity, as the kubelet's pods container.
	write(t, mnt, "kubepods.slice/memory.max", fmt.Sprint(5*gib)+"\n")
	if n, err = s.Node(context.Background()); err != nil {
		t.Fatal(err)
	}
	wantValue(t, n, SignalAllocatableMemoryAvailable, 5*gib-3*gib/2, 5*gib)
}

func TestAllocatableMemoryUnknown(t *testing.T) {
	mnt, proc, root := v2Fixture(t), procFixture(t), t.TempDir()
	o := Options{CgroupMount: mnt, CgroupDriver: "systemd", RootDir: root, ProcRoot: proc, Runtime: &fakeRuntime{imageFs: imageFsAt(root, "")}}

	// No limit on kubepods and no allocatable memory: left out.
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	n, err := s.Node(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := n.Signals[SignalAllocatableMemoryAvailable]; ok {
		t.Errorf("allocatableMemory.available = %+v, want it left out", v)
	}

	// Allocatable memory known but no kubepods cgroup: an error for that signal only.
	o.CgroupRoot = "unitlet.slice"
	o.AllocatableMemory = func() int64 { return gib }
	if s, err = New(o); err != nil {
		t.Fatal(err)
	}
	if n, err = s.Node(context.Background()); err != nil {
		t.Fatal(err)
	}
	if v := n.Signals[SignalAllocatableMemoryAvailable]; v.Err == nil || !strings.Contains(v.Err.Error(), "unitlet.slice/unitlet-kubepods.slice") {
		t.Errorf("allocatableMemory.available without its cgroup = %+v, want an error naming it", v)
	}
	if v := n.Signals[SignalMemoryAvailable]; v.Err != nil {
		t.Errorf("memory.available: %v", v.Err)
	}
}

func TestNodePartialFailure(t *testing.T) {
	mnt, proc, root := v1Fixture(t), procFixture(t), t.TempDir()
	rt := &fakeRuntime{imageFsErr: errors.New("runtime down")}
	s, err := New(Options{CgroupMount: mnt, CgroupDriver: "cgroupfs", RootDir: root, ProcRoot: proc, Runtime: rt})
	if err != nil {
		t.Fatal(err)
	}
	n, err := s.Node(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{SignalImageFsAvailable, SignalImageFsInodesFree, SignalContainerFsAvailable, SignalContainerFsInodesFree} {
		if v := n.Signals[name]; v.Err == nil || !strings.Contains(v.Err.Error(), "runtime down") {
			t.Errorf("%s = %+v, want the runtime's error", name, v)
		}
	}
	if v := n.Signals[SignalNodeFsAvailable]; v.Err != nil || v.Capacity == 0 {
		t.Errorf("nodefs.available = %+v, want it measured", v)
	}

	// A runtime naming no image file system.
	rt.imageFsErr, rt.imageFs = nil, &runtimeapi.ImageFsInfoResponse{}
	if n, err = s.Node(context.Background()); err != nil {
		t.Fatal(err)
	}
	if v := n.Signals[SignalImageFsAvailable]; v.Err == nil {
		t.Errorf("imagefs.available with no image file system = %+v, want an error", v)
	}

	// Nothing at all: the error.
	s.procRoot = t.TempDir()
	s.o.RootDir = "/nonexistent/root"
	rt.imageFsErr = errors.New("runtime down")
	n, err = s.Node(context.Background())
	if err == nil {
		t.Fatalf("Node with nothing measurable = %+v, want an error", n)
	}
	if len(n.Signals) == 0 {
		t.Error("the failed signals are not reported")
	}
}

func TestSplitFileSystems(t *testing.T) {
	mnt, proc, root := v1Fixture(t), procFixture(t), t.TempDir()
	shm := tmpfsDir(t)
	rt := &fakeRuntime{}
	s, err := New(Options{CgroupMount: mnt, CgroupDriver: "cgroupfs", RootDir: root, ProcRoot: proc, Runtime: rt})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name                    string
		image, container        string
		splitImage, splitContnr bool
	}{
		{"images on nodefs", root, "", false, false},
		{"images on nodefs, containers listed there", root, t.TempDir(), false, false},
		{"images elsewhere", shm, shm, true, false},
		{"containers elsewhere", root, shm, true, true},
		{"images and containers elsewhere apart", shm, root, true, true},
	} {
		rt.imageFs = imageFsAt(tc.image, tc.container)
		n, err := s.Node(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if n.SplitImageFs != tc.splitImage || n.SplitContainerFs != tc.splitContnr {
			t.Errorf("%s: split image %v, container %v; want %v, %v", tc.name, n.SplitImageFs, n.SplitContainerFs, tc.splitImage, tc.splitContnr)
		}
		wantStatfs(t, n, tc.image, SignalImageFsAvailable, SignalImageFsInodesFree)
		containerFs := tc.image
		if tc.splitContnr {
			containerFs = tc.container
		}
		wantStatfs(t, n, containerFs, SignalContainerFsAvailable, SignalContainerFsInodesFree)
	}
}

func TestPIDSignal(t *testing.T) {
	mnt, proc, root := v1Fixture(t), procFixture(t), t.TempDir()
	s, err := New(Options{CgroupMount: mnt, CgroupDriver: "cgroupfs", RootDir: root, ProcRoot: proc, Runtime: &fakeRuntime{imageFs: imageFsAt(root, "")}})
	if err != nil {
		t.Fatal(err)
	}
	// pid_max alone is enough.
	write(t, proc, "sys/kernel/threads-max", "garbage\n")
	n, _ := s.Node(context.Background())
	wantValue(t, n, SignalPIDAvailable, 4194304-1234, 4194304)

	// A loadavg that cannot be read, on a /proc that is not the real one: an error.
	write(t, proc, "loadavg", "0.1 0.2\n")
	n, _ = s.Node(context.Background())
	if v := n.Signals[SignalPIDAvailable]; v.Err == nil {
		t.Errorf("pid.available with a bad loadavg = %+v, want an error", v)
	}
}

func TestDetectHierarchy(t *testing.T) {
	if _, err := detectHierarchy(t.TempDir()); err == nil {
		t.Error("an empty directory detected as cgroups")
	}
	// A hybrid host: v1 controllers and a "unified" v2 tree beside them, is v1.
	mnt := v1Fixture(t)
	write(t, mnt, "unified/cgroup.controllers", "")
	h, err := detectHierarchy(mnt)
	if err != nil {
		t.Fatal(err)
	}
	if h.unified || !strings.HasSuffix(h.memory, "/memory") || !strings.HasSuffix(h.pids, "/pids") {
		t.Errorf("hybrid detected as %+v", h)
	}
}

// wantValue checks one signal's numbers.
func wantValue(t *testing.T, n Node, name string, available, capacity int64) {
	t.Helper()
	v, ok := n.Signals[name]
	switch {
	case !ok:
		t.Errorf("%s missing", name)
	case v.Err != nil:
		t.Errorf("%s: %v", name, v.Err)
	case v.Available != available || v.Capacity != capacity:
		t.Errorf("%s = %d of %d, want %d of %d", name, v.Available, v.Capacity, available, capacity)
	}
}

// wantStatfs checks a file system's signals against statfs of path: capacities exactly,
// free space within 64 MiB and free inodes within 1000, as other writers come and go.
func wantStatfs(t *testing.T, n Node, path, bytesSignal, inodesSignal string) {
	t.Helper()
	var sfs unix.Statfs_t
	if err := unix.Statfs(path, &sfs); err != nil {
		t.Fatal(err)
	}
	b, i := n.Signals[bytesSignal], n.Signals[inodesSignal]
	if b.Err != nil || i.Err != nil {
		t.Errorf("%s: %v; %s: %v", bytesSignal, b.Err, inodesSignal, i.Err)
		return
	}
	if want := int64(sfs.Frsize) * int64(sfs.Blocks); b.Capacity != want {
		t.Errorf("%s capacity %d, want %d", bytesSignal, b.Capacity, want)
	}
	if want := int64(sfs.Frsize) * int64(sfs.Bavail); abs(b.Available-want) > 64<<20 {
		t.Errorf("%s available %d, want about %d", bytesSignal, b.Available, want)
	}
	if want := int64(sfs.Files); i.Capacity != want {
		t.Errorf("%s capacity %d, want %d", inodesSignal, i.Capacity, want)
	}
	if want := int64(sfs.Ffree); abs(i.Available-want) > 1000 {
		t.Errorf("%s available %d, want about %d", inodesSignal, i.Available, want)
	}
}

func abs(n int64) int64 {
	if n < 0 {
		return -n
	}
	return n
}
