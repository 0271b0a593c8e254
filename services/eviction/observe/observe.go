package observe

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/grpc"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/unitlet/unitlet/shared/nodeinfo"
)

// The eviction signals, named as the kubelet names them.
const (
	SignalMemoryAvailable            = "memory.available"
	SignalAllocatableMemoryAvailable = "allocatableMemory.available"
	SignalNodeFsAvailable            = "nodefs.available"
	SignalNodeFsInodesFree           = "nodefs.inodesFree"
	SignalImageFsAvailable           = "imagefs.available"
	SignalImageFsInodesFree          = "imagefs.inodesFree"
	SignalContainerFsAvailable       = "containerfs.available"
	SignalContainerFsInodesFree      = "containerfs.inodesFree"
	SignalPIDAvailable               = "pid.available"
)

// Options says where to look.
type Options struct {
	// CgroupMount is where the cgroup file system is mounted, "/sys/fs/cgroup" (the
	// default): the v2 hierarchy, or a directory of v1 hierarchies. Which one is found out.
	CgroupMount string
	// CgroupRoot is the KubeletConfiguration's cgroupRoot ("" and "/" are the root): the
	// node-allocatable cgroup, kubepods, is below it.
	CgroupRoot string
	// CgroupDriver is "cgroupfs" (the default) or "systemd"; it names the kubepods cgroup
	// and the pod cgroups below it.
	CgroupDriver string
	// RootDir is the node's root directory (on nodefs); pods' volumes are under
	// <RootDir>/pods/<uid>/volumes.
	RootDir string
	// PodLogsDir holds the containers' logs, "/var/log/pods" (the default).
	PodLogsDir string
	// Runtime is the container runtime; *cri.Client is one.
	Runtime Runtime
	// AllocatableMemory returns the node's allocatable memory in bytes; it is the capacity of
	// allocatableMemory.available when the kubepods cgroup has no memory limit. Nil or 0:
	// unknown.
	AllocatableMemory func() int64
	// ProcRoot is where procfs is mounted, "/proc" (the default).
	ProcRoot string
	// VolumeStatsPeriod is how long Pods reuses a pod's volume measurement, since walking
	// large volumes is costly: the kubelet's volumeStatsAggPeriod (1m by default). 0
	// measures them on every call. The walks run in the background (see refreshVolumes).
	VolumeStatsPeriod time.Duration
}

// Runtime is the part of the CRI runtime and image services the observation uses.
type Runtime interface {
	ImageFsInfo(ctx context.Context, in *runtimeapi.ImageFsInfoRequest, opts ...grpc.CallOption) (*runtimeapi.ImageFsInfoResponse, error)
	ListContainers(ctx context.Context, in *runtimeapi.ListContainersRequest, opts ...grpc.CallOption) (*runtimeapi.ListContainersResponse, error)
	ListContainerStats(ctx context.Context, in *runtimeapi.ListContainerStatsRequest, opts ...grpc.CallOption) (*runtimeapi.ListContainerStatsResponse, error)
}

// Value is one signal's observation: bytes, inodes or process IDs. Err says why the signal
// could not be measured; Available and Capacity are then zero.
type Value struct {
	Available, Capacity int64
	Err                 error
}

// Node is one observation of every signal.
type Node struct {
	// Time is when the observation started.
	Time time.Time
	// Signals by name (the Signal* constants). A signal that cannot be measured has its
	// Err set; allocatableMemory.available is absent when no capacity is known for it.
	Signals map[string]Value
	// SplitImageFs: the image file system is not nodefs (the kubelet's dedicated imagefs).
	SplitImageFs bool
	// SplitContainerFs: the containers' writable layers are on another file system than
	// the images (the kubelet's split containerfs).
	SplitContainerFs bool
}

// Source measures one node. It is safe for concurrent use.
type Source struct {
	o         Options
	h         *hierarchy
	kubepods  string // the kubepods cgroup's path below each hierarchy's root
	driver    string
	procRoot  string
	sampleGap time.Duration // how often the v2 memory notifiers sample

	mu      sync.Mutex
	volumes map[types.UID]volumeUsage // the last measurement of each pod's volumes
	// inflight is closed when the walk of a pod's volumes under way ends; walks lets
	// maxWalks run at once; Pods waits at most volumeWait for walks. measure walks a pod's
	// volumes (measureVolumes; a test's stand-in).
	inflight   map[types.UID]chan struct{}
	walks      chan struct{}
	volumeWait time.Duration
	measure    func(types.UID) volumeUsage
}

