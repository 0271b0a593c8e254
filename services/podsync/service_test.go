package podsync

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	podsyncv1 "github.com/unitlet/unitlet/proto/unitlet/podsync/v1"
	"github.com/unitlet/unitlet/services/podsync/admission"
	"github.com/unitlet/unitlet/services/podsync/criconfig"
	"github.com/unitlet/unitlet/services/podsync/nodeshutdown"
	"github.com/unitlet/unitlet/services/podsync/podworker"
	"github.com/unitlet/unitlet/services/podsync/relist"
)

// fakeCRI is a small in-memory CRI runtime that is also the workers' view of it. Every
// image is present.
type fakeCRI struct {
	mu         sync.Mutex
	seq        int64
	sandboxes  map[string]*runtimeapi.PodSandboxConfig
	sbReady    map[string]bool
	sbCreated  map[string]int64
	containers map[string]*fakeCtr
	// unseen are sandboxes and containers the workers' view does not show, so that their
	// own pruning of dead instances does not race a test of disk reclaim.
	unseen map[string]bool
}

type fakeCtr struct {
	sandboxID string
	cfg       *runtimeapi.ContainerConfig
	state     runtimeapi.ContainerState
	created   int64
}

func newFakeCRI() *fakeCRI {
	return &fakeCRI{sandboxes: map[string]*runtimeapi.PodSandboxConfig{}, sbReady: map[string]bool{}, sbCreated: map[string]int64{}, containers: map[string]*fakeCtr{}, unseen: map[string]bool{}}
}

func (f *fakeCRI) RunPodSandbox(_ context.Context, in *runtimeapi.RunPodSandboxRequest, _ ...grpc.CallOption) (*runtimeapi.RunPodSandboxResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seq++
	id := fmt.Sprintf("sb%d", f.seq)
	f.sandboxes[id], f.sbReady[id], f.sbCreated[id] = in.Config, true, f.seq
	return &runtimeapi.RunPodSandboxResponse{PodSandboxId: id}, nil
}

func (f *fakeCRI) StopPodSandbox(_ context.Context, in *runtimeapi.StopPodSandboxRequest, _ ...grpc.CallOption) (*runtimeapi.StopPodSandboxResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sbReady[in.PodSandboxId] = false
	return &runtimeapi.StopPodSandboxResponse{}, nil
}

func (f *fakeCRI) RemovePodSandbox(_ context.Context, in *runtimeapi.RemovePodSandboxRequest, _ ...grpc.CallOption) (*runtimeapi.RemovePodSandboxResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.sandboxes, in.PodSandboxId)
	delete(f.sbReady, in.PodSandboxId)
	delete(f.sbCreated, in.PodSandboxId)
	return &runtimeapi.RemovePodSandboxResponse{}, nil
}

func (f *fakeCRI) PodSandboxStatus(_ context.Context, in *runtimeapi.PodSandboxStatusRequest, _ ...grpc.CallOption) (*runtimeapi.PodSandboxStatusResponse, error) {
	return &runtimeapi.PodSandboxStatusResponse{Status: &runtimeapi.PodSandboxStatus{Id: in.PodSandboxId, Network: &runtimeapi.PodSandboxNetworkStatus{Ip: "10.0.0.2"}}}, nil
}

func (f *fakeCRI) CreateContainer(_ context.Context, in *runtimeapi.CreateContainerRequest, _ ...grpc.CallOption) (*runtimeapi.CreateContainerResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seq++
	id := fmt.Sprintf("c%d", f.seq)
	f.containers[id] = &fakeCtr{sandboxID: in.PodSandboxId, cfg: in.Config, state: runtimeapi.ContainerState_CONTAINER_CREATED, created: f.seq}
	return &runtimeapi.CreateContainerResponse{ContainerId: id}, nil
}

func (f *fakeCRI) setState(id string, st runtimeapi.ContainerState) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.containers[id]
	if c == nil {
		return fmt.Errorf("container %s not found", id)
	}
	c.state = st
	return nil
}

