package podworker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/unitlet/unitlet/services/podsync/criconfig"
	"github.com/unitlet/unitlet/services/podsync/relist"
)

// memSandbox and memContainer are what the in-memory runtime keeps.
type memSandbox struct {
	id      string
	cfg     *runtimeapi.PodSandboxConfig
	ready   bool
	created int64
}

type memContainer struct {
	id        string
	sandboxID string
	cfg       *runtimeapi.ContainerConfig
	state     runtimeapi.ContainerState
	created   int64
	started   time.Time
	finished  time.Time
	exitCode  int32
	reason    string
	message   string
	// exitedUnknown: the instance, in unknown state, exited on its own while the runtime
	// had lost track of it; a stop finds that exit (see loseExited).
	exitedUnknown *memExit
}

type memExit struct {
	code int32
	at   time.Time
}

// memCRI is an in-memory CRI runtime (podworker.Runtime) and the view of it
// (podworker.View): what the worker does to it is what it reads back.
type memCRI struct {
	mu         sync.Mutex
	seq        int64
	sandboxes  map[string]*memSandbox
	containers map[string]*memContainer
	images     map[string]bool
	calls      []string         // "<Method> <detail>", in order
	stopGrace  map[string]int64 // StopContainer timeout by container ID

	imageUsers map[string]*runtimeapi.Image // the uid or username an image runs as
	pullUser   string                       // when set, the only user PullImage accepts
	// abandon is, by container name, how many starts still fail as containerd 2.x fails a
	// start whose caller went away: the container left exited with reason StartError.
	abandon map[string]int
	// unremovable are the containers RemoveContainer refuses, as containerd 2.x refuses one
	// whose start it abandoned.
	unremovable map[string]bool
	// startLost is, by container name, how many starts fail as when containerd is killed
	// during the call: an Unavailable error, the container left in the unknown state.
	startLost map[string]int
	// stopSandboxGate, when set, holds every StopPodSandbox until it is closed, as a
	// loaded runtime takes its time to stop a sandbox.
	stopSandboxGate chan struct{}
	// memoryUsage is every container's memory usage in bytes (ContainerStats).
	memoryUsage uint64
	// refuseUpdates: UpdateContainerResources fails.
	refuseUpdates bool
}

func newMemCRI(images ...string) *memCRI {
	f := &memCRI{sandboxes: map[string]*memSandbox{}, containers: map[string]*memContainer{}, images: map[string]bool{}, stopGrace: map[string]int64{}}
	for _, i := range images {
		f.images[i] = true
	}
	return f
}

func (f *memCRI) record(format string, args ...any) {
	f.calls = append(f.calls, fmt.Sprintf(format, args...))
}

func (f *memCRI) nextLocked(prefix string) (string, int64) {
	f.seq++
	return fmt.Sprintf("%s%d", prefix, f.seq), f.seq
}

func (f *memCRI) RunPodSandbox(_ context.Context, in *runtimeapi.RunPodSandboxRequest, _ ...grpc.CallOption) (*runtimeapi.RunPodSandboxResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	id, n := f.nextLocked("sb")
	f.sandboxes[id] = &memSandbox{id: id, cfg: in.Config, ready: true, created: n}
	if in.RuntimeHandler != "" {
		f.record("RunPodSandbox %s attempt=%d handler=%s", in.Config.GetMetadata().GetName(), in.Config.GetMetadata().GetAttempt(), in.RuntimeHandler)
	} else {
		f.record("RunPodSandbox %s attempt=%d", in.Config.GetMetadata().GetName(), in.Config.GetMetadata().GetAttempt())
	}
	return &runtimeapi.RunPodSandboxResponse{PodSandboxId: id}, nil
}

