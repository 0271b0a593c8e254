// Package podworker runs each desired pod on the CRI runtime: one worker per pod, one sync
// at a time per pod, pods in parallel (the kubelet's pod workers and its generic runtime
// manager). A sync compares the pod's spec with what the runtime has (from the relister)
// and acts: make the sandbox, run init containers in order, start and restart app
// containers with backoff, kill what must go; then it computes the pod's status.
package podworker

import (
	"context"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/flowcontrol"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"

	"github.com/unitlet/unitlet/services/podsync/criconfig"
	"github.com/unitlet/unitlet/services/podsync/pullrecords"
	"github.com/unitlet/unitlet/services/podsync/relist"
)

// Runtime is what a worker needs of the CRI runtime.
type Runtime interface {
	RunPodSandbox(ctx context.Context, in *runtimeapi.RunPodSandboxRequest, opts ...grpc.CallOption) (*runtimeapi.RunPodSandboxResponse, error)
	StopPodSandbox(ctx context.Context, in *runtimeapi.StopPodSandboxRequest, opts ...grpc.CallOption) (*runtimeapi.StopPodSandboxResponse, error)
	RemovePodSandbox(ctx context.Context, in *runtimeapi.RemovePodSandboxRequest, opts ...grpc.CallOption) (*runtimeapi.RemovePodSandboxResponse, error)
	PodSandboxStatus(ctx context.Context, in *runtimeapi.PodSandboxStatusRequest, opts ...grpc.CallOption) (*runtimeapi.PodSandboxStatusResponse, error)
	CreateContainer(ctx context.Context, in *runtimeapi.CreateContainerRequest, opts ...grpc.CallOption) (*runtimeapi.CreateContainerResponse, error)
	StartContainer(ctx context.Context, in *runtimeapi.StartContainerRequest, opts ...grpc.CallOption) (*runtimeapi.StartContainerResponse, error)
	StopContainer(ctx context.Context, in *runtimeapi.StopContainerRequest, opts ...grpc.CallOption) (*runtimeapi.StopContainerResponse, error)
	RemoveContainer(ctx context.Context, in *runtimeapi.RemoveContainerRequest, opts ...grpc.CallOption) (*runtimeapi.RemoveContainerResponse, error)
	ImageStatus(ctx context.Context, in *runtimeapi.ImageStatusRequest, opts ...grpc.CallOption) (*runtimeapi.ImageStatusResponse, error)
	PullImage(ctx context.Context, in *runtimeapi.PullImageRequest, opts ...grpc.CallOption) (*runtimeapi.PullImageResponse, error)
	UpdateContainerResources(ctx context.Context, in *runtimeapi.UpdateContainerResourcesRequest, opts ...grpc.CallOption) (*runtimeapi.UpdateContainerResourcesResponse, error)
	ContainerStats(ctx context.Context, in *runtimeapi.ContainerStatsRequest, opts ...grpc.CallOption) (*runtimeapi.ContainerStatsResponse, error)
	ExecSync(ctx context.Context, containerID string, cmd []string, timeout time.Duration) (stdout, stderr []byte, exitCode int32, err error)
}

// View reads a pod's state from the runtime.
type View interface {
	// Inspect asks the runtime afresh; nil when it has nothing of the pod.
	Inspect(ctx context.Context, uid types.UID) (*relist.Pod, error)
}

// Probes are the probe workers of running containers.
type Probes interface {
	SetContainer(pod *corev1.Pod, podIP string, c *corev1.Container, containerID string, startedAt time.Time)
	RemoveContainer(podUID types.UID, containerName string)
	RemovePod(podUID types.UID)
	Ready(podUID types.UID, containerName string) bool
	Started(podUID types.UID, containerName string) bool
}

// HookRunner runs a container's postStart or preStop handler.
type HookRunner func(ctx context.Context, pod *corev1.Pod, c *corev1.Container, containerID, podIP string, h *corev1.LifecycleHandler) error

// Recorder records an event about a pod (the kubelet's reasons: Pulling, Created, ...).
type Recorder interface {
	Event(pod *corev1.Pod, eventType, reason, message string)
}

// Observed is a pod's state after a sync, for the bus.
type Observed struct {
	Pod    *corev1.Pod
	Source string
	Status corev1.PodStatus
	// Terminating: the pod is no longer wanted and is being stopped. Terminated: all its
	// containers and its sandbox are stopped. Removed: the worker is gone.
	Terminating, Terminated, Removed bool
	FirstSeen                        time.Time
	Containers                       []ContainerRef
}