func (f *fakeCRI) StartContainer(_ context.Context, in *runtimeapi.StartContainerRequest, _ ...grpc.CallOption) (*runtimeapi.StartContainerResponse, error) {
	return &runtimeapi.StartContainerResponse{}, f.setState(in.ContainerId, runtimeapi.ContainerState_CONTAINER_RUNNING)
}

func (f *fakeCRI) StopContainer(_ context.Context, in *runtimeapi.StopContainerRequest, _ ...grpc.CallOption) (*runtimeapi.StopContainerResponse, error) {
	return &runtimeapi.StopContainerResponse{}, f.setState(in.ContainerId, runtimeapi.ContainerState_CONTAINER_EXITED)
}

func (f *fakeCRI) RemoveContainer(_ context.Context, in *runtimeapi.RemoveContainerRequest, _ ...grpc.CallOption) (*runtimeapi.RemoveContainerResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.containers, in.ContainerId)
	return &runtimeapi.RemoveContainerResponse{}, nil
}

func (f *fakeCRI) ImageStatus(_ context.Context, in *runtimeapi.ImageStatusRequest, _ ...grpc.CallOption) (*runtimeapi.ImageStatusResponse, error) {
	return &runtimeapi.ImageStatusResponse{Image: &runtimeapi.Image{Id: in.GetImage().GetImage()}}, nil
}

func (f *fakeCRI) PullImage(context.Context, *runtimeapi.PullImageRequest, ...grpc.CallOption) (*runtimeapi.PullImageResponse, error) {
	return &runtimeapi.PullImageResponse{}, nil
}

func (f *fakeCRI) UpdateContainerResources(context.Context, *runtimeapi.UpdateContainerResourcesRequest, ...grpc.CallOption) (*runtimeapi.UpdateContainerResourcesResponse, error) {
	return nil, fmt.Errorf("UpdateContainerResources: not in this fake")
}

func (f *fakeCRI) ContainerStats(context.Context, *runtimeapi.ContainerStatsRequest, ...grpc.CallOption) (*runtimeapi.ContainerStatsResponse, error) {
	return nil, fmt.Errorf("ContainerStats: not in this fake")
}

func (f *fakeCRI) ExecSync(context.Context, string, []string, time.Duration) ([]byte, []byte, int32, error) {
	return nil, nil, 0, nil
}

func (f *fakeCRI) Inspect(_ context.Context, uid types.UID) (*relist.Pod, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var p *relist.Pod
	get := func(l map[string]string) *relist.Pod {
		if p == nil {
			p = &relist.Pod{UID: uid, Name: l[criconfig.LabelPodName], Namespace: l[criconfig.LabelPodNamespace]}
		}
		return p
	}
	for id, cfg := range f.sandboxes {
		if cfg.Labels[criconfig.LabelPodUID] == string(uid) && !f.unseen[id] {
			get(cfg.Labels).Sandboxes = append(get(cfg.Labels).Sandboxes, &relist.Sandbox{ID: id, Ready: f.sbReady[id], IPs: []string{"10.0.0.2"}})
		}
	}
	var ids []string
	for id, c := range f.containers {
		if c.cfg.Labels[criconfig.LabelPodUID] == string(uid) && !f.unseen[id] {
			ids = append(ids, id)
		}
	}
	sort.Slice(ids, func(i, j int) bool { return f.containers[ids[i]].created > f.containers[ids[j]].created })
	for _, id := range ids {
		c := f.containers[id]
		get(c.cfg.Labels).Containers = append(get(c.cfg.Labels).Containers, &relist.Container{
			ID: id, Name: c.cfg.Labels[criconfig.LabelContainerName], Attempt: c.cfg.GetMetadata().GetAttempt(),
			SandboxID: c.sandboxID, State: c.state, CreatedAt: time.Unix(0, c.created),
			Labels: c.cfg.Labels, Annotations: c.cfg.Annotations,
		})
	}
	return p, nil
}