func (f *memCRI) StopPodSandbox(_ context.Context, in *runtimeapi.StopPodSandboxRequest, _ ...grpc.CallOption) (*runtimeapi.StopPodSandboxResponse, error) {
	f.mu.Lock()
	gate := f.stopSandboxGate
	f.mu.Unlock()
	if gate != nil {
		<-gate
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("StopPodSandbox %s", in.PodSandboxId)
	if sb := f.sandboxes[in.PodSandboxId]; sb != nil {
		sb.ready = false
		for _, c := range f.containers {
			if c.sandboxID == sb.id && c.state == runtimeapi.ContainerState_CONTAINER_RUNNING {
				c.state, c.exitCode, c.finished = runtimeapi.ContainerState_CONTAINER_EXITED, 137, time.Now()
			}
		}
	}
	return &runtimeapi.StopPodSandboxResponse{}, nil
}

func (f *memCRI) RemovePodSandbox(_ context.Context, in *runtimeapi.RemovePodSandboxRequest, _ ...grpc.CallOption) (*runtimeapi.RemovePodSandboxResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("RemovePodSandbox %s", in.PodSandboxId)
	delete(f.sandboxes, in.PodSandboxId)
	return &runtimeapi.RemovePodSandboxResponse{}, nil
}

func (f *memCRI) PodSandboxStatus(_ context.Context, in *runtimeapi.PodSandboxStatusRequest, _ ...grpc.CallOption) (*runtimeapi.PodSandboxStatusResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb := f.sandboxes[in.PodSandboxId]
	if sb == nil {
		return nil, fmt.Errorf("sandbox %s not found", in.PodSandboxId)
	}
	return &runtimeapi.PodSandboxStatusResponse{Status: &runtimeapi.PodSandboxStatus{Id: sb.id, Network: &runtimeapi.PodSandboxNetworkStatus{Ip: "10.0.0.9"}}}, nil
}

func (f *memCRI) CreateContainer(_ context.Context, in *runtimeapi.CreateContainerRequest, _ ...grpc.CallOption) (*runtimeapi.CreateContainerResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.sandboxes[in.PodSandboxId] == nil {
		return nil, fmt.Errorf("sandbox %s not found", in.PodSandboxId)
	}
	id, n := f.nextLocked("c")
	f.containers[id] = &memContainer{id: id, sandboxID: in.PodSandboxId, cfg: in.Config, state: runtimeapi.ContainerState_CONTAINER_CREATED, created: n}
	f.record("CreateContainer %s attempt=%d", in.Config.GetMetadata().GetName(), in.Config.GetMetadata().GetAttempt())
	return &runtimeapi.CreateContainerResponse{ContainerId: id}, nil
}

func (f *memCRI) StartContainer(_ context.Context, in *runtimeapi.StartContainerRequest, _ ...grpc.CallOption) (*runtimeapi.StartContainerResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.containers[in.ContainerId]
	if c == nil {
		return nil, fmt.Errorf("container %s not found", in.ContainerId)
	}
	f.record("StartContainer %s", c.cfg.GetMetadata().GetName())
	if name := c.cfg.GetMetadata().GetName(); f.abandon[name] > 0 {
		f.abandon[name]--
		c.state, c.exitCode, c.finished = runtimeapi.ContainerState_CONTAINER_EXITED, 128, time.Now()
		c.reason, c.message = "StartError", "failed to create containerd task: failed to get task pid: context canceled"
		return nil, context.Canceled
	}
	if name := c.cfg.GetMetadata().GetName(); f.startLost[name] > 0 {
		f.startLost[name]--
		c.state = runtimeapi.ContainerState_CONTAINER_UNKNOWN
		return nil, status.Error(codes.Unavailable, "error reading from server: EOF")
	}
	c.state, c.started = runtimeapi.ContainerState_CONTAINER_RUNNING, time.Now()
	return &runtimeapi.StartContainerResponse{}, nil
}

func (f *memCRI) StopContainer(_ context.Context, in *runtimeapi.StopContainerRequest, _ ...grpc.CallOption) (*runtimeapi.StopContainerResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.containers[in.ContainerId]
	if c == nil {
		return nil, fmt.Errorf("container %s not found", in.ContainerId)
	}
	f.stopGrace[c.id] = in.Timeout
	f.record("StopContainer %s timeout=%d", c.cfg.GetMetadata().GetName(), in.Timeout)
	switch c.state {
	case runtimeapi.ContainerState_CONTAINER_RUNNING, runtimeapi.ContainerState_CONTAINER_CREATED:
		c.state, c.exitCode, c.finished = runtimeapi.ContainerState_CONTAINER_EXITED, 137, time.Now()
	case runtimeapi.ContainerState_CONTAINER_UNKNOWN:
		if e := c.exitedUnknown; e != nil {
			// containerd waits for the task it found again, which had already exited.
			c.state, c.exitCode, c.finished = runtimeapi.ContainerState_CONTAINER_EXITED, e.code, e.at
			break
		}
		// containerd's end of a container whose task it lost.
		c.state, c.exitCode, c.finished, c.reason = runtimeapi.ContainerState_CONTAINER_EXITED, 255, time.Now(), "Unknown"
	}
	return &runtimeapi.StopContainerResponse{}, nil
}

func (f *memCRI) UpdateContainerResources(_ context.Context, in *runtimeapi.UpdateContainerResourcesRequest, _ ...grpc.CallOption) (*runtimeapi.UpdateContainerResourcesResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.containers[in.ContainerId]
	if c == nil || c.state != runtimeapi.ContainerState_CONTAINER_RUNNING {
		return nil, fmt.Errorf("container %s not running", in.ContainerId)
	}
	if f.refuseUpdates {
		return nil, fmt.Errorf("update refused")
	}
	f.record("UpdateContainerResources %s memory=%d quota=%d shares=%d", c.cfg.GetMetadata().GetName(), in.Linux.GetMemoryLimitInBytes(), in.Linux.GetCpuQuota(), in.Linux.GetCpuShares())
	if c.cfg.Linux != nil {
		c.cfg.Linux.Resources = in.Linux
	}
	return &runtimeapi.UpdateContainerResourcesResponse{}, nil
}

func (f *memCRI) ContainerStats(_ context.Context, in *runtimeapi.ContainerStatsRequest, _ ...grpc.CallOption) (*runtimeapi.ContainerStatsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.containers[in.ContainerId] == nil {
		return nil, fmt.Errorf("container %s not found", in.ContainerId)
	}
	return &runtimeapi.ContainerStatsResponse{Stats: &runtimeapi.ContainerStats{Memory: &runtimeapi.MemoryUsage{UsageBytes: &runtimeapi.UInt64Value{Value: f.memoryUsage}}}}, nil
}

func (f *memCRI) RemoveContainer(_ context.Context, in *runtimeapi.RemoveContainerRequest, _ ...grpc.CallOption) (*runtimeapi.RemoveContainerResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c := f.containers[in.ContainerId]; c != nil {
		f.record("RemoveContainer %s", c.cfg.GetMetadata().GetName())
	}
	if f.unremovable[in.ContainerId] {
		return nil, status.Errorf(codes.FailedPrecondition, "failed to delete containerd container %q: cannot delete running task: failed precondition", in.ContainerId)
	}
	delete(f.containers, in.ContainerId)
	return &runtimeapi.RemoveContainerResponse{}, nil
}

func (f *memCRI) ImageStatus(_ context.Context, in *runtimeapi.ImageStatusRequest, _ ...grpc.CallOption) (*runtimeapi.ImageStatusResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.images[in.GetImage().GetImage()] {
		u := f.imageUsers[in.GetImage().GetImage()]
		return &runtimeapi.ImageStatusResponse{Image: &runtimeapi.Image{Id: "sha256:" + in.GetImage().GetImage(), Uid: u.GetUid(), Username: u.GetUsername()}}, nil
	}
	return &runtimeapi.ImageStatusResponse{}, nil
}

func (f *memCRI) PullImage(_ context.Context, in *runtimeapi.PullImageRequest, _ ...grpc.CallOption) (*runtimeapi.PullImageResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("PullImage %s", in.GetImage().GetImage())
	if f.pullUser != "" {
		f.record("PullImage auth %s", in.GetAuth().GetUsername())
		if in.GetAuth().GetUsername() != f.pullUser {
			return nil, errors.New("401 Unauthorized")
		}
	}
	f.images[in.GetImage().GetImage()] = true
	return &runtimeapi.PullImageResponse{ImageRef: "sha256:" + in.GetImage().GetImage()}, nil
}

func (f *memCRI) ExecSync(context.Context, string, []string, time.Duration) ([]byte, []byte, int32, error) {
	return nil, nil, 0, nil
}

// Inspect is the runtime's state of one pod, as the relister would give it.
func (f *memCRI) Inspect(_ context.Context, uid types.UID) (*relist.Pod, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var p *relist.Pod
	get := func(labels map[string]string) *relist.Pod {
		if p == nil {
			p = &relist.Pod{UID: uid, Name: labels[criconfig.LabelPodName], Namespace: labels[criconfig.LabelPodNamespace]}
		}
		return p
	}
	var sbs []*memSandbox
	for _, sb := range f.sandboxes {
		if sb.cfg.Labels[criconfig.LabelPodUID] == string(uid) {
			sbs = append(sbs, sb)
		}
	}
	sort.Slice(sbs, func(i, j int) bool { return sbs[i].created > sbs[j].created })
	for _, sb := range sbs {
		s := &relist.Sandbox{ID: sb.id, Attempt: sb.cfg.GetMetadata().GetAttempt(), Ready: sb.ready, CreatedAt: time.Unix(0, sb.created)}
		if sb.ready {
			s.IPs = []string{"10.0.0.9"}
		}
		get(sb.cfg.Labels).Sandboxes = append(get(sb.cfg.Labels).Sandboxes, s)
	}
	var cs []*memContainer
	for _, c := range f.containers {
		if c.cfg.Labels[criconfig.LabelPodUID] == string(uid) {
			cs = append(cs, c)
		}
	}
	sort.Slice(cs, func(i, j int) bool { return cs[i].created > cs[j].created })
	for _, c := range cs {
		logDir := ""
		if sb := f.sandboxes[c.sandboxID]; sb != nil {
			logDir = sb.cfg.LogDirectory
		}
		get(c.cfg.Labels).Containers = append(get(c.cfg.Labels).Containers, &relist.Container{
			ID: c.id, Name: c.cfg.Labels[criconfig.LabelContainerName], Attempt: c.cfg.GetMetadata().GetAttempt(),
			SandboxID: c.sandboxID, State: c.state, CreatedAt: time.Unix(0, c.created),
			StartedAt: c.started, FinishedAt: c.finished, ExitCode: c.exitCode, Reason: c.reason, Message: c.message,
			Image: c.cfg.GetImage().GetImage(), LogPath: filepath.Join(logDir, c.cfg.LogPath),
			Labels: c.cfg.Labels, Annotations: c.cfg.Annotations,
		})
	}
	return p, nil
}

// exit ends the running instance of the named container with code.
func (f *memCRI) exit(t *testing.T, name string, code int32) {
	t.Helper()
	f.exitAt(t, name, code, time.Now())
}

// exitAt ends the running instance of the named container with code, finished at at.
func (f *memCRI) exitAt(t *testing.T, name string, code int32, at time.Time) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.containers {
		if c.cfg.GetMetadata().GetName() == name && c.state == runtimeapi.ContainerState_CONTAINER_RUNNING {
			c.state, c.exitCode, c.finished = runtimeapi.ContainerState_CONTAINER_EXITED, code, at
			return
		}
	}
	t.Fatalf("no running container %s", name)
}

// lose makes the running instance of the named container one whose state the runtime
// lost, as containerd reports a task it could not load back after its restart.
func (f *memCRI) lose(t *testing.T, name string) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.containers {
		if c.cfg.GetMetadata().GetName() == name && c.state == runtimeapi.ContainerState_CONTAINER_RUNNING {
			c.state = runtimeapi.ContainerState_CONTAINER_UNKNOWN
			return
		}
	}
	t.Fatalf("no running container %s", name)
}

// loseExited makes the running instance of the named container one whose state the
// runtime lost and which exited with code at at meanwhile, as containerd 1.6 reports a
// container whose task exited while containerd restarted and could not be loaded back:
// unknown, until a stop finds the task's exit.
func (f *memCRI) loseExited(t *testing.T, name string, code int32, at time.Time) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.containers {
		if c.cfg.GetMetadata().GetName() == name && c.state == runtimeapi.ContainerState_CONTAINER_RUNNING {
			c.state, c.exitedUnknown = runtimeapi.ContainerState_CONTAINER_UNKNOWN, &memExit{code: code, at: at}
			return
		}
	}
	t.Fatalf("no running container %s", name)
}

// shiftFinished moves the FinishedAt of the named container's exited instance by d.
func (f *memCRI) shiftFinished(t *testing.T, name string, d time.Duration) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	var last *memContainer
	for _, c := range f.containers {
		if c.cfg.GetMetadata().GetName() == name && c.state == runtimeapi.ContainerState_CONTAINER_EXITED && (last == nil || c.created > last.created) {
			last = c
		}
	}
	if last == nil {
		t.Fatalf("no exited container %s", name)
	}
	last.finished = last.finished.Add(d)
}

// seed puts a sandbox and running instances of the pod's app containers into the runtime,
// as a podsync before a restart left them; annotate may change each container's annotations.
func (f *memCRI) seed(t *testing.T, pod *corev1.Pod, annotate func(map[string]string)) {
	t.Helper()
	o := criconfig.Options{PodLogsDir: t.TempDir()}
	sbCfg, err := criconfig.SandboxConfig(pod, 0, o)
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	sbID, n := f.nextLocked("old-sb")
	f.sandboxes[sbID] = &memSandbox{id: sbID, cfg: sbCfg, ready: true, created: n}
	for i := range pod.Spec.Containers {
		cfg, _, err := criconfig.ContainerConfig(context.Background(), pod, &pod.Spec.Containers[i], 0, nil, criconfig.PodEnv{}, nil, o)
		if err != nil {
			t.Fatal(err)
		}
		if annotate != nil {
			annotate(cfg.Annotations)
		}
		id, n := f.nextLocked("old-c")
		f.containers[id] = &memContainer{id: id, sandboxID: sbID, cfg: cfg, state: runtimeapi.ContainerState_CONTAINER_RUNNING, created: n, started: time.Now()}
	}
}

