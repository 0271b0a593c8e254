package observe

import (
	"context"
	"os"
	"testing"

	"github.com/unitlet/unitlet/shared/nodeinfo"
)

// hostSource is a Source on this machine's /sys/fs/cgroup and /proc, with a runtime whose
// image file system is a temporary directory.
func hostSource(t *testing.T) *Source {
	t.Helper()
	root := t.TempDir()
	s, err := New(Options{CgroupMount: "/sys/fs/cgroup", CgroupRoot: "/", CgroupDriver: "cgroupfs", RootDir: root, ProcRoot: "/proc",
		Runtime: &fakeRuntime{imageFs: imageFsAt(root, "")}})
	if err != nil {
		t.Fatalf("this host's cgroups: %v", err)
	}
	return s
}

// TestNodeOnThisHost measures the real machine: memory.available has MemTotal as capacity
// and something in use, pid.available leaves room and counts some tasks.
func TestNodeOnThisHost(t *testing.T) {
	s := hostSource(t)
	n, err := s.Node(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	m, err := nodeinfo.ReadMachine(os.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	mem := n.Signals[SignalMemoryAvailable]
	if mem.Err != nil {
		t.Fatalf("memory.available: %v", mem.Err)
	}
	if mem.Capacity != m.MemoryBytes {
		t.Errorf("memory.available capacity %d, want MemTotal %d", mem.Capacity, m.MemoryBytes)
	}
	if mem.Available <= 0 || mem.Available >= mem.Capacity {
		t.Errorf("memory.available %d of %d: want 0 < available < capacity", mem.Available, mem.Capacity)
	}
	pid := n.Signals[SignalPIDAvailable]
	if pid.Err != nil {
		t.Fatalf("pid.available: %v", pid.Err)
	}
	if pid.Capacity != m.MaxPIDs {
		t.Errorf("pid.available capacity %d, want the machine's %d", pid.Capacity, m.MaxPIDs)
	}
	if pid.Available <= 0 || pid.Available >= pid.Capacity {
		t.Errorf("pid.available %d of %d: want 0 < available < capacity", pid.Available, pid.Capacity)
	}
	for _, name := range []string{SignalNodeFsAvailable, SignalNodeFsInodesFree, SignalImageFsAvailable, SignalContainerFsInodesFree} {
		if v := n.Signals[name]; v.Err != nil || v.Available <= 0 || v.Available > v.Capacity {
			t.Errorf("%s = %+v", name, v)
		}
	}
	t.Logf("cgroup v2 %v: memory.available %d MiB of %d MiB, pid.available %d of %d", s.CgroupV2(),
		mem.Available>>20, mem.Capacity>>20, pid.Available, pid.Capacity)
}