// podsOf is the names of the pods the runtime has anything of, sorted.
func (f *fakeCRI) podsOf() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	seen := map[string]bool{}
	for _, cfg := range f.sandboxes {
		seen[cfg.Metadata.Name] = true
	}
	for _, c := range f.containers {
		seen[c.cfg.Labels[criconfig.LabelPodName]] = true
	}
	var out []string
	for n := range seen {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// testNode is the node admission judges pods against, as the local view.
func testNode() (*corev1.Node, string) {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "node1"},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("4"),
			corev1.ResourceMemory: resource.MustParse("8Gi"),
			corev1.ResourcePods:   resource.MustParse("110"),
		}},
	}, viewLocal
}

func newPod(name string, created int64) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name), CreationTimestamp: metav1.NewTime(time.Unix(created, 0))},
		Spec: corev1.PodSpec{
			NodeName: "node1", RestartPolicy: corev1.RestartPolicyAlways,
			Containers: []corev1.Container{{Name: "app", Image: "busybox:1"}},
		},
	}
}

// eventLog records pod events.
type eventLog struct {
	mu     sync.Mutex
	events []string // "<pod> <type> <reason>: <message>"
}

func (e *eventLog) Event(pod *corev1.Pod, eventType, reason, message string) {
	e.mu.Lock()
	e.events = append(e.events, fmt.Sprintf("%s %s %s: %s", pod.Name, eventType, reason, message))
	e.mu.Unlock()
}

// of is the events of the named pod, without the pod's name.
func (e *eventLog) of(pod string) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, ev := range e.events {
		if rest, ok := strings.CutPrefix(ev, pod+" "); ok {
			out = append(out, rest)
		}
	}
	return out
}

type serviceFixture struct {
	s      *Service
	m      *podworker.Manager
	cri    *fakeCRI
	events *eventLog
	clk    *clocktesting.FakeClock
}

// newServiceFixture is a service whose workers run on a fakeCRI; set changes its options.
func newServiceFixture(t *testing.T, maxPods int, set ...func(*ServiceOptions)) *serviceFixture {
	t.Helper()
	return newServiceFixtureOn(t, newFakeCRI(), maxPods, set...)
}