func (f *memCRI) callsOf(method string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, c := range f.calls {
		if strings.HasPrefix(c, method+" ") {
			out = append(out, strings.TrimPrefix(c, method+" "))
		}
	}
	return out
}

func (f *memCRI) runningNames() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, c := range f.containers {
		if c.state == runtimeapi.ContainerState_CONTAINER_RUNNING {
			out = append(out, c.cfg.GetMetadata().GetName())
		}
	}
	slices.Sort(out)
	return out
}

func (f *memCRI) counts() (sandboxes, readySandboxes, containers int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, sb := range f.sandboxes {
		if sb.ready {
			readySandboxes++
		}
	}
	return len(f.sandboxes), readySandboxes, len(f.containers)
}

// events records what the workers report.
type events struct {
	mu       sync.Mutex
	reports  []Observed
	recorded []string // "<reason>: <message>"
	warnings []string // the Warning ones of them
}

func (e *events) Event(_ *corev1.Pod, eventType, reason, message string) {
	e.mu.Lock()
	e.recorded = append(e.recorded, reason+": "+message)
	if eventType == corev1.EventTypeWarning {
		e.warnings = append(e.warnings, reason+": "+message)
	}
	e.mu.Unlock()
}

func (e *events) report(o Observed) {
	e.mu.Lock()
	e.reports = append(e.reports, o)
	e.mu.Unlock()
}

// waitFor waits for a report that matches, and returns it.
func (e *events) waitFor(t *testing.T, what string, match func(Observed) bool) Observed {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		e.mu.Lock()
		for _, o := range e.reports {
			if match(o) {
				e.mu.Unlock()
				return o
			}
		}
		last := Observed{}
		if len(e.reports) > 0 {
			last = e.reports[len(e.reports)-1]
		}
		e.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatalf("no report of %s; last: terminated=%v removed=%v status=%s", what, last.Terminated, last.Removed, describe(last.Status))
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// count is how many events recorded begin with prefix.
func (e *events) count(prefix string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, r := range e.recorded {
		if strings.HasPrefix(r, prefix) {
			n++
		}
	}
	return n
}

func (e *events) hasEvent(prefix string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, r := range e.recorded {
		if strings.HasPrefix(r, prefix) {
			return true
		}
	}
	return false
}

func describe(st corev1.PodStatus) string {
	var b strings.Builder
	fmt.Fprintf(&b, "phase=%s", st.Phase)
	for _, cs := range append(slices.Clone(st.InitContainerStatuses), st.ContainerStatuses...) {
		fmt.Fprintf(&b, " %s:", cs.Name)
		switch {
		case cs.State.Running != nil:
			b.WriteString("running")
		case cs.State.Terminated != nil:
			fmt.Fprintf(&b, "terminated(%d)", cs.State.Terminated.ExitCode)
		case cs.State.Waiting != nil:
			fmt.Fprintf(&b, "waiting(%s)", cs.State.Waiting.Reason)
		}
		fmt.Fprintf(&b, "/r%d", cs.RestartCount)
	}
	return b.String()
}

// statusOf is the named container's status (app or init) in a report.
func statusOf(o Observed, name string) corev1.ContainerStatus {
	for _, cs := range append(slices.Clone(o.Status.InitContainerStatuses), o.Status.ContainerStatuses...) {
		if cs.Name == name {
			return cs
		}
	}
	return corev1.ContainerStatus{}
}

func isRunning(o Observed, name string) bool { return statusOf(o, name).State.Running != nil }

// harness runs a Manager over a memCRI.
type harness struct {
	cri *memCRI
	ev  *events
	m   *Manager
	// stop ends the manager, as a podsync that stops (the test's cleanup does it too).
	stop func()
}

func newHarness(t *testing.T, cri *memCRI) *harness {
	t.Helper()
	return newHarnessWith(t, cri, nil)
}

func newHarnessWith(t *testing.T, cri *memCRI, vols Volumes) *harness {
	t.Helper()
	return newHarnessOpts(t, cri, func(o *Options) { o.Volumes = vols })
}

// newHarnessOpts is a harness whose manager's options set changes.
func newHarnessOpts(t *testing.T, cri *memCRI, set func(*Options)) *harness {
	t.Helper()
	ev := &events{}
	o := Options{
		Runtime: cri, View: cri,
		CRI:    criconfig.Options{PodLogsDir: t.TempDir()},
		Events: ev,
		Report: ev.report,
		Clock:  clocktesting.NewFakeClock(time.Now()),
		Log:    slog.New(slog.NewTextHandler(io.Discard, nil)),
		Resync: time.Hour,
	}
	set(&o)
	m := NewManager(o)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		_ = m.Run(ctx)
		close(done)
	}()
	stop := sync.OnceFunc(func() {
		cancel()
		<-done
	})
	t.Cleanup(stop)
	return &harness{cri: cri, ev: ev, m: m, stop: stop}
}

// initDoneAppRunning waits for the pod's init container "init" to run, ends it with 0 and
// waits for its app container "app" to run.
func (h *harness) initDoneAppRunning(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	h.ev.waitFor(t, "init running", func(o Observed) bool { return isRunning(o, "init") })
	h.cri.exit(t, "init", 0)
	h.m.Trigger(pod.UID)
	h.ev.waitFor(t, "app running", func(o Observed) bool { return isRunning(o, "app") })
}

func syncPod(policy corev1.RestartPolicy, inits []string, apps ...string) *corev1.Pod {
	p := testPod(policy, inits, apps...)
	p.UID = types.UID("uid-" + strings.Join(apps, "-"))
	p.CreationTimestamp = metav1.NewTime(time.Unix(100, 0))
	return p
}

func TestSyncStartsNewPodInitContainersInOrder(t *testing.T) {
	cri := newMemCRI("busybox:1")
	h := newHarness(t, cri)
	pod := syncPod(corev1.RestartPolicyAlways, []string{"init1", "init2"}, "app", "side")
	h.m.Update(pod, "api")

	o := h.ev.waitFor(t, "init1 running", func(o Observed) bool { return isRunning(o, "init1") })
	if o.Status.Phase != corev1.PodPending || o.Source != "api" {
		t.Errorf("while init1 runs: phase %s source %q, want Pending from api", o.Status.Phase, o.Source)
	}
	if got := cri.callsOf("CreateContainer"); !slices.Equal(got, []string{"init1 attempt=0"}) {
		t.Fatalf("created %v while init1 runs, want only init1", got)
	}

	cri.exit(t, "init1", 0)
	h.m.Trigger(pod.UID)
	h.ev.waitFor(t, "init2 running", func(o Observed) bool { return isRunning(o, "init2") })
	if got := cri.callsOf("CreateContainer"); !slices.Equal(got, []string{"init1 attempt=0", "init2 attempt=0"}) {
		t.Fatalf("created %v while init2 runs, want init1, init2", got)
	}

	cri.exit(t, "init2", 0)
	h.m.Trigger(pod.UID)
	o = h.ev.waitFor(t, "the pod running", func(o Observed) bool {
		return o.Status.Phase == corev1.PodRunning && isRunning(o, "app") && isRunning(o, "side")
	})
	if got := cri.callsOf("StartContainer"); !slices.Equal(got[:2], []string{"init1", "init2"}) || len(got) != 4 {
		t.Errorf("started %v, want init1, init2, then the two apps", got)
	}
	if got := cri.callsOf("RunPodSandbox"); !slices.Equal(got, []string{"web attempt=0"}) {
		t.Errorf("sandboxes run: %v, want one", got)
	}
	if len(o.Containers) != 4 || !o.Containers[0].Init || o.Containers[2].Init || o.Containers[2].ID == "" {
		t.Errorf("container refs %+v, want 2 init then 2 app with IDs", o.Containers)
	}
	if o.Status.PodIP != "10.0.0.9" {
		t.Errorf("pod IP %q, want the sandbox's", o.Status.PodIP)
	}
	if cri.callsOf("PullImage") != nil {
		t.Errorf("pulled %v an image already present (IfNotPresent)", cri.callsOf("PullImage"))
	}

	// Nothing changed: another sync does nothing.
	before := len(cri.callsOf("CreateContainer")) + len(cri.callsOf("RunPodSandbox")) + len(cri.callsOf("StopContainer"))
	h.m.Trigger(pod.UID)
	time.Sleep(50 * time.Millisecond)
	if after := len(cri.callsOf("CreateContainer")) + len(cri.callsOf("RunPodSandbox")) + len(cri.callsOf("StopContainer")); after != before {
		t.Errorf("a sync of an unchanged running pod acted on the runtime: %v", cri.callsOf("CreateContainer"))
	}
}

