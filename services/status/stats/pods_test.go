package stats

import (
	"context"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	clocktesting "k8s.io/utils/clock/testing"
)

func sandbox(id, ns, name, uid string, state runtimeapi.PodSandboxState, created time.Time) *runtimeapi.PodSandbox {
	return &runtimeapi.PodSandbox{
		Id: id, State: state, CreatedAt: created.UnixNano(),
		Metadata: &runtimeapi.PodSandboxMetadata{Name: name + "-md", Namespace: ns, Uid: uid},
		Labels:   map[string]string{labelPodName: name, labelPodNamespace: ns, labelPodUID: uid},
	}
}

func container(id, sandboxID, name string, state runtimeapi.ContainerState, created time.Time) *runtimeapi.Container {
	return &runtimeapi.Container{
		Id: id, PodSandboxId: sandboxID, State: state, CreatedAt: created.UnixNano(),
		Metadata: &runtimeapi.ContainerMetadata{Name: name + "-md"},
		Labels:   map[string]string{labelContainerName: name},
	}
}

func containerStats(id string, at time.Time, cpuNs, workingSet, layer uint64) *runtimeapi.ContainerStats {
	return &runtimeapi.ContainerStats{
		Attributes: &runtimeapi.ContainerAttributes{Id: id},
		Cpu:        &runtimeapi.CpuUsage{Timestamp: at.UnixNano(), UsageCoreNanoSeconds: &runtimeapi.UInt64Value{Value: cpuNs}},
		Memory:     &runtimeapi.MemoryUsage{Timestamp: at.UnixNano(), WorkingSetBytes: &runtimeapi.UInt64Value{Value: workingSet}},
		WritableLayer: &runtimeapi.FilesystemUsage{
			Timestamp: at.UnixNano(), UsedBytes: &runtimeapi.UInt64Value{Value: layer}, InodesUsed: &runtimeapi.UInt64Value{Value: 3},
		},
	}
}

// cluster is web (two running containers, one exited, and an older stopped sandbox) and
// done (a stopped sandbox, no running container).
func cluster() *fakeRuntime {
	return &fakeRuntime{
		sandboxes: []*runtimeapi.PodSandbox{
			sandbox("sb-web-old", "default", "web", "uid-web", runtimeapi.PodSandboxState_SANDBOX_NOTREADY, t0.Add(-time.Hour)),
			sandbox("sb-web", "default", "web", "uid-web", runtimeapi.PodSandboxState_SANDBOX_READY, t0),
			sandbox("sb-done", "jobs", "done", "uid-done", runtimeapi.PodSandboxState_SANDBOX_NOTREADY, t0),
		},
		containers: []*runtimeapi.Container{
			container("c-app", "sb-web", "app", runtimeapi.ContainerState_CONTAINER_RUNNING, t0.Add(time.Second)),
			container("c-side", "sb-web", "sidecar", runtimeapi.ContainerState_CONTAINER_RUNNING, t0.Add(2*time.Second)),
			container("c-init", "sb-web", "init", runtimeapi.ContainerState_CONTAINER_EXITED, t0),
			container("c-old", "sb-web-old", "app", runtimeapi.ContainerState_CONTAINER_EXITED, t0.Add(-time.Hour)),
			container("c-done", "sb-done", "job", runtimeapi.ContainerState_CONTAINER_EXITED, t0),
		},
		containerStats: []*runtimeapi.ContainerStats{
			containerStats("c-app", t0, 1e9, 100, 4096),
			containerStats("c-side", t0, 2e9, 50, 1024),
			containerStats("c-init", t0, 9e9, 999, 999),
			containerStats("c-done", t0, 9e9, 999, 999),
		},
	}
}