// newServiceFixtureOn is newServiceFixture on a given runtime (one an earlier service ran
// pods on: a restarted podsync).
func newServiceFixtureOn(t *testing.T, cri *fakeCRI, maxPods int, set ...func(*ServiceOptions)) *serviceFixture {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	clk := clocktesting.NewFakeClock(time.Unix(1_000_000, 0))
	events := &eventLog{}
	o := ServiceOptions{Log: log, Clock: clk, Node: testNode, MaxPods: maxPods, SourcesWanted: []string{"api", "file"}, Events: events}
	for _, f := range set {
		f(&o)
	}
	s := NewService(o)
	m := podworker.NewManager(podworker.Options{
		Runtime: cri, View: cri,
		CRI:    criconfig.Options{PodLogsDir: t.TempDir()},
		Report: s.Report, Events: events,
		Clock: clk, Log: log, Resync: time.Hour,
	})
	s.Attach(m, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		_ = m.Run(ctx)
		close(done)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return &serviceFixture{s: s, m: m, cri: cri, events: events, clk: clk}
}

func podStatus(t *testing.T, p *podsyncv1.Pod) corev1.PodStatus {
	t.Helper()
	var st corev1.PodStatus
	if len(p.Status) > 0 {
		if err := json.Unmarshal(p.Status, &st); err != nil {
			t.Fatalf("pod %s status: %v", p.Name, err)
		}
	}
	return st
}

func listed(s *Service) map[string]*podsyncv1.Pod {
	pods, _ := s.List()
	out := map[string]*podsyncv1.Pod{}
	for _, p := range pods {
		out[p.Name] = p
	}
	return out
}

// waitListed waits until List satisfies cond.
func waitListed(t *testing.T, s *Service, what string, cond func(map[string]*podsyncv1.Pod) bool) map[string]*podsyncv1.Pod {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		l := listed(s)
		if cond(l) {
			return l
		}
		if time.Now().After(deadline) {
			var names []string
			for n, p := range l {
				names = append(names, fmt.Sprintf("%s(%s terminated=%v)", n, p.Source, p.Terminated))
			}
			t.Fatalf("List never had %s; has %v", what, names)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func running(t *testing.T, p *podsyncv1.Pod) bool {
	return p != nil && podStatus(t, p).Phase == corev1.PodRunning
}

func TestSetPodsMergesSources(t *testing.T) {
	f := newServiceFixture(t, 0)
	a, b, c := newPod("a", 1), newPod("b", 2), newPod("c", 3)
	f.s.SetPods("api", []*corev1.Pod{a, c})
	f.s.SetPods("file", []*corev1.Pod{b, c}) // c in both: one pod
	l := waitListed(t, f.s, "a, b and c running", func(l map[string]*podsyncv1.Pod) bool {
		return running(t, l["a"]) && running(t, l["b"]) && running(t, l["c"])
	})
	if len(l) != 3 {
		t.Errorf("listed %d pods, want 3", len(l))
	}
	if l["a"].Source != "api" || l["b"].Source != "file" {
		t.Errorf("sources a=%q b=%q, want api and file", l["a"].Source, l["b"].Source)
	}
	if got := f.cri.podsOf(); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("the runtime runs %v, want a, b, c", got)
	}
	if n := len(f.m.Pods()); n != 3 {
		t.Errorf("%d workers, want 3", n)
	}
	static, _, ok := f.s.StaticPods()
	if !ok || len(static) != 2 {
		t.Errorf("StaticPods = %d pods ok=%v, want the file source's 2 and ok", len(static), ok)
	}
}

func TestPodRemovedFromItsSourceIsTerminated(t *testing.T) {
	f := newServiceFixture(t, 0)
	a, b, c := newPod("a", 1), newPod("b", 2), newPod("c", 3)
	f.s.SetPods("api", []*corev1.Pod{a, b})
	f.s.SetPods("file", []*corev1.Pod{c})
	waitListed(t, f.s, "a, b and c running", func(l map[string]*podsyncv1.Pod) bool {
		return running(t, l["a"]) && running(t, l["b"]) && running(t, l["c"])
	})
	_, seq := f.s.List()
	_, sub := f.s.Subscribe(seq)
	defer sub.Close()

	f.s.SetPods("api", []*corev1.Pod{b})
	waitListed(t, f.s, "a gone", func(l map[string]*podsyncv1.Pod) bool { return l["a"] == nil })
	if got := f.cri.podsOf(); !slices.Equal(got, []string{"b", "c"}) {
		t.Errorf("the runtime has %v, want a removed", got)
	}
	if f.m.Known(a.UID) {
		t.Errorf("a still has a worker")
	}
	// Subscribers see it terminated, then removed.
	removed, terminated := false, false
	timeout := time.After(5 * time.Second)
	for !removed {
		select {
		case ev, ok := <-sub.Events():
			if !ok {
				t.Fatalf("subscription ended: %v", sub.Err())
			}
			for _, p := range ev.Value {
				if p.Name == "a" {
					removed = removed || p.Removed
					terminated = terminated || p.Terminated && !p.Removed
				}
				if p.Name != "a" && (p.Removed || p.Terminating) {
					t.Errorf("pod %s reported terminating=%v removed=%v", p.Name, p.Terminating, p.Removed)
				}
			}
		case <-timeout:
			t.Fatalf("no Removed event for a")
		}
	}
	if !terminated {
		t.Errorf("a was removed without a Terminated event first")
	}
}

func TestAdmissionRejection(t *testing.T) {
	for _, tc := range []struct {
		name       string
		maxPods    int
		pods       func() []*corev1.Pod
		rejected   string
		wantReason string
	}{
		{
			name:    "another node's pod",
			maxPods: 0,
			pods: func() []*corev1.Pod {
				p := newPod("elsewhere", 1)
				p.Spec.NodeName = "node2"
				return []*corev1.Pod{p}
			},
			rejected:   "elsewhere",
			wantReason: admission.ReasonNodeName,
		},
		{
			name:       "over maxPods: the newest is rejected",
			maxPods:    1,
			pods:       func() []*corev1.Pod { return []*corev1.Pod{newPod("second", 2), newPod("first", 1)} },
			rejected:   "second",
			wantReason: admission.ReasonOutOfPods,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newServiceFixture(t, tc.maxPods)
			pods := tc.pods()
			f.s.SetPods("api", pods)
			l := listed(f.s)
			p := l[tc.rejected]
			if p == nil {
				t.Fatalf("rejected pod %s not listed", tc.rejected)
			}
			st := podStatus(t, p)
			if st.Phase != corev1.PodFailed || st.Reason != tc.wantReason || !p.Terminated {
				t.Errorf("rejected pod: phase %s reason %q terminated %v, want Failed %s terminated", st.Phase, st.Reason, p.Terminated, tc.wantReason)
			}
			if st.Message == "" || st.Message[:len("Pod was rejected: ")] != "Pod was rejected: " {
				t.Errorf("message %q, want the kubelet's 'Pod was rejected: ...'", st.Message)
			}
			var uid types.UID
			for _, q := range pods {
				if q.Name == tc.rejected {
					uid = q.UID
				}
			}
			if f.m.Known(uid) {
				t.Errorf("the rejected pod got a worker")
			}
			for _, q := range pods {
				if q.Name != tc.rejected {
					waitListed(t, f.s, q.Name+" running", func(l map[string]*podsyncv1.Pod) bool { return running(t, l[q.Name]) })
				}
			}
			// Another update of the same pods does not admit it later.
			f.s.SetPods("api", pods)
			time.Sleep(20 * time.Millisecond)
			if slices.Contains(f.cri.podsOf(), tc.rejected) || f.m.Known(uid) {
				t.Errorf("the rejected pod reached the runtime: %v", f.cri.podsOf())
			}
			// Gone from its source: removed from the list.
			f.s.SetPods("api", slices.DeleteFunc(slices.Clone(pods), func(q *corev1.Pod) bool { return q.Name == tc.rejected }))
			if listed(f.s)[tc.rejected] != nil {
				t.Errorf("a rejected pod removed from its source is still listed")
			}
		})
	}
}

func TestListAndSubscribe(t *testing.T) {
	f := newServiceFixture(t, 0)
	// A subscriber that has seen nothing gets a snapshot, even before the first change.
	first, fresh := f.s.Subscribe(0)
	fresh.Close()
	if first == nil || !first.Snapshot || first.Seq != 0 || len(first.Value) != 0 {
		t.Errorf("Subscribe(0) on a new service: first %+v, want an empty snapshot at 0", first)
	}
	// A rejected pod is published synchronously: a deterministic first event.
	other := newPod("other-node", 1)
	other.Spec.NodeName = "node2"
	other.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply}}
	f.s.SetPods("file", []*corev1.Pod{other})
	// A second one, so that seq-1 is a change and not "nothing seen".
	other2 := newPod("other-node-2", 2)
	other2.Spec.NodeName = "node2"
	f.s.SetPods("file", []*corev1.Pod{other, other2})

	pods, seq := f.s.List()
	if len(pods) != 2 || seq < 2 {
		t.Fatalf("List = %v at %d, want the two rejected pods at seq >= 2", pods, seq)
	}
	// Each carries its object (metadata and spec) for the node API's /pods.
	for _, p := range pods {
		var obj corev1.Pod
		if err := json.Unmarshal(p.Pod, &obj); err != nil || obj.Name != p.Name || obj.Spec.NodeName != "node2" || obj.Kind != "Pod" {
			t.Errorf("pod %s carries %s (%v), want its metadata and spec as a v1 Pod", p.Name, p.Pod, err)
		}
		if len(obj.ManagedFields) != 0 {
			t.Errorf("pod %s crosses the bus with its managedFields: %s", p.Name, p.Pod)
		}
	}

	_, upToDate := f.s.Subscribe(seq)
	defer upToDate.Close()
	_, replay := f.s.Subscribe(seq - 1)
	defer replay.Close()
	_, ahead := f.s.Subscribe(seq + 100)
	defer ahead.Close()

	select {
	case ev := <-replay.Events():
		if ev.Snapshot || ev.Seq != seq || len(ev.Value) != 1 || ev.Value[0].Name != "other-node-2" {
			t.Errorf("Subscribe(seq-1) first event %+v, want the last change replayed", ev)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("Subscribe(seq-1) got nothing")
	}
	select {
	case ev := <-ahead.Events():
		if !ev.Snapshot || ev.Seq != seq || len(ev.Value) != 2 {
			t.Errorf("Subscribe(ahead) first event %+v, want a snapshot at %d", ev, seq)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("Subscribe(ahead) got nothing")
	}
	select {
	case ev := <-upToDate.Events():
		t.Fatalf("Subscribe(seq) got %+v before any change", ev)
	default:
	}

	f.s.SetPods("api", []*corev1.Pod{newPod("web", 2)})
	timeout := time.After(10 * time.Second)
	next := seq + 1
	for {
		select {
		case ev := <-upToDate.Events():
			if ev.Seq != next || ev.Snapshot {
				t.Fatalf("event %d (snapshot %v), want %d in order", ev.Seq, ev.Snapshot, next)
			}
			next++
			if len(ev.Value) != 1 || ev.Value[0].Name != "web" {
				t.Fatalf("event %d has %v, want only the changed pod web", ev.Seq, ev.Value)
			}
			if running(t, ev.Value[0]) {
				if _, s := f.s.List(); s < ev.Seq {
					t.Errorf("List's seq %d is behind the event %d", s, ev.Seq)
				}
				return
			}
		case <-timeout:
			t.Fatalf("no event with web running")
		}
	}
}

func TestPodContentRemovableByTheKubeletsRule(t *testing.T) {
	f := newServiceFixture(t, 0)
	a, b, c := newPod("a", 1), newPod("b", 2), newPod("c", 3)
	f.s.SetPods("api", []*corev1.Pod{a, b, c})
	waitListed(t, f.s, "a, b and c running", func(l map[string]*podsyncv1.Pod) bool {
		return running(t, l["a"]) && running(t, l["b"]) && running(t, l["c"])
	})
	if f.s.PodContentRemovable()("uid-unknown") {
		t.Errorf("an unknown pod's content may go before every source reported")
	}
	f.s.SetPods("file", nil)
	if removable := f.s.PodContentRemovable(); !removable("uid-unknown") || removable(a.UID) {
		t.Errorf("with every source reported: unknown pod %v, running pod a %v; want true, false", removable("uid-unknown"), removable(a.UID))
	}

	// c deleted (still in the source until its worker ends), b gone from the source.
	deleted := c.DeepCopy()
	deleted.DeletionTimestamp = &metav1.Time{Time: time.Unix(10, 0)}
	f.s.SetPods("api", []*corev1.Pod{a, deleted})
	waitListed(t, f.s, "b gone and c terminated", func(l map[string]*podsyncv1.Pod) bool {
		return l["b"] == nil && l["c"] != nil && l["c"].Terminated
	})
	removable := f.s.PodContentRemovable()
	for uid, want := range map[types.UID]bool{a.UID: false, b.UID: true, c.UID: true} {
		if got := removable(uid); got != want {
			t.Errorf("pod %s's content removable: %v, want %v", uid, got, want)
		}
	}
}

// TestAdmissionRefusedWhileShuttingDown: while graceful node shutdown runs, a new pod is
// rejected with the kubelet's NodeShutdown reason and message and never reaches the
// runtime; pods admitted before keep running (the shutdown manager ends them).
func TestAdmissionRefusedWhileShuttingDown(t *testing.T) {
	f := newServiceFixture(t, 0)
	var mu sync.Mutex
	down := false
	f.s.shutdown = func() (bool, string, string) {
		mu.Lock()
		defer mu.Unlock()
		if down {
			return false, nodeshutdown.ReasonNotAdmitted, nodeshutdown.MessageNotAdmitted
		}
		return true, "", ""
	}
	before := newPod("before", 1)
	f.s.SetPods("api", []*corev1.Pod{before})
	waitListed(t, f.s, "before running", func(l map[string]*podsyncv1.Pod) bool { return running(t, l["before"]) })

	mu.Lock()
	down = true
	mu.Unlock()
	late := newPod("late", 2)
	f.s.SetPods("api", []*corev1.Pod{before, late})
	p := listed(f.s)["late"]
	if p == nil {
		t.Fatalf("the refused pod is not listed")
	}
	st := podStatus(t, p)
	if st.Phase != corev1.PodFailed || st.Reason != "NodeShutdown" || st.Message != "Pod was rejected: Pod was rejected as the node is shutting down." || !p.Terminated {
		t.Errorf("refused pod: phase %s reason %q message %q terminated %v, want Failed, NodeShutdown and the kubelet's message", st.Phase, st.Reason, st.Message, p.Terminated)
	}
	if f.m.Known(late.UID) || slices.Contains(f.cri.podsOf(), "late") {
		t.Errorf("the refused pod got a worker or reached the runtime")
	}
	if !running(t, listed(f.s)["before"]) {
		t.Errorf("the pod admitted before the shutdown stopped running on admission")
	}
}

// TestFinalStatusInAPI: graceful node shutdown counts an API pod as ended only once the API
// server has its terminal phase (unitlet-status wrote it); a static pod does not wait.
func TestFinalStatusInAPI(t *testing.T) {
	f := newServiceFixture(t, 0)
	api, static := newPod("api-pod", 1), newPod("static-pod", 2)
	f.s.SetPods("api", []*corev1.Pod{api})
	f.s.SetPods("file", []*corev1.Pod{static})
	if f.s.FinalStatusInAPI(api.UID) {
		t.Errorf("an API pod with no terminal phase in the API counts as written")
	}
	if !f.s.FinalStatusInAPI(static.UID) {
		t.Errorf("a static pod waits for the API")
	}
	written := api.DeepCopy()
	written.ResourceVersion = "2"
	written.Status.Phase = corev1.PodFailed
	f.s.SetPods("api", []*corev1.Pod{written})
	if !f.s.FinalStatusInAPI(api.UID) {
		t.Errorf("an API pod whose Failed phase is in the API does not count as written")
	}
	f.s.SetPods("api", nil)
	if !f.s.FinalStatusInAPI(api.UID) {
		t.Errorf("a pod gone from the API does not count as written")
	}
}

// TestRunningPodReadmittedDuringShutdown: a podsync restarted during a node shutdown
// admits again the pods the runtime runs (they get a worker, which the shutdown manager
// ends) and refuses only new ones.
func TestRunningPodReadmittedDuringShutdown(t *testing.T) {
	first := newServiceFixture(t, 0)
	running := newPod("running", 1)
	first.s.SetPods("api", []*corev1.Pod{running})
	waitListed(t, first.s, "running", func(l map[string]*podsyncv1.Pod) bool {
		return l["running"] != nil && podStatus(t, l["running"]).Phase == corev1.PodRunning
	})

	// The restarted podsync: the same runtime, the node shutting down.
	f := newServiceFixtureOn(t, first.cri, 0, func(o *ServiceOptions) {
		o.Shutdown = func() (bool, string, string) {
			return false, nodeshutdown.ReasonNotAdmitted, nodeshutdown.MessageNotAdmitted
		}
	})
	r := relist.New(first.cri, time.Second, clock.RealClock{}, nil, slog.New(slog.DiscardHandler), nil)
	if err := r.Relist(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.s.Attach(f.m, r)
	late := newPod("late", 2)
	f.s.SetPods("api", []*corev1.Pod{running, late})
	if !f.m.Known(running.UID) {
		t.Errorf("the pod the runtime runs got no worker: the shutdown could not end it")
	}
	if st := podStatus(t, listed(f.s)["late"]); st.Reason != nodeshutdown.ReasonNotAdmitted || f.m.Known(late.UID) {
		t.Errorf("the new pod: reason %q, worker %t; want refused with NodeShutdown", st.Reason, f.m.Known(late.UID))
	}
}