func TestSyncInitFailure(t *testing.T) {
	for _, tc := range []struct {
		name       string
		policy     corev1.RestartPolicy
		wantPhase  corev1.PodPhase
		wantCreate []string
	}{
		{"Never: the pod fails, app never starts", corev1.RestartPolicyNever, corev1.PodFailed, []string{"init attempt=0"}},
		{"OnFailure: init retried", corev1.RestartPolicyOnFailure, corev1.PodPending, []string{"init attempt=0", "init attempt=1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cri := newMemCRI("busybox:1")
			h := newHarness(t, cri)
			pod := syncPod(tc.policy, []string{"init"}, "app")
			h.m.Update(pod, "api")
			h.ev.waitFor(t, "init running", func(o Observed) bool { return isRunning(o, "init") })
			cri.exit(t, "init", 1)
			h.m.Trigger(pod.UID)
			h.ev.waitFor(t, "phase "+string(tc.wantPhase), func(o Observed) bool {
				return o.Status.Phase == tc.wantPhase && len(cri.callsOf("CreateContainer")) == len(tc.wantCreate)
			})
			if got := cri.callsOf("CreateContainer"); !slices.Equal(got, tc.wantCreate) {
				t.Errorf("created %v, want %v", got, tc.wantCreate)
			}
		})
	}
}

// A container whose state the runtime lost is killed, then handled as the kubelet does: an
// init container as one that failed, an app container started again whatever the policy.
func TestSyncKillsAContainerInUnknownStateBeforeItsRestart(t *testing.T) {
	for _, tc := range []struct {
		name       string
		policy     corev1.RestartPolicy
		lost       string
		wantPhase  corev1.PodPhase
		wantCreate []string
		wantEvent  string
	}{
		{"init, Never: the pod fails", corev1.RestartPolicyNever, "init", corev1.PodFailed,
			[]string{"init attempt=0"}, `Killing: Init container is in "unknown" state, try killing it before restart`},
		{"init, OnFailure: init runs again", corev1.RestartPolicyOnFailure, "init", corev1.PodPending,
			[]string{"init attempt=0", "init attempt=1"}, `Killing: Init container is in "unknown" state, try killing it before restart`},
		{"app, Never: started again", corev1.RestartPolicyNever, "app", corev1.PodRunning,
			[]string{"init attempt=0", "app attempt=0", "app attempt=1"}, `Killing: Container is in "unknown" state, try killing it before restart`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cri := newMemCRI("busybox:1")
			h := newHarness(t, cri)
			pod := syncPod(tc.policy, []string{"init"}, "app")
			h.m.Update(pod, "api")
			if tc.lost == "app" {
				h.initDoneAppRunning(t, pod)
			} else {
				h.ev.waitFor(t, "init running", func(o Observed) bool { return isRunning(o, "init") })
			}
			cri.lose(t, tc.lost)
			h.m.Trigger(pod.UID)
			h.ev.waitFor(t, "phase "+string(tc.wantPhase)+" after the kill", func(o Observed) bool {
				return o.Status.Phase == tc.wantPhase && len(cri.callsOf("CreateContainer")) == len(tc.wantCreate) &&
					len(cri.callsOf("StopContainer "+tc.lost)) > 0 && (tc.wantPhase == corev1.PodFailed || isRunning(o, tc.lost))
			})
			if got := cri.callsOf("CreateContainer"); !slices.Equal(got, tc.wantCreate) {
				t.Errorf("created %v, want %v", got, tc.wantCreate)
			}
			if got := cri.callsOf("StopContainer " + tc.lost); len(got) != 1 {
				t.Errorf("StopContainer calls %v, want the lost instance stopped once", got)
			}
			if !h.ev.hasEvent(tc.wantEvent) {
				t.Errorf("events %v, want %q", h.ev.recorded, tc.wantEvent)
			}
		})
	}
}

// An app container in unknown state that the stop finds exited before the kill was asked
// ended on its own while the runtime had lost track of it: the restart policy applies to
// its exit. The kubelet would start it again under any policy (fault run 17: a Never pod's
// main container that exited 0 as containerd restarted ran a second time).
func TestSyncAContainerThatExitedWhileItsStateWasUnknownKeepsItsExit(t *testing.T) {
	for _, tc := range []struct {
		name       string
		policy     corev1.RestartPolicy
		exit       int32
		wantPhase  corev1.PodPhase
		wantCreate []string
	}{
		{"Never, exit 0: Succeeded", corev1.RestartPolicyNever, 0, corev1.PodSucceeded, []string{"init attempt=0", "app attempt=0"}},
		{"Never, exit 1: Failed", corev1.RestartPolicyNever, 1, corev1.PodFailed, []string{"init attempt=0", "app attempt=0"}},
		{"OnFailure, exit 1: restarted", corev1.RestartPolicyOnFailure, 1, corev1.PodRunning, []string{"init attempt=0", "app attempt=0", "app attempt=1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cri := newMemCRI("busybox:1")
			h := newHarness(t, cri)
			pod := syncPod(tc.policy, []string{"init"}, "app")
			h.m.Update(pod, "api")
			h.initDoneAppRunning(t, pod)
			// It exited before the sync that finds it unknown (the harness's clock began at
			// the harness's start).
			cri.loseExited(t, "app", tc.exit, time.Now().Add(-time.Minute))
			h.m.Trigger(pod.UID)
			o := h.ev.waitFor(t, "phase "+string(tc.wantPhase)+" after the stop", func(o Observed) bool {
				return o.Status.Phase == tc.wantPhase && len(cri.callsOf("CreateContainer")) == len(tc.wantCreate) &&
					len(cri.callsOf("StopContainer app")) > 0 && (tc.wantPhase != corev1.PodRunning || isRunning(o, "app"))
			})
			if got := cri.callsOf("CreateContainer"); !slices.Equal(got, tc.wantCreate) {
				t.Errorf("created %v, want %v", got, tc.wantCreate)
			}
			if tc.wantPhase == corev1.PodRunning {
				return
			}
			if tt := statusOf(o, "app").State.Terminated; tt == nil || tt.ExitCode != tc.exit {
				t.Errorf("app state %+v, want terminated with its own exit %d", statusOf(o, "app").State, tc.exit)
			}
			if n := statusOf(o, "app").RestartCount; n != 0 {
				t.Errorf("restartCount %d, want 0", n)
			}
		})
	}
}

// A pod whose containers are done for good reports its final phase before its sandbox is
// stopped, as the kubelet's status manager has it: a slow stop does not hold the phase back
// (fault run 19: finish pods Running in the API 107 s after their container exited).
func TestSyncReportsTheFinalPhaseBeforeTheSandboxStops(t *testing.T) {
	cri := newMemCRI("busybox:1")
	gate := make(chan struct{})
	open := sync.OnceFunc(func() { close(gate) })
	cri.stopSandboxGate = gate
	h := newHarness(t, cri)
	t.Cleanup(open) // runs before the harness stops, so a StopPodSandbox held by the gate returns
	pod := syncPod(corev1.RestartPolicyNever, nil, "app")
	h.m.Update(pod, "api")
	h.ev.waitFor(t, "app running", func(o Observed) bool { return isRunning(o, "app") })
	cri.exit(t, "app", 0)
	h.m.Trigger(pod.UID)
	h.ev.waitFor(t, "Succeeded while the sandbox stops", func(o Observed) bool {
		return o.Status.Phase == corev1.PodSucceeded && !o.Terminated
	})
	if _, ready, _ := cri.counts(); ready != 1 {
		t.Errorf("%d ready sandboxes when the phase went out, want the sandbox still stopping", ready)
	}
	open()
	o := h.ev.waitFor(t, "terminated", func(o Observed) bool { return o.Terminated })
	if o.Status.Phase != corev1.PodSucceeded {
		t.Errorf("final phase %s, want Succeeded", o.Status.Phase)
	}
}

// A restart count the API has is never reported lower: after podsync removed a newest
// instance that never started, an older instance is newest until the next is made (fault
// run 22: restartCount 0 after 1 while containerd restarted).
func TestSyncNeverReportsARestartCountBelowTheAPIs(t *testing.T) {
	cri := newMemCRI("busybox:1")
	h := newHarness(t, cri)
	pod := syncPod(corev1.RestartPolicyAlways, []string{"init"}, "app")
	pod.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "init", RestartCount: 1}}
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "app", RestartCount: 2}}
	h.m.Update(pod, "api")
	o := h.ev.waitFor(t, "init running", func(o Observed) bool { return isRunning(o, "init") })
	if got := statusOf(o, "init").RestartCount; got != 1 {
		t.Errorf("init restartCount %d, want the API's 1", got)
	}
	if got := statusOf(o, "app").RestartCount; got != 2 {
		t.Errorf("app restartCount %d, want the API's 2", got)
	}
}

