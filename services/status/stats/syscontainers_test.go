package stats

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	clocktesting "k8s.io/utils/clock/testing"
)

// process writes /proc/<pid>/{comm,cgroup,stat} of a process started startTicks clock ticks
// after boot, in the cgroup v1 path cgroup for cpuacct and memory.
func (h host) process(t *testing.T, pid int, comm, cgroup string, startTicks int) {
	t.Helper()
	dir := filepath.Join(h.proc, fmt.Sprint(pid))
	h.write(t, dir, "comm", comm+"\n")
	h.write(t, dir, "cgroup", fmt.Sprintf("5:pids:/\n4:memory:%s\n2:cpuacct:%s\n", cgroup, cgroup))
	fields := make([]string, 52)
	for i := range fields {
		fields[i] = "0"
	}
	fields[0], fields[1], fields[2] = fmt.Sprint(pid), "("+comm+")", "S"
	fields[21] = fmt.Sprint(startTicks)
	h.write(t, dir, "stat", strings.Join(fields, " ")+"\n")
}

// cgroup writes a v1 cgroup's CPU and memory figures.
func (h host) cgroupV1(t *testing.T, path string, cpuNs, usage, inactive uint64, limit string) {
	t.Helper()
	h.write(t, filepath.Join(h.cgroup, "cpuacct", path), "cpuacct.usage", fmt.Sprint(cpuNs))
	mem := filepath.Join(h.cgroup, "memory", path)
	h.write(t, mem, "memory.usage_in_bytes", fmt.Sprint(usage))
	h.write(t, mem, "memory.limit_in_bytes", limit)
	h.write(t, mem, "memory.stat", fmt.Sprintf("total_inactive_file %d\ntotal_rss 10\ntotal_pgfault 1\ntotal_pgmajfault 0\n", inactive))
}

func TestSummarySystemContainers(t *testing.T) {
	h := newHost(t, false)
	const noLimit = "9223372036854771712"
	h.process(t, 100, "unitlet-podsync", "/system.slice/unitlet-podsync.service", 500)
	h.process(t, 101, "unitlet-evictio", "/system.slice/unitlet-eviction.service", 300)
	h.process(t, 102, "unitlet-evictio", "/system.slice/unitlet-eviction.service", 900) // a second thread group in the same unit
	h.process(t, 103, "bash", "/user.slice", 1)
	h.cgroupV1(t, "/system.slice/unitlet-podsync.service", 3e9, 40<<20, 10<<20, noLimit)
	h.cgroupV1(t, "/system.slice/unitlet-eviction.service", 1e9, 20<<20, 0, noLimit)
	h.cgroupV1(t, "/kubepods", 7e9, 500<<20, 100<<20, fmt.Sprint(1<<30))
	h.cgroupV1(t, "/system.slice/containerd.service", 5e9, 60<<20, 0, noLimit)

	// The runtime is whoever listens on its socket: this test's process.
	sock := filepath.Join(t.TempDir(), "containerd.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	h.process(t, os.Getpid(), "containerd", "/system.slice/containerd.service", 200)

	rt := cluster()
	rt.imageFs = imageFs(h.root)
	p := New(Options{Runtime: rt, NodeName: "node-a", RootDir: h.root, CgroupRoot: h.cgroup, ProcRoot: h.proc, PodLogsDir: h.root, Clock: clocktesting.NewFakeClock(t0),
		Services: []string{"unitlet-podsync", "unitlet-eviction", "unitlet-status"}, RuntimeSocket: sock, PodsCgroup: "/kubepods"})
	s, err := p.Summary(context.Background(), true)
	if err != nil {
		t.Fatalf("Summary: %v", err)
	}
	got := map[string]statsv1alpha1.ContainerStats{}
	for _, c := range s.Node.SystemContainers {
		got[c.Name] = c
	}
	if len(got) != 3 {
		t.Fatalf("system containers = %+v, want kubelet, runtime and pods", s.Node.SystemContainers)
	}

	kubelet := got[statsv1alpha1.SystemContainerKubelet]
	u64(t, "kubelet cpu", kubelet.CPU.UsageCoreNanoSeconds, 4e9)
	u64(t, "kubelet memory", kubelet.Memory.UsageBytes, 60<<20)
	u64(t, "kubelet working set", kubelet.Memory.WorkingSetBytes, 50<<20)
	if kubelet.Memory.AvailableBytes != nil {
		t.Errorf("kubelet available = %d, want none without a limit", *kubelet.Memory.AvailableBytes)
	}
	if want := time.Unix(boot+3, 0); !kubelet.StartTime.Time.Equal(want) {
		t.Errorf("kubelet start = %v, want the earliest service's, %v", kubelet.StartTime, want)
	}

	runtime := got[statsv1alpha1.SystemContainerRuntime]
	u64(t, "runtime cpu", runtime.CPU.UsageCoreNanoSeconds, 5e9)
	u64(t, "runtime memory", runtime.Memory.UsageBytes, 60<<20)

	pods := got[statsv1alpha1.SystemContainerPods]
	u64(t, "pods cpu", pods.CPU.UsageCoreNanoSeconds, 7e9)
	u64(t, "pods working set", pods.Memory.WorkingSetBytes, 400<<20)
	u64(t, "pods available", pods.Memory.AvailableBytes, 1<<30-400<<20)
	if pods.StartTime.IsZero() {
		t.Error("pods has no start time")
	}
}

func TestSummarySystemContainersRuntimeGone(t *testing.T) {
	h := newHost(t, false)
	rt := cluster()
	rt.imageFs = imageFs(h.root)
	p := New(Options{Runtime: rt, NodeName: "node-a", RootDir: h.root, CgroupRoot: h.cgroup, ProcRoot: h.proc, Clock: clocktesting.NewFakeClock(t0),
		RuntimeSocket: filepath.Join(t.TempDir(), "none.sock")})
	if _, err := p.Summary(context.Background(), true); err == nil || !strings.Contains(err.Error(), "container runtime") {
		t.Fatalf("Summary with no runtime listening = %v, want an error naming the runtime", err)
	}
}