// ContainerRef names the runtime instance of a container.
type ContainerRef struct {
	Name, ID, LogPath string
	Init              bool
}

// Options configure the workers.
type Options struct {
	Runtime Runtime
	View    View
	CRI     criconfig.Options
	Objects criconfig.Objects
	Probes  Probes
	Hooks   HookRunner
	Events  Recorder
	// Report receives each pod's state after every sync that changed it.
	Report func(Observed)
	// Allocatable is the node's allocatable resources (for resourceFieldRef without limits).
	Allocatable func() corev1.ResourceList
	HostIPs     func() []string
	// RuntimeName prefixes container IDs in statuses ("containerd://<id>").
	RuntimeName string
	Clock       clock.Clock
	Log         *slog.Logger
	Registry    prometheus.Registerer
	// UserNamespaces hands out the user namespaces of pods with hostUsers: false; nil
	// refuses them. UserNamespacesSupported says whether a runtime handler ("" the
	// default) supports them (CRI Status).
	UserNamespaces          *UserNamespaces
	UserNamespacesSupported func(handler string) bool
	// StateDir keeps what the runtime cannot tell after a restart (starts in flight); ""
	// keeps nothing.
	StateDir string
	// Resync is how often a pod is synced with nothing happening (the kubelet's syncFrequency).
	Resync time.Duration
	// Volumes prepares pods' volumes before their containers start and releases them after
	// the pod terminated; nil runs pods without their volumes' mounts.
	Volumes Volumes
	// Services are the cluster's services for service-link variables; nil (a node without
	// an API server) gives none.
	Services Services
	// CrashLoopBackOffMax caps the crash-loop backoff (crashLoopBackOff.
	// maxContainerRestartPeriod); 0 is the kubelet's default, 5 min.
	CrashLoopBackOffMax time.Duration
	// RecursiveReadOnly reports whether a runtime handler ("" the default) supports
	// recursive read-only mounts; nil: none does.
	RecursiveReadOnly func(handler string) bool
	// RuntimeClasses resolve pods' runtimeClassName to a runtime handler; nil (a node
	// without an API server) runs only pods that name no RuntimeClass.
	RuntimeClasses RuntimeClasses
	// Cgroups makes or adopts each pod's cgroup before its sandbox is made; nil leaves
	// the cgroups to the runtime.
	Cgroups Cgroups
	// NodeHostsFile is the node's hosts file, which host-network pods see; "" is /etc/hosts.
	NodeHostsFile string
	// PullLimits hold image pulls to the configuration's rate and parallelism; the zero
	// value limits nothing.
	PullLimits PullLimits
	// CredentialProviders give the node's registry credentials (credential provider
	// plugins), tried after the pod's imagePullSecrets'; nil gives none.
	CredentialProviders CredentialProviders
	// PullRecords decide whether a pod may use an image already on the node without
	// proving its credentials, and record each pull (ensureSecretPulledImages); nil: every
	// pod may use any image present, as with the kubelet's feature gate off.
	PullRecords *pullrecords.Records
}

// Volumes prepares and releases pods' volumes (unitlet-volumes over the bus).
type Volumes interface {
	// Prepare makes the pod's volumes ready and returns each container's mounts by
	// container name. An error means the pod waits; its message is the FailedMount event's.
	Prepare(ctx context.Context, pod *corev1.Pod) (map[string][]criconfig.Mount, error)
	// PrepareContainer returns one container's mounts just before it starts, its subPaths
	// resolved again; an error means the container waits.
	PrepareContainer(ctx context.Context, pod *corev1.Pod, container string) ([]criconfig.Mount, error)
	// Release tears down a terminated pod's volumes.
	Release(ctx context.Context, pod *corev1.Pod) error
}

// Cgroups keeps pods' cgroups (the pod cgroup under its QoS class's).
type Cgroups interface {
	// EnsurePod makes the pod's cgroup with the pod's limits, or adopts the one there and
	// sets them; the error's message is the FailedCreatePodContainer event's.
	EnsurePod(ctx context.Context, pod *corev1.Pod) error
}