func TestSyncRestartPolicy(t *testing.T) {
	for _, tc := range []struct {
		name      string
		policy    corev1.RestartPolicy
		exit      int32
		wantPhase corev1.PodPhase
		// wantRestart: a second instance is created.
		wantRestart    bool
		wantTerminated bool
	}{
		{"Never, exit 1: Failed, not restarted", corev1.RestartPolicyNever, 1, corev1.PodFailed, false, true},
		{"Never, exit 0: Succeeded", corev1.RestartPolicyNever, 0, corev1.PodSucceeded, false, true},
		{"OnFailure, exit 0: Succeeded", corev1.RestartPolicyOnFailure, 0, corev1.PodSucceeded, false, true},
		{"OnFailure, exit 1: restarted", corev1.RestartPolicyOnFailure, 1, corev1.PodRunning, true, false},
		{"Always, exit 0: restarted", corev1.RestartPolicyAlways, 0, corev1.PodRunning, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cri := newMemCRI("busybox:1")
			h := newHarness(t, cri)
			pod := syncPod(tc.policy, nil, "app")
			h.m.Update(pod, "api")
			h.ev.waitFor(t, "app running", func(o Observed) bool { return isRunning(o, "app") })
			cri.exit(t, "app", tc.exit)
			h.m.Trigger(pod.UID)
			var o Observed
			if tc.wantRestart {
				o = h.ev.waitFor(t, "app running again", func(o Observed) bool {
					return isRunning(o, "app") && statusOf(o, "app").RestartCount == 1
				})
				if lt := statusOf(o, "app").LastTerminationState.Terminated; lt == nil || lt.ExitCode != tc.exit {
					t.Errorf("lastState %+v, want the exit with %d", lt, tc.exit)
				}
			} else {
				o = h.ev.waitFor(t, "terminated", func(o Observed) bool { return o.Terminated })
				if tt := statusOf(o, "app").State.Terminated; tt == nil || tt.ExitCode != tc.exit {
					t.Errorf("app state %+v, want terminated with %d", statusOf(o, "app").State, tc.exit)
				}
				if _, ready, _ := cri.counts(); ready != 0 {
					t.Errorf("%d ready sandboxes after the pod finished, want its sandbox stopped", ready)
				}
				if !h.m.Known(pod.UID) {
					t.Errorf("a finished pod that is still wanted lost its worker")
				}
			}
			if o.Status.Phase != tc.wantPhase || o.Terminated != tc.wantTerminated {
				t.Errorf("phase %s terminated %v, want %s %v", o.Status.Phase, o.Terminated, tc.wantPhase, tc.wantTerminated)
			}
			wantCreates := 1
			if tc.wantRestart {
				wantCreates = 2
			}
			if got := cri.callsOf("CreateContainer"); len(got) != wantCreates {
				t.Errorf("created %v, want %d instances", got, wantCreates)
			}
			if got := cri.callsOf("RunPodSandbox"); len(got) != 1 {
				t.Errorf("sandboxes %v, want one", got)
			}
		})
	}
}

// newest is the ID of the named container's newest instance, and its sandbox's attempt.
func (f *memCRI) newest(name string) (id string, sandboxAttempt uint32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var at int64
	for _, c := range f.containers {
		if c.cfg.GetMetadata().GetName() == name && c.created > at {
			id, at = c.id, c.created
			sandboxAttempt = f.sandboxes[c.sandboxID].cfg.GetMetadata().GetAttempt()
		}
	}
	return id, sandboxAttempt
}

// loseSandbox makes the pod's ready sandbox not ready, as containerd reports one whose
// task it lost across its own restart; its containers stay as they were.
func (f *memCRI) loseSandbox(t *testing.T) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, sb := range f.sandboxes {
		if sb.ready {
			sb.ready = false
			return
		}
	}
	t.Fatal("no ready sandbox")
}

// A restartPolicy Never pod whose init container failed has failed: a podsync that finds it
// with its sandbox stopped (the podsync before it ended the pod and was killed before the
// status reached the API) ends it Failed too, and does not run it again in a new sandbox
// (fault run 18: churn-00060's init container ran again after containerd lost its exit).
// The kubelet makes no new sandbox for such a pod either.
func TestSyncANeverPodWhoseInitFailedGetsNoNewSandbox(t *testing.T) {
	cri := newMemCRI("busybox:1")
	h := newHarness(t, cri)
	pod := syncPod(corev1.RestartPolicyNever, []string{"init"}, "app")
	h.m.Update(pod.DeepCopy(), "api")
	h.ev.waitFor(t, "init running", func(o Observed) bool { return isRunning(o, "init") })
	cri.exit(t, "init", 255)
	h.m.Trigger(pod.UID)
	h.ev.waitFor(t, "the pod Failed and its sandbox stopped", func(o Observed) bool {
		_, ready, _ := cri.counts()
		return o.Terminated && o.Status.Phase == corev1.PodFailed && ready == 0
	})
	h.stop()

	// The next podsync: the API still has the pod's status from before.
	h2 := newHarness(t, cri)
	h2.m.Update(pod.DeepCopy(), "api")
	o := h2.ev.waitFor(t, "the pod Failed again", func(o Observed) bool { return o.Terminated })
	if o.Status.Phase != corev1.PodFailed {
		t.Errorf("phase %s, want Failed", o.Status.Phase)
	}
	if got := cri.callsOf("RunPodSandbox"); len(got) != 1 {
		t.Errorf("sandboxes %v, want the first one only", got)
	}
	if got := cri.callsOf("CreateContainer"); !slices.Equal(got, []string{"init attempt=0"}) {
		t.Errorf("created %v, want init once", got)
	}
}

// A running pod whose sandbox the runtime loses gets a new one, and its containers' restart
// counts go on from the instances of the old sandbox, as the kubelet's do: each new
// instance is one attempt more than the newest before, and no status the pod reports in
// between goes backwards (its restart counts lower, or Pending after Running while init
// containers run again in the new sandbox; unitlet is stricter there than the kubelet,
// whose phase falls back to Pending).
func TestSyncANewSandboxKeepsRestartCountsAndThePhase(t *testing.T) {
	for _, tc := range []struct {
		name       string
		inits      []string
		wantCreate []string
	}{
		{"no init containers", nil, []string{"app attempt=0", "app attempt=1", "app attempt=2"}},
		{"an init container", []string{"init"}, []string{"init attempt=0", "app attempt=0", "app attempt=1", "init attempt=1", "app attempt=2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cri := newMemCRI("busybox:1")
			h := newHarness(t, cri)
			pod := syncPod(corev1.RestartPolicyAlways, tc.inits, "app")
			h.m.Update(pod, "api")
			if tc.inits != nil {
				h.ev.waitFor(t, "init running", func(o Observed) bool { return isRunning(o, "init") })
				cri.exit(t, "init", 0)
				h.m.Trigger(pod.UID)
			}
			h.ev.waitFor(t, "app running", func(o Observed) bool { return isRunning(o, "app") })
			cri.exit(t, "app", 1)
			h.m.Trigger(pod.UID)
			h.ev.waitFor(t, "app running again", func(o Observed) bool {
				return isRunning(o, "app") && statusOf(o, "app").RestartCount == 1
			})

			cri.loseSandbox(t)
			h.m.Trigger(pod.UID)
			if tc.inits != nil {
				h.ev.waitFor(t, "init running in the new sandbox", func(o Observed) bool {
					return isRunning(o, "init") && slices.Equal(cri.callsOf("StartContainer"), []string{"init", "app", "app", "init"})
				})
				cri.exit(t, "init", 0)
				h.m.Trigger(pod.UID)
			}
			o := h.ev.waitFor(t, "app running in the new sandbox", func(o Observed) bool {
				id, sbAttempt := cri.newest("app")
				return isRunning(o, "app") && statusOf(o, "app").ContainerID == "containerd://"+id && sbAttempt == 1
			})
			if got := statusOf(o, "app").RestartCount; got != 2 {
				t.Errorf("app restartCount %d in the new sandbox, want 2", got)
			}
			if got := cri.callsOf("CreateContainer"); !slices.Equal(got, tc.wantCreate) {
				t.Errorf("created %v, want %v", got, tc.wantCreate)
			}
			if got := cri.callsOf("RunPodSandbox"); !slices.Equal(got, []string{"web attempt=0", "web attempt=1"}) {
				t.Errorf("sandboxes %v, want attempts 0 and 1", got)
			}
			h.ev.mu.Lock()
			defer h.ev.mu.Unlock()
			wasRunning, restarts := false, map[string]int32{}
			for _, r := range h.ev.reports {
				if wasRunning && r.Status.Phase == corev1.PodPending {
					t.Errorf("phase Pending after Running: %s", describe(r.Status))
				}
				wasRunning = wasRunning || r.Status.Phase == corev1.PodRunning
				for _, cs := range append(append([]corev1.ContainerStatus{}, r.Status.InitContainerStatuses...), r.Status.ContainerStatuses...) {
					if cs.RestartCount < restarts[cs.Name] {
						t.Errorf("%s restartCount %d after %d: %s", cs.Name, cs.RestartCount, restarts[cs.Name], describe(r.Status))
					}
					restarts[cs.Name] = max(restarts[cs.Name], cs.RestartCount)
				}
			}
		})
	}
}