func TestSummaryPodsFromContainerStats(t *testing.T) {
	h := newHost(t, false)
	rt := cluster()
	rt.imageFs = imageFs(h.root)
	clk := clocktesting.NewFakeClock(t0)
	p := newProvider(h, rt, clk)

	s, err := p.Summary(context.Background(), false)
	if err != nil {
		t.Fatalf("Summary: %v", err)
	}
	if len(s.Pods) != 1 {
		t.Fatalf("pods = %+v, want web only (done has no running container)", s.Pods)
	}
	ps := s.Pods[0]
	if want := (statsv1alpha1.PodReference{Name: "web", Namespace: "default", UID: "uid-web"}); ps.PodRef != want {
		t.Errorf("podRef = %+v, want %+v (from the sandbox's labels)", ps.PodRef, want)
	}
	if !ps.StartTime.Time.Equal(t0) {
		t.Errorf("startTime = %v, want the ready sandbox's creation %v", ps.StartTime, t0)
	}
	if len(ps.Containers) != 2 || ps.Containers[0].Name != "app" || ps.Containers[1].Name != "sidecar" {
		t.Fatalf("containers = %+v, want app and sidecar (running, named by label)", ps.Containers)
	}
	app := ps.Containers[0]
	if !app.StartTime.Time.Equal(t0.Add(time.Second)) {
		t.Errorf("app startTime = %v", app.StartTime)
	}
	u64(t, "app cpu", app.CPU.UsageCoreNanoSeconds, 1e9)
	u64(t, "app workingSet", app.Memory.WorkingSetBytes, 100)
	u64(t, "app rootfs used", app.Rootfs.UsedBytes, 4096)
	u64(t, "pod cpu", ps.CPU.UsageCoreNanoSeconds, 3e9)
	u64(t, "pod workingSet", ps.Memory.WorkingSetBytes, 150)
	if ps.CPU.UsageNanoCores != nil {
		t.Errorf("pod usageNanoCores = %d on the first sample, want none", *ps.CPU.UsageNanoCores)
	}
	u64(t, "ephemeral used", ps.EphemeralStorage.UsedBytes, 5120)
	u64(t, "ephemeral inodes used", ps.EphemeralStorage.InodesUsed, 6)
	if ps.EphemeralStorage.CapacityBytes == nil || *ps.EphemeralStorage.CapacityBytes != *s.Node.Fs.CapacityBytes {
		t.Errorf("ephemeral capacity = %v, want the node filesystem's", ps.EphemeralStorage.CapacityBytes)
	}

	// Four seconds later app used two more core-seconds and sidecar one more.
	clk.Step(4 * time.Second)
	t1 := t0.Add(4 * time.Second)
	rt.containerStats = []*runtimeapi.ContainerStats{
		containerStats("c-app", t1, 3e9, 100, 4096),
		containerStats("c-side", t1, 3e9, 50, 1024),
	}
	s, err = p.Summary(context.Background(), false)
	if err != nil {
		t.Fatalf("Summary: %v", err)
	}
	ps = s.Pods[0]
	u64(t, "app usageNanoCores", ps.Containers[0].CPU.UsageNanoCores, 5e8)
	u64(t, "sidecar usageNanoCores", ps.Containers[1].CPU.UsageNanoCores, 25e7)
	u64(t, "pod usageNanoCores", ps.CPU.UsageNanoCores, 75e7)
}

func TestSummaryPodsOnlyCPUAndMemory(t *testing.T) {
	h := newHost(t, false)
	rt := cluster()
	p := newProvider(h, rt, clocktesting.NewFakeClock(t0))
	s, err := p.Summary(context.Background(), true)
	if err != nil {
		t.Fatalf("Summary: %v", err)
	}
	ps := s.Pods[0]
	if ps.EphemeralStorage != nil || ps.Containers[0].Rootfs != nil {
		t.Errorf("only cpu and memory asked, got ephemeral storage %+v, rootfs %+v", ps.EphemeralStorage, ps.Containers[0].Rootfs)
	}
	u64(t, "pod cpu", ps.CPU.UsageCoreNanoSeconds, 3e9)
	u64(t, "pod workingSet", ps.Memory.WorkingSetBytes, 150)
}

