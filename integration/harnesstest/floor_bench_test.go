package harnesstest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/unitlet/unitlet/integration/harness"
)

// The runtime floor of BenchmarkPodsVsKubelet: what the same pods cost when nothing but the
// runtime does the work. No agent, no API server: each pod is RunPodSandbox, CreateContainer
// and StartContainer straight through CRI, all pods at once, and deleted by StopContainer,
// RemoveContainer, StopPodSandbox and RemovePodSandbox. Its sandboxes carry none of the
// kubelet's labels, so no agent of the stack would take them for its own.

// floorRound runs n pods on the runtime alone and measures them as vsRound measures an
// agent's: per pod from its start until its container runs, then from the delete until all
// are gone.
func floorRound(ctx context.Context, rt *harness.CRIClient, n int) (vsResult, error) {
	r := vsResult{side: vsSide{agent: "floor", source: "cri"}, pods: n}
	logs, err := os.MkdirTemp("", "unitlet-floor-")
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(logs)
	prefix := fmt.Sprintf("vs-floor-%d", n)
	names := podNames(prefix, n)

	var mu sync.Mutex
	ops := &floorOps{}
	started := map[string]time.Time{}
	begun := map[string]time.Time{}
	pods := map[string]floorPod{}
	var errs []error
	var wg sync.WaitGroup
	first := time.Now()
	for i, name := range names {
		wg.Go(func() {
			t0 := time.Now()
			p, err := floorStart(ctx, rt, ops, name, fmt.Sprintf("floor-%d-%03d", n, i), filepath.Join(logs, name))
			mu.Lock()
			defer mu.Unlock()
			begun[name] = t0
			pods[name] = p
			if err != nil {
				errs = append(errs, fmt.Errorf("pod %s: %w", name, err))
				return
			}
			started[name] = time.Now()
		})
	}
	wg.Wait()
	r.start, r.allRunning = since(begun, started), latest(started).Sub(first)
	r.breakdown = ops.steps(n)

	delStart := time.Now()
	for name, p := range pods {
		wg.Go(func() {
			if err := floorRemove(ctx, rt, p.sandbox, p.container); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("remove pod %s: %w", name, err))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	r.deleted, r.deleteSource = time.Since(delStart), "cri"
	if len(errs) > 0 {
		return r, fmt.Errorf("%d of %d floor pods failed, first: %w", len(errs), n, errs[0])
	}
	return r, nil
}

// floorPod is a floor pod's sandbox and container IDs.
type floorPod struct{ sandbox, container string }

// floorOps times the floor's CRI calls, as kubelet_runtime_operations_duration_seconds
// times unitlet's, for the same lines of the start breakdown.
type floorOps struct {
	mu    sync.Mutex
	count map[string]int
	sum   map[string]time.Duration
}

// timed runs call as operation op and records how long it took.
func (o *floorOps) timed(op string, call func() error) error {
	t0 := time.Now()
	err := call()
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.count == nil {
		o.count, o.sum = map[string]int{}, map[string]time.Duration{}
	}
	o.count[op]++
	o.sum[op] += time.Since(t0)
	return err
}

// steps are the calls' means, as podBreakdown's CRI lines, for pods pods.
func (o *floorOps) steps(pods int) []breakdownStep {
	var steps []breakdownStep
	for _, op := range []string{"run_podsandbox", "create_container", "start_container"} {
		if n := o.count[op]; n > 0 {
			steps = append(steps, breakdownStep{name: "CRI " + op, count: uint64(n), mean: o.sum[op].Seconds() / float64(n),
				perPod: float64(n) / float64(pods), total: o.sum[op].Seconds()})
		}
	}
	return steps
}

// floorStart runs one pod as an agent would ask it of the runtime: a sandbox on the pod
// network, then the busybox container with the benchmark's command.
func floorStart(ctx context.Context, rt *harness.CRIClient, ops *floorOps, name, uid, logDir string) (p floorPod, err error) {
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return p, err
	}
	sandboxConfig := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Uid: uid, Namespace: "floor"},
		Hostname:     name,
		LogDirectory: logDir,
		Linux:        &runtimeapi.LinuxPodSandboxConfig{},
	}
	var sb *runtimeapi.RunPodSandboxResponse
	if err := ops.timed("run_podsandbox", func() (err error) {
		sb, err = rt.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: sandboxConfig})
		return err
	}); err != nil {
		return p, fmt.Errorf("RunPodSandbox: %w", err)
	}
	p.sandbox = sb.PodSandboxId
	create := &runtimeapi.CreateContainerRequest{
		PodSandboxId: p.sandbox,
		Config: &runtimeapi.ContainerConfig{
			Metadata: &runtimeapi.ContainerMetadata{Name: "main"},
			Image:    &runtimeapi.ImageSpec{Image: harness.BusyboxImage},
			Command:  []string{"sh", "-c", vsScript},
			LogPath:  "main/0.log",
			Linux:    &runtimeapi.LinuxContainerConfig{},
		},
		SandboxConfig: sandboxConfig,
	}
	var ctr *runtimeapi.CreateContainerResponse
	if err := ops.timed("create_container", func() (err error) {
		ctr, err = rt.Runtime.CreateContainer(ctx, create)
		return err
	}); err != nil {
		return p, fmt.Errorf("CreateContainer: %w", err)
	}
	p.container = ctr.ContainerId
	if err := ops.timed("start_container", func() error {
		_, err := rt.Runtime.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: p.container})
		return err
	}); err != nil {
		return p, fmt.Errorf("StartContainer: %w", err)
	}
	return p, nil
}

// floorRemove stops and removes what floorStart made (either ID may be empty).
func floorRemove(ctx context.Context, rt *harness.CRIClient, sandbox, container string) error {
	if container != "" {
		if _, err := rt.Runtime.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: container, Timeout: 30}); err != nil {
			return fmt.Errorf("StopContainer: %w", err)
		}
		if _, err := rt.Runtime.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: container}); err != nil {
			return fmt.Errorf("RemoveContainer: %w", err)
		}
	}
	if sandbox == "" {
		return nil
	}
	if _, err := rt.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sandbox}); err != nil {
		return fmt.Errorf("StopPodSandbox: %w", err)
	}
	if _, err := rt.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sandbox}); err != nil {
		return fmt.Errorf("RemovePodSandbox: %w", err)
	}
	return nil
}
