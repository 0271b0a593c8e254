package stats

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	clocktesting "k8s.io/utils/clock/testing"
)

const (
	gib  = uint64(1) << 30
	boot = 1700000000
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// fakeRuntime answers from its fields; sandboxStats nil means ListPodSandboxStats is
// Unimplemented, as containerd 1.6 answers.
type fakeRuntime struct {
	sandboxes      []*runtimeapi.PodSandbox
	containers     []*runtimeapi.Container
	containerStats []*runtimeapi.ContainerStats
	sandboxStats   []*runtimeapi.PodSandboxStats
	sandboxErr     error
	containerErr   error
	imageFs        *runtimeapi.ImageFsInfoResponse
	imageFsErr     error
}

func (f *fakeRuntime) ListPodSandboxStats(context.Context, *runtimeapi.ListPodSandboxStatsRequest, ...grpc.CallOption) (*runtimeapi.ListPodSandboxStatsResponse, error) {
	if f.sandboxErr != nil {
		return nil, f.sandboxErr
	}
	if f.sandboxStats == nil {
		return nil, status.Error(codes.Unimplemented, "not implemented")
	}
	return &runtimeapi.ListPodSandboxStatsResponse{Stats: f.sandboxStats}, nil
}

func (f *fakeRuntime) ListContainerStats(context.Context, *runtimeapi.ListContainerStatsRequest, ...grpc.CallOption) (*runtimeapi.ListContainerStatsResponse, error) {
	if f.containerErr != nil {
		return nil, f.containerErr
	}
	return &runtimeapi.ListContainerStatsResponse{Stats: f.containerStats}, nil
}

func (f *fakeRuntime) ListPodSandbox(context.Context, *runtimeapi.ListPodSandboxRequest, ...grpc.CallOption) (*runtimeapi.ListPodSandboxResponse, error) {
	return &runtimeapi.ListPodSandboxResponse{Items: f.sandboxes}, nil
}

// ListContainers ignores the filter: the provider must drop containers that do not run.
func (f *fakeRuntime) ListContainers(context.Context, *runtimeapi.ListContainersRequest, ...grpc.CallOption) (*runtimeapi.ListContainersResponse, error) {
	return &runtimeapi.ListContainersResponse{Containers: f.containers}, nil
}

func (f *fakeRuntime) ImageFsInfo(context.Context, *runtimeapi.ImageFsInfoRequest, ...grpc.CallOption) (*runtimeapi.ImageFsInfoResponse, error) {
	return f.imageFs, f.imageFsErr
}

// host is a temporary /proc, cgroup root and node root directory.
type host struct {
	proc, cgroup, root string
}

func newHost(t *testing.T, v2 bool) host {
	t.Helper()
	dir := t.TempDir()
	h := host{proc: filepath.Join(dir, "proc"), cgroup: filepath.Join(dir, "cgroup"), root: filepath.Join(dir, "root")}
	h.write(t, h.proc, "stat", "cpu  1 2 3 4\nbtime 1700000000\nprocesses 42\n")
	h.write(t, h.proc, "meminfo", "MemTotal:       16777216 kB\nMemFree:         4194304 kB\nInactive(file):  1048576 kB\nAnonPages:        524288 kB\n")
	h.write(t, h.proc, "vmstat", "pgfault 111\npgmajfault 22\n")
	h.write(t, h.proc, "loadavg", "0.10 0.20 0.30 2/345 999\n")
	h.write(t, h.proc, "sys/kernel/pid_max", "4194304\n")
	h.write(t, h.proc, "sys/kernel/threads-max", "100000\n")
	h.write(t, h.proc, "net/dev", `Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:    1000      10    0    0    0     0          0         0     1000      10    0    0    0     0       0          0
  eth0:  500000    4000    3    0    0     0          0         0   200000    3000    1    0    0     0       0          0
veth12ab:   7000      70    0    0    0     0          0         0     8000      80    0    0    0     0       0          0
  ens4:     100       1    0    0    0     0          0         0      200       2    0    0    0     0       0          0
`)
	if v2 {
		h.write(t, h.cgroup, "cgroup.controllers", "cpu memory pids\n")
		h.write(t, h.cgroup, "cpu.stat", "usage_usec 2000000\nuser_usec 1500000\nsystem_usec 500000\n")
		h.write(t, h.cgroup, "memory.stat", "anon 3221225472\nfile 1000\ninactive_file 2147483648\npgfault 7\npgmajfault 1\n")
	} else {
		h.write(t, h.cgroup, "cpuacct/cpuacct.usage", "2000000000\n")
		h.write(t, h.cgroup, "memory/memory.usage_in_bytes", "8589934592\n")
		h.write(t, h.cgroup, "memory/memory.stat", "cache 1\nrss 2\ntotal_rss 1073741824\ntotal_inactive_file 2147483648\ntotal_pgfault 500\ntotal_pgmajfault 5\n")
	}
	if err := os.MkdirAll(h.root, 0o755); err != nil {
		t.Fatal(err)
	}
	return h
}

func (h host) write(t *testing.T, dir, rel, content string) {
	t.Helper()
	p := filepath.Join(dir, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func newProvider(h host, rt *fakeRuntime, clk *clocktesting.FakeClock) *Provider {
	return New(Options{Runtime: rt, NodeName: "node-a", RootDir: h.root, CgroupRoot: h.cgroup, ProcRoot: h.proc, PodLogsDir: filepath.Join(h.root, "logs"), Clock: clk})
}

func imageFs(mountpoint string) *runtimeapi.ImageFsInfoResponse {
	return &runtimeapi.ImageFsInfoResponse{ImageFilesystems: []*runtimeapi.FilesystemUsage{{
		Timestamp:  t0.UnixNano(),
		FsId:       &runtimeapi.FilesystemIdentifier{Mountpoint: mountpoint},
		UsedBytes:  &runtimeapi.UInt64Value{Value: 12345},
		InodesUsed: &runtimeapi.UInt64Value{Value: 67},
	}}}
}

func u64(t *testing.T, name string, got *uint64, want uint64) {
	t.Helper()
	if got == nil {
		t.Errorf("%s = nil, want %d", name, want)
		return
	}
	if *got != want {
		t.Errorf("%s = %d, want %d", name, *got, want)
	}
}

func TestSummaryNodeCgroupV1(t *testing.T) {
	h := newHost(t, false)
	clk := clocktesting.NewFakeClock(t0)
	p := newProvider(h, &fakeRuntime{imageFs: imageFs(h.root)}, clk)

	s, err := p.Summary(context.Background(), false)
	if err != nil {
		t.Fatalf("Summary: %v", err)
	}
	n := s.Node
	if n.NodeName != "node-a" {
		t.Errorf("nodeName = %q", n.NodeName)
	}
	if !n.StartTime.Time.Equal(time.Unix(boot, 0)) {
		t.Errorf("startTime = %v, want the boot time", n.StartTime)
	}
	u64(t, "cpu.usageCoreNanoSeconds", n.CPU.UsageCoreNanoSeconds, 2000000000)
	if n.CPU.UsageNanoCores != nil {
		t.Errorf("usageNanoCores = %d on the first sample, want none", *n.CPU.UsageNanoCores)
	}
	u64(t, "memory.usageBytes", n.Memory.UsageBytes, 8*gib)
	u64(t, "memory.workingSetBytes", n.Memory.WorkingSetBytes, 6*gib)
	u64(t, "memory.availableBytes", n.Memory.AvailableBytes, 10*gib)
	u64(t, "memory.rssBytes", n.Memory.RSSBytes, gib)
	u64(t, "memory.pageFaults", n.Memory.PageFaults, 500)
	u64(t, "memory.majorPageFaults", n.Memory.MajorPageFaults, 5)
	if n.Rlimit == nil || n.Rlimit.MaxPID == nil || *n.Rlimit.MaxPID != 100000 {
		t.Errorf("rlimit.maxpid = %v, want 100000 (the lower of pid_max and threads-max)", n.Rlimit)
	}
	if n.Rlimit == nil || n.Rlimit.NumOfRunningProcesses == nil || *n.Rlimit.NumOfRunningProcesses != 345 {
		t.Errorf("rlimit.curproc = %v, want 345", n.Rlimit)
	}
	checkFs(t, "fs", n.Fs, true)
	if n.Runtime == nil || n.Runtime.ImageFs == nil {
		t.Fatalf("runtime.imageFs missing: %+v", n.Runtime)
	}
	u64(t, "imageFs.usedBytes", n.Runtime.ImageFs.UsedBytes, 12345)
	u64(t, "imageFs.inodesUsed", n.Runtime.ImageFs.InodesUsed, 67)
	if n.Runtime.ImageFs.CapacityBytes == nil || *n.Runtime.ImageFs.CapacityBytes != *n.Fs.CapacityBytes {
		t.Errorf("imageFs.capacityBytes = %v, want the statfs of its mountpoint %d", n.Runtime.ImageFs.CapacityBytes, *n.Fs.CapacityBytes)
	}
	if n.Runtime.ContainerFs != n.Runtime.ImageFs {
		t.Errorf("containerFs = %+v, want the image filesystem", n.Runtime.ContainerFs)
	}

	// Ten seconds and five core-seconds later: half a core.
	clk.Step(10 * time.Second)
	h.write(t, h.cgroup, "cpuacct/cpuacct.usage", "7000000000\n")
	s, err = p.Summary(context.Background(), false)
	if err != nil {
		t.Fatalf("Summary: %v", err)
	}
	u64(t, "cpu.usageNanoCores", s.Node.CPU.UsageNanoCores, 500000000)
	if !s.Node.CPU.Time.Time.Equal(t0.Add(10 * time.Second)) {
		t.Errorf("cpu.time = %v", s.Node.CPU.Time)
	}

	// A scrape a moment later repeats the last rate rather than one over a few microseconds.
	clk.Step(time.Millisecond)
	h.write(t, h.cgroup, "cpuacct/cpuacct.usage", "7002000000\n")
	s, err = p.Summary(context.Background(), true)
	if err != nil {
		t.Fatalf("Summary: %v", err)
	}
	u64(t, "cpu.usageNanoCores", s.Node.CPU.UsageNanoCores, 500000000)
}

func checkFs(t *testing.T, name string, fs *statsv1alpha1.FsStats, inodes bool) {
	t.Helper()
	if fs == nil || fs.CapacityBytes == nil || fs.AvailableBytes == nil || fs.UsedBytes == nil {
		t.Fatalf("%s = %+v, want capacity, available and used", name, fs)
	}
	if *fs.CapacityBytes == 0 || *fs.AvailableBytes > *fs.CapacityBytes || *fs.UsedBytes > *fs.CapacityBytes {
		t.Errorf("%s: capacity %d, available %d, used %d do not add up", name, *fs.CapacityBytes, *fs.AvailableBytes, *fs.UsedBytes)
	}
	if inodes && (fs.Inodes == nil || fs.InodesFree == nil || fs.InodesUsed == nil || *fs.InodesUsed+*fs.InodesFree != *fs.Inodes) {
		t.Errorf("%s: inodes %v, free %v, used %v do not add up", name, fs.Inodes, fs.InodesFree, fs.InodesUsed)
	}
}

func TestSummaryNodeCgroupV2(t *testing.T) {
	h := newHost(t, true)
	clk := clocktesting.NewFakeClock(t0)
	p := newProvider(h, &fakeRuntime{imageFs: imageFs(h.root)}, clk)

	s, err := p.Summary(context.Background(), true)
	if err != nil {
		t.Fatalf("Summary: %v", err)
	}
	n := s.Node
	u64(t, "cpu.usageCoreNanoSeconds", n.CPU.UsageCoreNanoSeconds, 2000000000)
	// The v2 root has no memory.current: usage is MemTotal - MemFree = 12 GiB.
	u64(t, "memory.usageBytes", n.Memory.UsageBytes, 12*gib)
	u64(t, "memory.workingSetBytes", n.Memory.WorkingSetBytes, 10*gib)
	u64(t, "memory.availableBytes", n.Memory.AvailableBytes, 6*gib)
	u64(t, "memory.rssBytes", n.Memory.RSSBytes, 3*gib)
	u64(t, "memory.pageFaults", n.Memory.PageFaults, 7)
	u64(t, "memory.majorPageFaults", n.Memory.MajorPageFaults, 1)
	if n.Fs != nil || n.Runtime != nil || n.Rlimit != nil {
		t.Errorf("only cpu and memory asked, got fs %v runtime %v rlimit %v", n.Fs, n.Runtime, n.Rlimit)
	}

	clk.Step(2 * time.Second)
	h.write(t, h.cgroup, "cpu.stat", "usage_usec 5000000\n")
	s, err = p.Summary(context.Background(), true)
	if err != nil {
		t.Fatalf("Summary: %v", err)
	}
	u64(t, "cpu.usageNanoCores", s.Node.CPU.UsageNanoCores, 1500000000)
}

func TestSummaryNodeWithoutMemoryStat(t *testing.T) {
	h := newHost(t, true)
	if err := os.Remove(filepath.Join(h.cgroup, "memory.stat")); err != nil {
		t.Fatal(err)
	}
	p := newProvider(h, &fakeRuntime{imageFs: imageFs(h.root)}, clocktesting.NewFakeClock(t0))
	s, err := p.Summary(context.Background(), true)
	if err != nil {
		t.Fatalf("Summary: %v", err)
	}
	// From /proc/meminfo and /proc/vmstat: 12 GiB used less 1 GiB inactive file pages.
	u64(t, "memory.workingSetBytes", s.Node.Memory.WorkingSetBytes, 11*gib)
	u64(t, "memory.rssBytes", s.Node.Memory.RSSBytes, 512<<20)
	u64(t, "memory.pageFaults", s.Node.Memory.PageFaults, 111)
}

func TestSummaryImageFsMountpointElsewhere(t *testing.T) {
	h := newHost(t, false)
	p := newProvider(h, &fakeRuntime{imageFs: imageFs(filepath.Join(h.root, "not-mounted-here"))}, clocktesting.NewFakeClock(t0))
	s, err := p.Summary(context.Background(), false)
	if err != nil {
		t.Fatalf("Summary: %v", err)
	}
	fs := s.Node.Runtime.ImageFs
	u64(t, "imageFs.usedBytes", fs.UsedBytes, 12345)
	if fs.CapacityBytes != nil || fs.AvailableBytes != nil {
		t.Errorf("imageFs capacity %v available %v, want none for a mountpoint not visible here", fs.CapacityBytes, fs.AvailableBytes)
	}
}

func TestSummaryErrors(t *testing.T) {
	h := newHost(t, false)
	for _, tc := range []struct {
		name string
		rt   *fakeRuntime
		only bool
	}{
		{name: "image fs unavailable", rt: &fakeRuntime{imageFsErr: status.Error(codes.Unavailable, "down")}},
		{name: "no image fs", rt: &fakeRuntime{imageFs: &runtimeapi.ImageFsInfoResponse{}}},
		{name: "sandbox and container stats fail", rt: &fakeRuntime{imageFs: imageFs(h.root), sandboxErr: status.Error(codes.Internal, "boom"), containerErr: status.Error(codes.Internal, "boom")}, only: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newProvider(h, tc.rt, clocktesting.NewFakeClock(t0))
			if _, err := p.Summary(context.Background(), tc.only); err == nil {
				t.Fatal("Summary succeeded, want an error")
			}
		})
	}
	// A runtime that fails the sandbox list for one sandbox going away: the summary is
	// served, summed from the containers' stats.
	t.Run("sandbox stats fail alone", func(t *testing.T) {
		p := newProvider(h, &fakeRuntime{imageFs: imageFs(h.root), sandboxErr: status.Error(codes.Unknown, "failed to decode sandbox container metrics")}, clocktesting.NewFakeClock(t0))
		if _, err := p.Summary(context.Background(), true); err != nil {
			t.Fatalf("Summary: %v, want it served from the container stats", err)
		}
	})
	t.Run("no cgroup", func(t *testing.T) {
		h := newHost(t, false)
		if err := os.RemoveAll(filepath.Join(h.cgroup, "cpuacct")); err != nil {
			t.Fatal(err)
		}
		p := newProvider(h, &fakeRuntime{imageFs: imageFs(h.root)}, clocktesting.NewFakeClock(t0))
		if _, err := p.Summary(context.Background(), true); err == nil {
			t.Fatal("Summary succeeded without a cpu cgroup, want an error")
		}
	})
}