func TestSyncStartsAgainAtOnceAStartTheRuntimeAbandoned(t *testing.T) {
	for _, policy := range []corev1.RestartPolicy{corev1.RestartPolicyNever, corev1.RestartPolicyOnFailure, corev1.RestartPolicyAlways} {
		t.Run(string(policy), func(t *testing.T) {
			cri := newMemCRI("busybox:1")
			cri.abandon = map[string]int{"init": 2, "app": 1}
			h := newHarness(t, cri)
			pod := syncPod(policy, []string{"init"}, "app")
			// Each abandoned start is found by the next sync, as a restarted podsync finds it.
			h.m.Update(pod, "api")
			h.ev.waitFor(t, "init's start failed", func(o Observed) bool {
				return statusOf(o, "init").State.Waiting != nil && statusOf(o, "init").State.Waiting.Reason == "RunContainerError"
			})
			h.m.Trigger(pod.UID)
			h.ev.waitFor(t, "init's second start failed", func(o Observed) bool {
				return statusOf(o, "init").RestartCount == 1 && statusOf(o, "init").State.Waiting != nil
			})
			h.m.Trigger(pod.UID)
			h.ev.waitFor(t, "init running", func(o Observed) bool { return isRunning(o, "init") })
			cri.exit(t, "init", 0)
			h.m.Trigger(pod.UID)
			h.ev.waitFor(t, "app's start failed", func(o Observed) bool {
				return statusOf(o, "app").State.Waiting != nil && statusOf(o, "app").State.Waiting.Reason == "RunContainerError"
			})
			h.m.Trigger(pod.UID)
			o := h.ev.waitFor(t, "app running", func(o Observed) bool { return isRunning(o, "app") })
			if o.Status.Phase != corev1.PodRunning {
				t.Errorf("phase %s, want Running", o.Status.Phase)
			}
			if got := cri.callsOf("CreateContainer"); len(got) != 5 {
				t.Errorf("created %v, want init three times and app twice (the abandoned starts, then a start)", got)
			}
			if init := statusOf(o, "init"); init.RestartCount != 2 || init.LastTerminationState.Terminated != nil || init.State.Terminated == nil || init.State.Terminated.ExitCode != 0 {
				t.Errorf("init status %+v, want restart count 2, exited 0, no lastState", init)
			}
			app := statusOf(o, "app")
			if app.RestartCount != 1 || app.LastTerminationState.Terminated != nil {
				t.Errorf("app status %+v, want restart count 1 and no lastState (the abandoned start never ran)", app)
			}
			if !h.ev.hasEvent("StartAbandoned: The runtime abandoned the start of container app") {
				t.Errorf("events %v, want one saying the app container's start was abandoned", h.ev.recorded)
			}
			if h.ev.hasEvent("BackOff") {
				t.Errorf("events %v: an abandoned start is not the workload's failure", h.ev.recorded)
			}
		})
	}
}

// containerd killed during StartContainer: the call fails Unavailable and, back, containerd
// has the container in the unknown state (1.6: its task was being created); stopped, it
// is exited with no start time. Its start stays in the journal, so a podsync that restarts
// after stopping it, and has forgotten doing so, still knows that instance never ran: it
// is removed and started afresh, and a pod under restartPolicy Never does not fail.
func TestSyncAStartTheRuntimeLostIsStartedAfresh(t *testing.T) {
	cri := newMemCRI("busybox:1")
	cri.startLost = map[string]int{"app": 1}
	stateDir := t.TempDir()
	journal := startJournal{dir: filepath.Join(stateDir, "starting")}
	pod := syncPod(corev1.RestartPolicyNever, nil, "app")

	// The first podsync: the start is lost, and the instance is stopped (unknown state);
	// this podsync ends before it syncs the pod again.
	h := newHarnessOpts(t, cri, func(o *Options) { o.StateDir = stateDir })
	h.m.Update(pod, "api")
	h.ev.waitFor(t, "the failed start reported", func(o Observed) bool {
		return statusOf(o, "app").State.Waiting != nil && statusOf(o, "app").State.Waiting.Reason == "RunContainerError"
	})
	h.stop()
	lost, _ := cri.newest("app")
	if !journal.interrupted(lost) {
		t.Fatalf("the start journal does not name %s after its start failed Unavailable", lost)
	}
	if _, err := cri.StopContainer(context.Background(), &runtimeapi.StopContainerRequest{ContainerId: lost}); err != nil {
		t.Fatal(err)
	}

	// The next podsync.
	h = newHarnessOpts(t, cri, func(o *Options) { o.StateDir = stateDir })
	h.m.Update(pod, "api")
	o := h.ev.waitFor(t, "app running", func(o Observed) bool { return isRunning(o, "app") })
	if o.Status.Phase != corev1.PodRunning || statusOf(o, "app").RestartCount != 0 {
		t.Errorf("phase %s, app %+v; want Running, restart count 0 (the lost start never ran)", o.Status.Phase, statusOf(o, "app"))
	}
	if got := cri.callsOf("RemoveContainer"); !slices.Equal(got, []string{"app"}) {
		t.Errorf("RemoveContainer calls %v, want the lost instance removed", got)
	}
	if got := cri.callsOf("CreateContainer"); !slices.Equal(got, []string{"app attempt=0", "app attempt=0"}) {
		t.Errorf("created %v, want app attempt 0 twice", got)
	}
	if journal.interrupted(lost) {
		t.Errorf("the start journal still names %s", lost)
	}
	h.ev.mu.Lock()
	defer h.ev.mu.Unlock()
	for _, r := range h.ev.reports {
		if r.Status.Phase == corev1.PodFailed {
			t.Errorf("the pod reported Failed: %s", describe(r.Status))
		}
	}
}

// A podsync killed during StartContainer on containerd 2.x: after its restart the start
// journal names the container, the runtime has it exited (StartError, context canceled)
// and refuses to remove it. The pod still gets its container, at once.
func TestSyncStartsBesideAnAbandonedStartTheRuntimeKeeps(t *testing.T) {
	cri := newMemCRI("busybox:1")
	stateDir := t.TempDir()
	pod := syncPod(corev1.RestartPolicyAlways, nil, "app")
	cri.seed(t, pod, nil)
	cri.mu.Lock()
	var id string
	for _, c := range cri.containers {
		id = c.id
		c.state, c.exitCode, c.started, c.finished = runtimeapi.ContainerState_CONTAINER_EXITED, 128, time.Time{}, time.Now()
		c.reason, c.message = "StartError", "failed to create containerd task: failed to get task pid: context canceled"
	}
	cri.unremovable = map[string]bool{id: true}
	cri.mu.Unlock()
	journal := startJournal{dir: filepath.Join(stateDir, "starting")}
	if err := journal.begin(id); err != nil {
		t.Fatal(err)
	}

	h := newHarnessOpts(t, cri, func(o *Options) { o.StateDir = stateDir })
	h.m.Update(pod, "api")
	o := h.ev.waitFor(t, "app running", func(o Observed) bool { return isRunning(o, "app") })
	if app := statusOf(o, "app"); app.RestartCount != 1 || app.LastTerminationState.Terminated != nil {
		t.Errorf("app status %+v, want restart count 1 and no lastState", app)
	}
	if got := cri.callsOf("RemoveContainer"); len(got) != 1 {
		t.Errorf("RemoveContainer calls %v, want one try", got)
	}
	if journal.interrupted(id) {
		t.Errorf("the start journal still names %s", id)
	}
	if h.ev.hasEvent("BackOff") {
		t.Errorf("events %v: an abandoned start is not the workload's failure", h.ev.recorded)
	}
	// Later syncs leave the kept instance alone.
	h.m.Trigger(pod.UID)
	h.ev.waitFor(t, "a later sync", func(o Observed) bool { return isRunning(o, "app") })
	if got := cri.callsOf("RemoveContainer"); len(got) != 1 {
		t.Errorf("RemoveContainer calls %v after another sync, want still one", got)
	}
}