// New checks the options and finds the cgroup hierarchies. RootDir and Runtime are
// required.
func New(o Options) (*Source, error) {
	if o.CgroupMount == "" {
		o.CgroupMount = "/sys/fs/cgroup"
	}
	if o.ProcRoot == "" {
		o.ProcRoot = "/proc"
	}
	if o.CgroupDriver == "" {
		o.CgroupDriver = "cgroupfs" // the kubelet's default
	}
	if o.PodLogsDir == "" {
		o.PodLogsDir = "/var/log/pods"
	}
	if o.RootDir == "" {
		return nil, errors.New("observe: no root directory")
	}
	if o.Runtime == nil {
		return nil, errors.New("observe: no container runtime")
	}
	kubepods, err := nodeinfo.PodsCgroupPath(o.CgroupRoot, o.CgroupDriver)
	if err != nil {
		return nil, fmt.Errorf("observe: %w", err)
	}
	h, err := detectHierarchy(o.CgroupMount)
	if err != nil {
		return nil, fmt.Errorf("observe: %w", err)
	}
	s := &Source{o: o, h: h, kubepods: kubepods, driver: o.CgroupDriver, procRoot: o.ProcRoot, sampleGap: time.Second,
		volumes: map[types.UID]volumeUsage{}, inflight: map[types.UID]chan struct{}{}, walks: make(chan struct{}, maxWalks), volumeWait: volumeWait}
	s.measure = s.measureVolumes
	return s, nil
}

// CgroupV2 reports whether the node runs the unified cgroup v2 hierarchy.
func (s *Source) CgroupV2() bool { return s.h.unified }

// Node measures every signal. A signal that fails has its Value.Err set and the others are
// still given; the error is non-nil only when no signal could be measured.
func (s *Source) Node(ctx context.Context) (Node, error) {
	n := Node{Time: time.Now(), Signals: make(map[string]Value, 9)}

	mem, err := s.rootMemory()
	n.Signals[SignalMemoryAvailable] = valueOr(mem, err)
	if v, ok := s.allocatableMemory(); ok {
		n.Signals[SignalAllocatableMemoryAvailable] = v
	}

	node, nodeErr := statFs(s.o.RootDir)
	if nodeErr != nil {
		nodeErr = fmt.Errorf("nodefs %s: %w", s.o.RootDir, nodeErr)
	}
	n.Signals[SignalNodeFsAvailable] = valueOr(node.bytesValue(), nodeErr)
	n.Signals[SignalNodeFsInodesFree] = valueOr(node.inodesValue(), nodeErr)

	image, imageErr, container, containerErr, split := s.runtimeFs(ctx)
	n.Signals[SignalImageFsAvailable] = valueOr(image.bytesValue(), imageErr)
	n.Signals[SignalImageFsInodesFree] = valueOr(image.inodesValue(), imageErr)
	n.Signals[SignalContainerFsAvailable] = valueOr(container.bytesValue(), containerErr)
	n.Signals[SignalContainerFsInodesFree] = valueOr(container.inodesValue(), containerErr)
	n.SplitContainerFs = split
	// As the kubelet: a dedicated image file system when the images are on another device
	// than the root directory, or when the containers are on another than the images.
	n.SplitImageFs = split || (imageErr == nil && nodeErr == nil && image.dev != node.dev)

	pids, err := s.pids()
	n.Signals[SignalPIDAvailable] = valueOr(pids, err)

	var errs []error
	for _, name := range []string{SignalMemoryAvailable, SignalAllocatableMemoryAvailable, SignalNodeFsAvailable, SignalImageFsAvailable, SignalContainerFsAvailable, SignalPIDAvailable} {
		v, ok := n.Signals[name]
		if !ok {
			continue
		}
		if v.Err == nil {
			return n, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", name, v.Err))
	}
	return n, fmt.Errorf("observe the node: nothing could be measured: %w", errors.Join(errs...))
}

func valueOr(v Value, err error) Value {
	if err != nil {
		return Value{Err: err}
	}
	return v
}

// podsDir is where the pods' directories are, as the kubelet lays them out.
func (s *Source) podsDir() string { return filepath.Join(s.o.RootDir, "pods") }