// Manager owns the workers.
type Manager struct {
	o          Options
	journal    startJournal
	backoff    *flowcontrol.Backoff
	pulls      *flowcontrol.Backoff
	pullLimits *pullLimiter
	metrics    *metrics
	ctx        context.Context
	mu         sync.Mutex
	workers    map[types.UID]*worker
	stopping   bool
	wg         sync.WaitGroup
}

// NewManager returns a manager; Run starts it.
func NewManager(o Options) *Manager {
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Resync == 0 {
		o.Resync = time.Minute
	}
	return &Manager{
		o:          o,
		journal:    startJournal{dir: filepathJoin(o.StateDir, "starting")},
		backoff:    newCrashLoopBackOff(o.Clock, o.CrashLoopBackOffMax),
		pulls:      newBackOff(o.Clock),
		pullLimits: newPullLimiter(o.PullLimits),
		metrics:    newMetrics(o.Registry),
		workers:    map[types.UID]*worker{},
	}
}

// newBackOff is the kubelet's backoff (10 s doubling to 5 min) on the manager's clock.
func newBackOff(clk clock.Clock) *flowcontrol.Backoff { return newCrashLoopBackOff(clk, 0) }

// newCrashLoopBackOff is the kubelet's crash-loop backoff: 10 s doubling to max (0: 5
// min, the kubelet's default maxContainerRestartPeriod), starting at max when max is
// shorter than 10 s.
func newCrashLoopBackOff(clk clock.Clock, max time.Duration) *flowcontrol.Backoff {
	if max <= 0 {
		max = 5 * time.Minute
	}
	b := flowcontrol.NewBackOff(min(10*time.Second, max), max)
	b.Clock = clk
	return b
}

func filepathJoin(dir, name string) string {
	if dir == "" {
		return ""
	}
	return filepath.Join(dir, name)
}

// Run keeps the workers going until ctx ends, then waits for running syncs to finish.
// Pods are not stopped when podsync stops: they keep running for the next podsync.
func (m *Manager) Run(ctx context.Context) error {
	m.mu.Lock()
	m.ctx = ctx
	for _, w := range m.workers {
		m.startLocked(w)
	}
	m.mu.Unlock()
	<-ctx.Done()
	m.mu.Lock()
	m.stopping = true
	m.mu.Unlock()
	m.wg.Wait()
	return nil
}

// Update tells the manager the desired spec of a pod (new or changed). A pod with a
// deletion timestamp is terminated with its deletion grace period.
func (m *Manager) Update(pod *corev1.Pod, source string) {
	m.mu.Lock()
	w := m.workers[pod.UID]
	if w == nil {
		w = newWorker(m, pod, source)
		m.workers[pod.UID] = w
		m.metrics.workers.Inc()
		if m.ctx != nil {
			m.startLocked(w)
		}
	}
	m.mu.Unlock()
	// Outside the manager's lock: a resize's admission reads the other pods.
	w.setSpec(pod)
}

// Terminate stops a pod that is no longer wanted: its containers get grace (nil: the
// pod's own terminationGracePeriodSeconds). When reason is set, the pod ends Failed with
// it (evictions); otherwise it keeps the phase its containers give.
func (m *Manager) Terminate(uid types.UID, grace *int64, reason, message string) bool {
	m.mu.Lock()
	w := m.workers[uid]
	m.mu.Unlock()
	if w == nil {
		return false
	}
	w.terminate(grace, reason, message, true)
	return true
}

// Kill stops a pod that stays wanted but must not run (evicted, rejected later): it ends
// Failed with reason and message.
func (m *Manager) Kill(uid types.UID, grace *int64, reason, message string) bool {
	m.mu.Lock()
	w := m.workers[uid]
	m.mu.Unlock()
	if w == nil {
		return false
	}
	w.terminate(grace, reason, message, false)
	return true
}

// Evict stops a pod for node pressure, as the kubelet's eviction manager does: a Warning
// event with reason and message on the pod, then the pod ends Failed with them and the
// condition DisruptionTarget=True (reason TerminationByKubelet, the message). grace
// overrides the pod's grace period (0 kills at once; nil keeps the pod's). A pod that has
// already terminated keeps its final status. It returns false when the pod has no worker.
func (m *Manager) Evict(uid types.UID, grace *int64, reason, message string) bool {
	m.mu.Lock()
	w := m.workers[uid]
	m.mu.Unlock()
	if w == nil {
		return false
	}
	w.evict(grace, reason, message)
	return true
}