func TestSyncCrashLoopBackOff(t *testing.T) {
	cri := newMemCRI("busybox:1")
	h := newHarness(t, cri)
	pod := syncPod(corev1.RestartPolicyAlways, nil, "app")
	h.m.Update(pod, "api")
	h.ev.waitFor(t, "app running", func(o Observed) bool { return isRunning(o, "app") })

	cri.exit(t, "app", 1)
	h.m.Trigger(pod.UID)
	h.ev.waitFor(t, "the first restart, at once", func(o Observed) bool { return isRunning(o, "app") && statusOf(o, "app").RestartCount == 1 })

	cri.exit(t, "app", 1)
	h.m.Trigger(pod.UID)
	o := h.ev.waitFor(t, "CrashLoopBackOff", func(o Observed) bool {
		w := statusOf(o, "app").State.Waiting
		return w != nil && w.Reason == "CrashLoopBackOff"
	})
	cs := statusOf(o, "app")
	if !strings.Contains(cs.State.Waiting.Message, "back-off 10s restarting failed container=app") {
		t.Errorf("waiting message %q, want the 10 s back-off", cs.State.Waiting.Message)
	}
	if lt := cs.LastTerminationState.Terminated; lt == nil || lt.ExitCode != 1 || cs.RestartCount != 1 {
		t.Errorf("restartCount %d lastState %+v, want 1 and the exit with 1", cs.RestartCount, lt)
	}
	if o.Status.Phase != corev1.PodRunning {
		t.Errorf("phase %s, want Running while it restarts", o.Status.Phase)
	}
	if got := cri.callsOf("CreateContainer"); len(got) != 2 {
		t.Errorf("created %v, want 2 instances: none during the back-off", got)
	}
	if !h.ev.hasEvent("BackOff: Back-off restarting failed container app") {
		t.Errorf("no BackOff event")
	}
}

// A crash-looping pod that is removed leaves no backoff behind: under churn the entries
// of gone pods would otherwise pile up in podsync's memory.
func TestSyncForgetsTheBackoffOfARemovedPod(t *testing.T) {
	cri := newMemCRI("busybox:1")
	h := newHarness(t, cri)
	pod := syncPod(corev1.RestartPolicyAlways, nil, "app")
	h.m.Update(pod, "api")
	h.ev.waitFor(t, "app running", func(o Observed) bool { return isRunning(o, "app") })
	cri.exit(t, "app", 1)
	h.m.Trigger(pod.UID)
	h.ev.waitFor(t, "the first restart", func(o Observed) bool { return isRunning(o, "app") && statusOf(o, "app").RestartCount == 1 })
	key := backoffKey(pod, &pod.Spec.Containers[0])
	if h.m.backoff.Get(key) == 0 {
		t.Fatalf("no backoff for %s after a restart", key)
	}
	if !h.m.Terminate(pod.UID, nil, "", "") {
		t.Fatal("Terminate of a known pod returned false")
	}
	h.ev.waitFor(t, "removed", func(o Observed) bool { return o.Removed })
	if d := h.m.backoff.Get(key); d != 0 {
		t.Errorf("backoff %s of the removed pod's container kept", d)
	}
}

// TestSyncCrashLoopBackOffIgnoresWallClockSteps: the backoff runs on podsync's clock (the
// fake clock here stands for Go's monotonic one), not on the runtime's FinishedAt, a
// reading of the node's wall clock. Once the exit has been seen, a step of the wall clock
// changes every later "now − FinishedAt" by the step: the same as FinishedAt moving the
// other way, which is what the test does to the runtime's record. A step back must not
// stretch the backoff, a step forward must not end it early.
func TestSyncCrashLoopBackOffIgnoresWallClockSteps(t *testing.T) {
	cri := newMemCRI("busybox:1")
	clk := clocktesting.NewFakeClock(time.Now())
	h := newHarnessOpts(t, cri, func(o *Options) { o.Clock = clk })
	pod := syncPod(corev1.RestartPolicyAlways, nil, "app")
	h.m.Update(pod, "api")
	h.ev.waitFor(t, "app running", func(o Observed) bool { return isRunning(o, "app") })
	cri.exitAt(t, "app", 1, clk.Now())
	h.m.Trigger(pod.UID)
	h.ev.waitFor(t, "the first restart, at once", func(o Observed) bool { return isRunning(o, "app") && statusOf(o, "app").RestartCount == 1 })

	// A crash, seen: 10 s of backoff. Then the wall clock steps back 2 minutes.
	cri.exitAt(t, "app", 1, clk.Now())
	h.m.Trigger(pod.UID)
	waitBackOff(t, h, "10s", 1)
	cri.shiftFinished(t, "app", 2*time.Minute)
	// The backoff still ends 10 s after the exit on podsync's clock, at the worker's timer.
	waitTimer(t, clk)
	clk.Step(10 * time.Second)
	h.ev.waitFor(t, "the second restart, 10 s after the exit", func(o Observed) bool {
		return isRunning(o, "app") && statusOf(o, "app").RestartCount == 2
	})

	// A crash, seen: 20 s of backoff. Then the wall clock steps forward a minute; syncs
	// after it still wait.
	cri.exitAt(t, "app", 1, clk.Now())
	h.m.Trigger(pod.UID)
	waitBackOff(t, h, "20s", 2)
	cri.shiftFinished(t, "app", -time.Minute)
	waitTimer(t, clk)
	clk.Step(5 * time.Second)
	backoffs := h.ev.count("BackOff: ")
	h.m.Trigger(pod.UID)
	for h.ev.count("BackOff: ") == backoffs {
		time.Sleep(2 * time.Millisecond) // the sync after the step, still in backoff
	}
	if got := cri.callsOf("CreateContainer"); len(got) != 3 {
		t.Errorf("created %v after a step forward 5 s into a 20 s backoff, want 3 instances: none before it ends", got)
	}
	waitTimer(t, clk)
	clk.Step(15 * time.Second)
	h.ev.waitFor(t, "the third restart, 20 s after the exit", func(o Observed) bool {
		return isRunning(o, "app") && statusOf(o, "app").RestartCount == 3
	})

	// The wall clock steps forward a minute between the start and the exit, before any
	// sync saw the exit: the exit counts from the start at the earliest, so the 40 s
	// backoff still runs.
	cri.exitAt(t, "app", 1, clk.Now().Add(-time.Minute))
	h.m.Trigger(pod.UID)
	waitBackOff(t, h, "40s", 3)
	if got := cri.callsOf("CreateContainer"); len(got) != 4 {
		t.Errorf("created %v after an exit stamped before a step forward, want 4 instances: none before its backoff ends", got)
	}
	waitTimer(t, clk)
	clk.Step(40 * time.Second)
	h.ev.waitFor(t, "the fourth restart, 40 s after the start", func(o Observed) bool {
		return isRunning(o, "app") && statusOf(o, "app").RestartCount == 4
	})
}