func TestSummaryPodsFromSandboxStats(t *testing.T) {
	h := newHost(t, false)
	rt := cluster()
	rt.imageFs = imageFs(h.root)
	rt.sandboxStats = []*runtimeapi.PodSandboxStats{
		{
			Attributes: &runtimeapi.PodSandboxAttributes{Id: "sb-web"},
			Linux: &runtimeapi.LinuxPodSandboxStats{
				Cpu:    &runtimeapi.CpuUsage{Timestamp: t0.UnixNano(), UsageCoreNanoSeconds: &runtimeapi.UInt64Value{Value: 4e9}, UsageNanoCores: &runtimeapi.UInt64Value{Value: 123}},
				Memory: &runtimeapi.MemoryUsage{Timestamp: t0.UnixNano(), WorkingSetBytes: &runtimeapi.UInt64Value{Value: 200}},
				Network: &runtimeapi.NetworkUsage{Timestamp: t0.UnixNano(), DefaultInterface: &runtimeapi.NetworkInterfaceUsage{
					Name: "eth0", RxBytes: &runtimeapi.UInt64Value{Value: 10}, TxBytes: &runtimeapi.UInt64Value{Value: 20},
				}},
				Process:    &runtimeapi.ProcessUsage{ProcessCount: &runtimeapi.UInt64Value{Value: 4}},
				Containers: []*runtimeapi.ContainerStats{containerStats("c-app", t0, 1e9, 100, 4096), containerStats("c-init", t0, 1, 1, 1)},
			},
		},
		{
			Attributes: &runtimeapi.PodSandboxAttributes{Id: "sb-done"},
			Linux:      &runtimeapi.LinuxPodSandboxStats{Containers: []*runtimeapi.ContainerStats{containerStats("c-done", t0, 1, 1, 1)}},
		},
	}
	p := newProvider(h, rt, clocktesting.NewFakeClock(t0))
	s, err := p.Summary(context.Background(), false)
	if err != nil {
		t.Fatalf("Summary: %v", err)
	}
	if len(s.Pods) != 1 {
		t.Fatalf("pods = %+v, want web only", s.Pods)
	}
	ps := s.Pods[0]
	u64(t, "pod cpu", ps.CPU.UsageCoreNanoSeconds, 4e9)
	u64(t, "pod usageNanoCores (the runtime's)", ps.CPU.UsageNanoCores, 123)
	u64(t, "pod workingSet", ps.Memory.WorkingSetBytes, 200)
	if len(ps.Containers) != 1 || ps.Containers[0].Name != "app" {
		t.Fatalf("containers = %+v, want app (the running one)", ps.Containers)
	}
	if ps.Network == nil || ps.Network.Name != "eth0" {
		t.Fatalf("network = %+v", ps.Network)
	}
	u64(t, "rxBytes", ps.Network.RxBytes, 10)
	if ps.ProcessStats == nil {
		t.Fatal("no process stats")
	}
	u64(t, "process count", ps.ProcessStats.ProcessCount, 4)
	u64(t, "ephemeral used", ps.EphemeralStorage.UsedBytes, 4096)
}

func TestSummaryPodsForgetsGoneContainers(t *testing.T) {
	h := newHost(t, false)
	rt := cluster()
	rt.imageFs = imageFs(h.root)
	clk := clocktesting.NewFakeClock(t0)
	p := newProvider(h, rt, clk)
	if _, err := p.Summary(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	rt.containers = rt.containers[:1] // sidecar is gone
	if _, err := p.Summary(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	_, kept := p.cpu["c-side"]
	_, app := p.cpu["c-app"]
	_, node := p.cpu[nodeCPUKey]
	p.mu.Unlock()
	if kept || !app || !node {
		t.Errorf("cpu samples: sidecar kept %v, app kept %v, node kept %v; want only the gone sidecar forgotten", kept, app, node)
	}
}