// Shutdown stops a pod for a node shutdown, as the kubelet's shutdown manager does: no
// event; the pod is stopped within grace seconds (or its own grace period when shorter)
// and ends Failed, or Succeeded when every container succeeded, with reason and message
// and the condition DisruptionTarget=True (reason TerminationByKubelet, the message). A
// pod that has already terminated keeps its final status. It returns false when the pod
// has no worker.
func (m *Manager) Shutdown(uid types.UID, grace int64, reason, message string) bool {
	m.mu.Lock()
	w := m.workers[uid]
	m.mu.Unlock()
	if w == nil {
		return false
	}
	w.shutdown(grace, reason, message)
	return true
}

// Ended reports whether a pod has no worker or its worker has terminated it.
func (m *Manager) Ended(uid types.UID) bool {
	m.mu.Lock()
	w := m.workers[uid]
	m.mu.Unlock()
	return w == nil || w.isTerminated()
}

// ActivePods is the pods whose worker runs them (known and not terminated), as the
// worker last had them.
func (m *Manager) ActivePods() []*corev1.Pod {
	m.mu.Lock()
	ws := make([]*worker, 0, len(m.workers))
	for _, w := range m.workers {
		ws = append(ws, w)
	}
	m.mu.Unlock()
	var out []*corev1.Pod
	for _, w := range ws {
		w.mu.Lock()
		if !w.terminated {
			out = append(out, w.pod)
		}
		w.mu.Unlock()
	}
	return out
}

// Allocated is pod with the resources its worker allocated in place of those it asks
// for: a resize not yet allocated (Deferred, or not yet seen by the worker) does not count,
// as the kubelet admits new pods against allocated resources. Pod itself when it has no
// worker.
func (m *Manager) Allocated(pod *corev1.Pod) *corev1.Pod {
	m.mu.Lock()
	w := m.workers[pod.UID]
	m.mu.Unlock()
	if w == nil {
		return pod
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.alloc.apply(pod, w.alloc.differs(pod))
}

// Trigger asks the workers of the given pods to sync soon (their runtime state changed).
func (m *Manager) Trigger(uids ...types.UID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, uid := range uids {
		if w := m.workers[uid]; w != nil {
			w.poke()
		}
	}
}

// RestartContainer asks the worker to kill and restart a container whose liveness probe
// failed (only the instance containerID; a newer one is left alone).
func (m *Manager) RestartContainer(uid types.UID, name, containerID string, reason KillReason) {
	m.mu.Lock()
	w := m.workers[uid]
	m.mu.Unlock()
	if w != nil {
		w.restart(name, containerID, reason)
	}
}

// Known reports whether the manager has a worker for uid.
func (m *Manager) Known(uid types.UID) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.workers[uid] != nil
}

// Pods is the UIDs of every pod with a worker.
func (m *Manager) Pods() []types.UID {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]types.UID, 0, len(m.workers))
	for uid := range m.workers {
		out = append(out, uid)
	}
	return out
}

// Active is the UIDs of the pods whose worker runs them: known and not terminated. A pod
// outside it has no container to start, so its cgroup may go once it is empty.
func (m *Manager) Active() map[types.UID]bool {
	m.mu.Lock()
	ws := make([]*worker, 0, len(m.workers))
	for _, w := range m.workers {
		ws = append(ws, w)
	}
	m.mu.Unlock()
	out := make(map[types.UID]bool, len(ws))
	for _, w := range ws {
		if !w.isTerminated() {
			out[w.uid] = true
		}
	}
	return out
}

func (m *Manager) startLocked(w *worker) {
	if w.started {
		return
	}
	w.started = true
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		w.loop(m.ctx)
	}()
}

// forget removes a worker whose pod is terminated and no longer wanted.
func (m *Manager) forget(w *worker) {
	m.removePodFiles(w)
	w.mu.Lock()
	pod := w.pod
	w.mu.Unlock()
	m.forgetAllocation(pod)
	if m.o.UserNamespaces != nil {
		m.o.UserNamespaces.Release(pod.UID)
	}
	m.mu.Lock()
	if m.workers[w.uid] == w {
		delete(m.workers, w.uid)
		m.metrics.workers.Dec()
	}
	m.mu.Unlock()
}