// waitTimer waits until the worker's timer is set on the fake clock.
func waitTimer(t *testing.T, clk *clocktesting.FakeClock) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !clk.HasWaiters() {
		if time.Now().After(deadline) {
			t.Fatal("the worker set no timer")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// waitBackOff waits for the report of app in CrashLoopBackOff for d after restarts.
func waitBackOff(t *testing.T, h *harness, d string, restarts int32) {
	t.Helper()
	h.ev.waitFor(t, "CrashLoopBackOff "+d, func(o Observed) bool {
		cs := statusOf(o, "app")
		return cs.RestartCount == restarts && cs.State.Waiting != nil && cs.State.Waiting.Reason == "CrashLoopBackOff" &&
			strings.Contains(cs.State.Waiting.Message, "back-off "+d+" ")
	})
}

func TestSyncImageNeverPull(t *testing.T) {
	cri := newMemCRI("present:1")
	h := newHarness(t, cri)
	pod := syncPod(corev1.RestartPolicyAlways, nil, "app", "ok")
	pod.Spec.Containers[0].Image, pod.Spec.Containers[0].ImagePullPolicy = "missing:1", corev1.PullNever
	pod.Spec.Containers[1].Image = "present:1"
	h.m.Update(pod, "api")
	o := h.ev.waitFor(t, "ErrImageNeverPull", func(o Observed) bool {
		w := statusOf(o, "app").State.Waiting
		return w != nil && w.Reason == "ErrImageNeverPull" && isRunning(o, "ok")
	})
	if msg := statusOf(o, "app").State.Waiting.Message; msg != `Container image "missing:1" is not present with pull policy of Never` {
		t.Errorf("waiting message %q", msg)
	}
	if o.Status.Phase != corev1.PodPending {
		t.Errorf("phase %s, want Pending", o.Status.Phase)
	}
	if got := cri.callsOf("CreateContainer"); !slices.Equal(got, []string{"ok attempt=0"}) {
		t.Errorf("created %v, want only the container with its image", got)
	}
	if got := cri.callsOf("PullImage"); got != nil {
		t.Errorf("pulled %v with pull policy Never", got)
	}
}

func TestSyncPullsMissingImage(t *testing.T) {
	cri := newMemCRI()
	h := newHarness(t, cri)
	pod := syncPod(corev1.RestartPolicyAlways, nil, "app")
	h.m.Update(pod, "api")
	h.ev.waitFor(t, "app running", func(o Observed) bool { return isRunning(o, "app") })
	if got := cri.callsOf("PullImage"); !slices.Equal(got, []string{"busybox:1"}) {
		t.Errorf("pulled %v, want busybox:1 once", got)
	}
}

func TestTerminateStopsWithGraceAndRemoves(t *testing.T) {
	seven, three, zero, one := int64(7), int64(3), int64(0), int64(1)
	for _, tc := range []struct {
		name      string
		podGrace  *int64
		override  *int64
		wantGrace int64
	}{
		{"the pod's grace", &seven, nil, 7},
		{"no grace set: 30 s", nil, nil, 30},
		{"an override", &seven, &three, 3},
		{"override 0: at once", &seven, &zero, 0},
		{"under the minimum: 2 s", &one, nil, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cri := newMemCRI("busybox:1")
			h := newHarness(t, cri)
			// One container: killPod stops several in parallel goroutines, each of which
			// writes worker.acted (kill.go), a data race under -race.
			pod := syncPod(corev1.RestartPolicyAlways, nil, "app")
			pod.Spec.TerminationGracePeriodSeconds = tc.podGrace
			h.m.Update(pod, "api")
			h.ev.waitFor(t, "running", func(o Observed) bool { return isRunning(o, "app") })

			if !h.m.Terminate(pod.UID, tc.override, "", "") {
				t.Fatalf("Terminate of a known pod returned false")
			}
			o := h.ev.waitFor(t, "removed", func(o Observed) bool { return o.Removed })
			if !o.Terminated || !o.Terminating {
				t.Errorf("the last report: terminating %v terminated %v, want both", o.Terminating, o.Terminated)
			}
			stops := cri.callsOf("StopContainer")
			want := []string{fmt.Sprintf("app timeout=%d", tc.wantGrace)}
			if !slices.Equal(stops, want) {
				t.Errorf("stops %v, want %v", stops, want)
			}
			if sbs, _, cs := cri.counts(); sbs != 0 || cs != 0 {
				t.Errorf("%d sandboxes and %d containers left, want everything removed", sbs, cs)
			}
			if len(cri.callsOf("StopPodSandbox")) != 1 {
				t.Errorf("sandbox stops %v, want one", cri.callsOf("StopPodSandbox"))
			}
			waitUntil(t, func() bool { return !h.m.Known(pod.UID) })
			if h.m.Terminate(pod.UID, nil, "", "") {
				t.Errorf("Terminate of a forgotten pod returned true")
			}
		})
	}
}

func TestKillEndsPodFailedWithReason(t *testing.T) {
	cri := newMemCRI("busybox:1")
	h := newHarness(t, cri)
	pod := syncPod(corev1.RestartPolicyAlways, nil, "app")
	h.m.Update(pod, "api")
	h.ev.waitFor(t, "running", func(o Observed) bool { return isRunning(o, "app") })
	h.m.Kill(pod.UID, nil, "Evicted", "The node was low on resource: memory.")
	o := h.ev.waitFor(t, "terminated", func(o Observed) bool { return o.Terminated })
	if o.Status.Phase != corev1.PodFailed || o.Status.Reason != "Evicted" || o.Removed {
		t.Errorf("phase %s reason %q removed %v, want Failed Evicted, kept", o.Status.Phase, o.Status.Reason, o.Removed)
	}
	if !h.m.Known(pod.UID) {
		t.Errorf("a killed pod that is still wanted lost its worker")
	}
	if _, _, cs := cri.counts(); cs != 1 {
		t.Errorf("%d containers, want the killed one kept (not removed)", cs)
	}
}

func TestSyncRestartsContainerWithChangedHash(t *testing.T) {
	cri := newMemCRI("busybox:1")
	pod := syncPod(corev1.RestartPolicyAlways, nil, "app", "side")
	cri.seed(t, pod, func(a map[string]string) {
		if a != nil {
			a[criconfig.AnnotationContainerHash] = "1" // not the spec's hash
		}
	})
	// Only app's hash is wrong: fix side's.
	cri.mu.Lock()
	for _, c := range cri.containers {
		if c.cfg.GetMetadata().GetName() == "side" {
			c.cfg.Annotations[criconfig.AnnotationContainerHash] = strconv.FormatUint(criconfig.Hash(&pod.Spec.Containers[1]), 16)
		}
	}
	cri.mu.Unlock()

	h := newHarness(t, cri)
	h.m.Update(pod, "api")
	o := h.ev.waitFor(t, "app restarted", func(o Observed) bool {
		return isRunning(o, "app") && statusOf(o, "app").RestartCount == 1
	})
	if got := cri.callsOf("StopContainer"); len(got) != 1 || !strings.HasPrefix(got[0], "app ") {
		t.Errorf("stops %v, want app only", got)
	}
	if got := cri.callsOf("CreateContainer"); !slices.Equal(got, []string{"app attempt=1"}) {
		t.Errorf("created %v, want app attempt 1", got)
	}
	if got := cri.callsOf("RunPodSandbox"); got != nil {
		t.Errorf("ran sandboxes %v, want the existing one used", got)
	}
	if !isRunning(o, "side") || statusOf(o, "side").RestartCount != 0 {
		t.Errorf("side: %+v, want left running", statusOf(o, "side"))
	}
	if !h.ev.hasEvent("Killing: Container app definition changed, will be restarted") {
		t.Errorf("no Killing event for the changed definition")
	}
}

func TestSyncAdoptsRunningContainers(t *testing.T) {
	cri := newMemCRI("busybox:1")
	pod := syncPod(corev1.RestartPolicyAlways, nil, "app", "side")
	cri.seed(t, pod, nil)
	h := newHarness(t, cri)
	h.m.Update(pod, "api")
	o := h.ev.waitFor(t, "running", func(o Observed) bool { return o.Status.Phase == corev1.PodRunning })
	if !isRunning(o, "app") || !isRunning(o, "side") || statusOf(o, "app").RestartCount != 0 {
		t.Errorf("status %s, want both running, no restarts", describe(o.Status))
	}
	h.m.Trigger(pod.UID)
	time.Sleep(50 * time.Millisecond)
	for _, m := range []string{"RunPodSandbox", "CreateContainer", "StopContainer", "StopPodSandbox", "RemoveContainer"} {
		if got := cri.callsOf(m); got != nil {
			t.Errorf("%s %v on a pod that already runs as specified", m, got)
		}
	}
	if got := cri.runningNames(); !slices.Equal(got, []string{"app", "side"}) {
		t.Errorf("running %v", got)
	}
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met in 10s")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// failingView is a memCRI whose Inspect fails while fail is set, as the runtime answers
// while it restarts ("server is not initialized yet").
type failingView struct {
	*memCRI
	fail atomic.Bool
}

func (f *failingView) Inspect(ctx context.Context, uid types.UID) (*relist.Pod, error) {
	if f.fail.Load() {
		return nil, errors.New("rpc error: code = Unknown desc = server is not initialized yet")
	}
	return f.memCRI.Inspect(ctx, uid)
}

// While the runtime cannot be read, a running pod's syncs (and a deleted pod's) report
// nothing: before, they reported a status built from no containers, Pending, and the API
// saw running pods go back to Pending while containerd restarted. Once the runtime
// answers again, the pod is reported as it is.
func TestSyncReportsNothingWhileTheRuntimeCannotBeRead(t *testing.T) {
	cri := newMemCRI("busybox:1")
	view := &failingView{memCRI: cri}
	h := newHarnessOpts(t, cri, func(o *Options) { o.View = view })
	pod := syncPod(corev1.RestartPolicyAlways, nil, "app")
	h.m.Update(pod, "api")
	h.ev.waitFor(t, "the pod running", func(o Observed) bool { return o.Status.Phase == corev1.PodRunning })

	view.fail.Store(true)
	h.ev.mu.Lock()
	before := len(h.ev.reports)
	h.ev.mu.Unlock()
	for range 3 {
		h.m.Trigger(pod.UID)
		time.Sleep(20 * time.Millisecond)
	}
	deleted := pod.DeepCopy()
	deleted.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	deleted.DeletionGracePeriodSeconds = ptr.To[int64](0)
	h.m.Update(deleted, "api")
	time.Sleep(50 * time.Millisecond)
	h.ev.mu.Lock()
	for _, o := range h.ev.reports[before:] {
		if o.Status.Phase != corev1.PodRunning && !o.Terminating {
			t.Errorf("while the runtime could not be read: reported %s", describe(o.Status))
		}
		if o.Status.Phase == corev1.PodPending {
			t.Errorf("while the runtime could not be read: a running pod reported Pending (%s)", describe(o.Status))
		}
	}
	h.ev.mu.Unlock()

	view.fail.Store(false)
	h.m.Trigger(pod.UID)
	h.ev.waitFor(t, "the deleted pod's containers stopped", func(o Observed) bool {
		return o.Terminating && statusOf(o, "app").State.Terminated != nil
	})
}
