package harnesstest

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/unitlet/unitlet/integration/harness"
	"github.com/unitlet/unitlet/services/podsync/criconfig"
)

// floorCgroup is the floor pods' cgroup parent, under each v1 controller (or the v2 root):
// apart from every node's cgroupRoot, removed after each round.
const floorCgroup = "unitlet-floor"

// The runtime floor of BenchmarkPodsVsKubelet: what the same pods cost when nothing but the
// runtime does the work. No agent, no API server: each pod is RunPodSandbox,
// PodSandboxStatus (its IP, for the hosts file), CreateContainer and StartContainer
// straight through CRI, all pods at once, and deleted by StopContainer, RemoveContainer,
// StopPodSandbox and RemovePodSandbox. The requests are the ones an agent sends for the
// benchmark's pod: podsync's own builders (criconfig) make them from the same pod spec,
// with the same cluster DNS, a pod cgroup parent, the kubelet's labels, and the three
// mounts an agent gives the container (the managed /etc/hosts, the termination-message
// file and the service-account token directory, written first as the agents write them).
// The agents are stopped meanwhile; the floor removes what it made before they start.

// floorRound runs n pods on the runtime alone and measures them as vsRound measures an
// agent's: per pod from its start until its container runs, then from the delete until all
// are gone.
func floorRound(ctx context.Context, rt *harness.CRIClient, n int) (vsResult, error) {
	r := vsResult{side: vsSide{agent: "floor", source: "cri"}, pods: n}
	dir, err := os.MkdirTemp("", "unitlet-floor-")
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(dir)
	defer removeFloorCgroups()
	o := criconfig.Options{
		ClusterDNS: []string{"10.0.0.10"}, ClusterDomain: "cluster.local",
		PodLogsDir: filepath.Join(dir, "logs"), PodsDir: filepath.Join(dir, "pods"),
		CgroupParent: func(p *corev1.Pod) string { return "/" + floorCgroup + "/pod" + string(p.UID) },
		NodeName:     "floor", NodeIPs: []string{"127.0.0.1"},
	}
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
			p, err := floorStart(ctx, rt, ops, o, name, fmt.Sprintf("floor-%d-%03d", n, i))
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
	for _, op := range []string{"run_podsandbox", "podsandbox_status", "create_container", "start_container"} {
		if n := o.count[op]; n > 0 {
			steps = append(steps, breakdownStep{name: "CRI " + op, count: uint64(n), mean: o.sum[op].Seconds() / float64(n),
				perPod: float64(n) / float64(pods), total: o.sum[op].Seconds()})
		}
	}
	return steps
}

// floorStart runs one benchmark pod as an agent asks it of the runtime (see the top).
func floorStart(ctx context.Context, rt *harness.CRIClient, ops *floorOps, o criconfig.Options, name, uid string) (p floorPod, err error) {
	pod := vsPod("floor", name)
	pod.Namespace, pod.UID = "floor", types.UID(uid)
	// What the API server's defaulting adds to the agents' pods and the spec uses here.
	pod.Spec.DNSPolicy = corev1.DNSClusterFirst
	pod.Spec.Containers[0].TerminationMessagePath = corev1.TerminationMessagePathDefault
	pod.Spec.Containers[0].TerminationMessagePolicy = corev1.TerminationMessageReadFile
	sandboxConfig, err := criconfig.SandboxConfig(pod, 0, o)
	if err != nil {
		return p, err
	}
	if err := os.MkdirAll(sandboxConfig.LogDirectory, 0o755); err != nil {
		return p, err
	}
	var sb *runtimeapi.RunPodSandboxResponse
	if err := ops.timed("run_podsandbox", func() (err error) {
		sb, err = rt.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: sandboxConfig})
		return err
	}); err != nil {
		return p, fmt.Errorf("RunPodSandbox: %w", err)
	}
	p.sandbox = sb.PodSandboxId
	var status *runtimeapi.PodSandboxStatusResponse
	if err := ops.timed("podsandbox_status", func() (err error) {
		status, err = rt.Runtime.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: p.sandbox})
		return err
	}); err != nil {
		return p, fmt.Errorf("PodSandboxStatus: %w", err)
	}
	podIPs := []string{status.GetStatus().GetNetwork().GetIp()}

	// What an agent writes before creating the container: the hosts file, the
	// token volume's files, the termination-message file (ContainerConfig names it).
	podDir := filepath.Join(o.PodsDir, uid)
	hosts := filepath.Join(podDir, "etc-hosts")
	token := filepath.Join(podDir, "volumes", "token")
	if err := os.MkdirAll(token, 0o755); err != nil {
		return p, err
	}
	if err := os.WriteFile(hosts, criconfig.ManagedHostsFile(podIPs, sandboxConfig.Hostname, "", nil), 0o644); err != nil {
		return p, err
	}
	for _, f := range []string{"ca.crt", "namespace", "token"} {
		if err := os.WriteFile(filepath.Join(token, f), []byte(f), 0o644); err != nil {
			return p, err
		}
	}
	mounts := []criconfig.Mount{
		{ContainerPath: "/var/run/secrets/kubernetes.io/serviceaccount", HostPath: token, ReadOnly: true},
		{ContainerPath: "/etc/hosts", HostPath: hosts},
	}
	c := &pod.Spec.Containers[0]
	cfg, termination, err := criconfig.ContainerConfig(ctx, pod, c, 0, mounts, criconfig.PodEnv{PodIPs: podIPs, HostIPs: o.NodeIPs}, nil, o)
	if err != nil {
		return p, err
	}
	if termination != "" {
		if err := os.MkdirAll(filepath.Dir(termination), 0o755); err != nil {
			return p, err
		}
		if err := os.WriteFile(termination, nil, 0o666); err != nil {
			return p, err
		}
	}
	create := &runtimeapi.CreateContainerRequest{PodSandboxId: p.sandbox, Config: cfg, SandboxConfig: sandboxConfig}
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

// removeFloorCgroups removes the floor's pod cgroups and its parent from every hierarchy
// once the runtime has removed the pods' own (rmdir of empty cgroups, deepest first).
func removeFloorCgroups() {
	roots, _ := filepath.Glob("/sys/fs/cgroup/*/" + floorCgroup)
	if _, err := os.Stat("/sys/fs/cgroup/" + floorCgroup); err == nil {
		roots = append(roots, "/sys/fs/cgroup/"+floorCgroup)
	}
	for _, root := range roots {
		var dirs []string
		_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := os.Remove(dirs[i]); err != nil && !errors.Is(err, fs.ErrNotExist) {
				fmt.Printf("floor: cannot remove cgroup %s: %v\n", dirs[i], err)
			}
		}
	}
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
