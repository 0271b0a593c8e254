// Package stats builds the node API's /stats/summary: the node's CPU, memory, filesystems
// and process limit from cgroups, /proc and statfs, and each pod's from the container
// runtime's CRI stats.
package stats

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"sync"

	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/clock"
)

// Runtime is the part of the CRI the summary reads. shared/cri.Client satisfies it.
type Runtime interface {
	ListPodSandboxStats(ctx context.Context, in *runtimeapi.ListPodSandboxStatsRequest, opts ...grpc.CallOption) (*runtimeapi.ListPodSandboxStatsResponse, error)
	ListContainerStats(ctx context.Context, in *runtimeapi.ListContainerStatsRequest, opts ...grpc.CallOption) (*runtimeapi.ListContainerStatsResponse, error)
	ListPodSandbox(ctx context.Context, in *runtimeapi.ListPodSandboxRequest, opts ...grpc.CallOption) (*runtimeapi.ListPodSandboxResponse, error)
	ListContainers(ctx context.Context, in *runtimeapi.ListContainersRequest, opts ...grpc.CallOption) (*runtimeapi.ListContainersResponse, error)
	ImageFsInfo(ctx context.Context, in *runtimeapi.ImageFsInfoRequest, opts ...grpc.CallOption) (*runtimeapi.ImageFsInfoResponse, error)
}

// Options configure a Provider.
type Options struct {
	Runtime  Runtime
	NodeName string
	// RootDir is the node agent's root directory; its filesystem is the node's (nodefs).
	RootDir string
	// CgroupRoot is where the cgroup hierarchies are mounted: cgroup v1 controllers in
	// <CgroupRoot>/<controller>/, or the unified v2 hierarchy at CgroupRoot itself.
	// Default /sys/fs/cgroup.
	CgroupRoot string
	// ProcRoot is where procfs is mounted. Default /proc.
	ProcRoot string
	// Services are the names of the node agent's processes ("unitlet-podsync", ...): their
	// cgroups together are the "kubelet" system container. None: no such container.
	Services []string
	// RuntimeSocket is the container runtime's unix socket: the cgroup of the process
	// listening on it is the "runtime" system container. Empty: no such container.
	RuntimeSocket string
	// PodsCgroup is the node-allocatable cgroup below each hierarchy's root ("/kubepods",
	// "/kubepods.slice"): the "pods" system container. Empty: no such container.
	PodsCgroup string
	// PodsCgroupMount is where the hierarchies holding PodsCgroup are mounted. Default
	// CgroupRoot.
	PodsCgroupMount string
	// Volumes lists the pods' volumes with their measured usage (unitlet-volumes). nil: no
	// volume stats.
	Volumes func(ctx context.Context) ([]Volume, error)
	// Pods lists the node's pods with their specs (unitlet-podsync): a volume's pvcRef and
	// whether it counts as ephemeral storage come from its pod's spec. nil: from the
	// volume's plugin, without pvcRef.
	Pods func(ctx context.Context) ([]*corev1.Pod, error)
	// PodLogsDir holds the pods' log directories (podLogsDir). Default /var/log/pods.
	PodLogsDir string
	// Clock stamps the node's samples. Default the real clock.
	Clock clock.Clock
	// Log receives what a summary leaves out and why (volume stats when unitlet-volumes
	// or unitlet-podsync does not answer). Default: discarded.
	Log *slog.Logger
}

// Provider computes summaries. Its methods may be called concurrently.
type Provider struct {
	rt         Runtime
	nodeName   string
	rootDir    string
	cgroupRoot string
	procRoot   string
	logsDir    string
	services   []string
	// runtimeSocket and podsCgroup: see Options.
	runtimeSocket string
	podsCgroup    string
	podsMount     string
	volumes       func(ctx context.Context) ([]Volume, error)
	pods          func(ctx context.Context) ([]*corev1.Pod, error)
	clock         clock.Clock
	log           *slog.Logger

	mu sync.Mutex
	// cpu holds the last cumulative CPU sample of the node (key ""), of each pod sandbox
	// ("pod/<id>") and of each container ("<id>"), to turn cumulative usage into a rate.
	cpu map[string]cpuSample
}

// New returns a Provider.
func New(o Options) *Provider {
	p := &Provider{
		rt:         o.Runtime,
		nodeName:   o.NodeName,
		rootDir:    o.RootDir,
		cgroupRoot: o.CgroupRoot,
		procRoot:   o.ProcRoot,
		logsDir:    o.PodLogsDir,
		services:   o.Services,

		runtimeSocket: o.RuntimeSocket,
		podsCgroup:    o.PodsCgroup,
		podsMount:     cmp.Or(o.PodsCgroupMount, o.CgroupRoot, "/sys/fs/cgroup"),
		volumes:       o.Volumes,
		pods:          o.Pods,
		clock:         o.Clock,
		log:           cmp.Or(o.Log, slog.New(slog.DiscardHandler)),
		cpu:           map[string]cpuSample{},
	}
	if p.cgroupRoot == "" {
		p.cgroupRoot = "/sys/fs/cgroup"
	}
	if p.procRoot == "" {
		p.procRoot = "/proc"
	}
	if p.logsDir == "" {
		p.logsDir = "/var/log/pods"
	}
	if p.clock == nil {
		p.clock = clock.RealClock{}
	}
	return p
}

// Summary returns the node's and its pods' statistics. With onlyCPUAndMemory it leaves out
// filesystems, the runtime's image filesystem, process limits, networks and logs, as the
// kubelet's ?only_cpu_and_memory=true does.
func (p *Provider) Summary(ctx context.Context, onlyCPUAndMemory bool) (*statsv1alpha1.Summary, error) {
	now := p.clock.Now()
	node := statsv1alpha1.NodeStats{NodeName: p.nodeName}

	boot, err := p.bootTime()
	if err != nil {
		return nil, fmt.Errorf("read the node's boot time: %w", err)
	}
	node.StartTime = metav1.NewTime(boot)
	if node.CPU, err = p.nodeCPU(now); err != nil {
		return nil, fmt.Errorf("read the node's cpu usage: %w", err)
	}
	if node.Memory, err = p.nodeMemory(now); err != nil {
		return nil, fmt.Errorf("read the node's memory usage: %w", err)
	}

	if node.SystemContainers, err = p.systemContainers(now); err != nil {
		return nil, fmt.Errorf("read the system containers: %w", err)
	}

	var nodeFs *statsv1alpha1.FsStats
	if !onlyCPUAndMemory {
		if nodeFs, err = fsStats(p.rootDir, now); err != nil {
			return nil, fmt.Errorf("read the node's filesystem: %w", err)
		}
		node.Fs = nodeFs
		if node.Runtime, err = p.runtimeFs(ctx, now); err != nil {
			return nil, fmt.Errorf("read the runtime's image filesystem: %w", err)
		}
		if node.Rlimit, err = p.rlimit(now); err != nil {
			return nil, fmt.Errorf("read the node's process limit: %w", err)
		}
		if node.Network, err = p.nodeNetwork(now); err != nil {
			return nil, fmt.Errorf("read the node's network: %w", err)
		}
	}

	pods, err := p.podStats(ctx, onlyCPUAndMemory, nodeFs)
	if err != nil {
		return nil, fmt.Errorf("list pod stats: %w", err)
	}
	return &statsv1alpha1.Summary{Node: node, Pods: pods}, nil
}
