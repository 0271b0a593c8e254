package relist

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/unitlet/unitlet/services/podsync/criconfig"
)

// memRuntime is an in-memory CRI runtime that counts the detail calls it answers.
type memRuntime struct {
	mu         sync.Mutex
	sandboxes  []*runtimeapi.PodSandbox
	containers []*runtimeapi.Container
	mounts     map[string][]*runtimeapi.Mount // container ID → mounts in its status
	listErr    error
	ctrStatus  map[string]int // ContainerStatus calls by container ID
	// ctrStatusErr, when set for a container ID, is what ContainerStatus answers for it.
	ctrStatusErr map[string]error
	sbStatus     map[string]int // PodSandboxStatus calls by sandbox ID
	listFilters  []map[string]string
	ctrListCalls int
	// listedHook, when set, runs after ListContainers has taken its answer and before it
	// returns it (without the lock), with the call's label selector.
	listedHook func(sel map[string]string)
}

func newMemRuntime() *memRuntime {
	return &memRuntime{mounts: map[string][]*runtimeapi.Mount{}, ctrStatus: map[string]int{}, sbStatus: map[string]int{}, ctrStatusErr: map[string]error{}}
}

func podLabels(uid, name, ns, container string) map[string]string {
	l := map[string]string{criconfig.LabelPodUID: uid, criconfig.LabelPodName: name, criconfig.LabelPodNamespace: ns}
	if container != "" {
		l[criconfig.LabelContainerName] = container
	}
	return l
}

func selected(sel, l map[string]string) bool {
	for k, v := range sel {
		if l[k] != v {
			return false
		}
	}
	return true
}

func (f *memRuntime) ListPodSandbox(_ context.Context, in *runtimeapi.ListPodSandboxRequest, _ ...grpc.CallOption) (*runtimeapi.ListPodSandboxResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.listErr != nil {
		return nil, f.listErr
	}
	f.listFilters = append(f.listFilters, in.GetFilter().GetLabelSelector())
	out := []*runtimeapi.PodSandbox{}
	for _, s := range f.sandboxes {
		if selected(in.GetFilter().GetLabelSelector(), s.Labels) {
			out = append(out, s)
		}
	}
	return &runtimeapi.ListPodSandboxResponse{Items: out}, nil
}

func (f *memRuntime) PodSandboxStatus(_ context.Context, in *runtimeapi.PodSandboxStatusRequest, _ ...grpc.CallOption) (*runtimeapi.PodSandboxStatusResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sbStatus[in.PodSandboxId]++
	return &runtimeapi.PodSandboxStatusResponse{Status: &runtimeapi.PodSandboxStatus{
		Id: in.PodSandboxId,
		Network: &runtimeapi.PodSandboxNetworkStatus{
			Ip:            "10.1.0.1",
			AdditionalIps: []*runtimeapi.PodIP{{Ip: "fd00::1"}},
		},
	}}, nil
}

func (f *memRuntime) ListContainers(_ context.Context, in *runtimeapi.ListContainersRequest, _ ...grpc.CallOption) (*runtimeapi.ListContainersResponse, error) {
	f.mu.Lock()
	f.ctrListCalls++
	out := []*runtimeapi.Container{}
	for _, c := range f.containers {
		if selected(in.GetFilter().GetLabelSelector(), c.Labels) {
			// A copy: the answer is the runtime as it was when listed.
			out = append(out, proto.Clone(c).(*runtimeapi.Container))
		}
	}
	hook := f.listedHook
	f.mu.Unlock()
	if hook != nil {
		hook(in.GetFilter().GetLabelSelector())
	}
	return &runtimeapi.ListContainersResponse{Containers: out}, nil
}

func (f *memRuntime) ContainerStatus(_ context.Context, in *runtimeapi.ContainerStatusRequest, _ ...grpc.CallOption) (*runtimeapi.ContainerStatusResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ctrStatus[in.ContainerId]++
	if err := f.ctrStatusErr[in.ContainerId]; err != nil {
		return nil, err
	}
	for _, c := range f.containers {
		if c.Id != in.ContainerId {
			continue
		}
		st := &runtimeapi.ContainerStatus{
			Id: c.Id, State: c.State, CreatedAt: c.CreatedAt, StartedAt: c.CreatedAt + 1,
			Image: &runtimeapi.ImageSpec{Image: "registry/img:1"}, ImageRef: "sha256:abc",
			LogPath: "/logs/" + c.Id + ".log", Mounts: f.mounts[c.Id],
		}
		if c.State == runtimeapi.ContainerState_CONTAINER_EXITED {
			st.FinishedAt, st.ExitCode, st.Reason = c.CreatedAt+2, 7, "Error"
		}
		return &runtimeapi.ContainerStatusResponse{Status: st}, nil
	}
	return nil, status.Errorf(codes.NotFound, "an error occurred when try to find container %q: not found", in.ContainerId)
}

func (f *memRuntime) setState(id string, s runtimeapi.ContainerState) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.containers {
		if c.Id == id {
			c.State = s
		}
	}
}

func (f *memRuntime) statusCalls() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]int{}
	for k, v := range f.ctrStatus {
		out[k] = v
	}
	return out
}

func sandbox(id, uid string, created int64, attempt uint32, ready bool) *runtimeapi.PodSandbox {
	st := runtimeapi.PodSandboxState_SANDBOX_NOTREADY
	if ready {
		st = runtimeapi.PodSandboxState_SANDBOX_READY
	}
	return &runtimeapi.PodSandbox{
		Id: id, Labels: podLabels(uid, "pod-"+uid, "ns", ""), State: st, CreatedAt: created,
		Metadata: &runtimeapi.PodSandboxMetadata{Name: "pod-" + uid, Namespace: "ns", Uid: uid, Attempt: attempt},
	}
}

func container(id, uid, sbID, name string, created int64, attempt uint32, st runtimeapi.ContainerState) *runtimeapi.Container {
	return &runtimeapi.Container{
		Id: id, PodSandboxId: sbID, Labels: podLabels(uid, "pod-"+uid, "ns", name), State: st, CreatedAt: created,
		Metadata: &runtimeapi.ContainerMetadata{Name: name, Attempt: attempt},
		Image:    &runtimeapi.ImageSpec{Image: "img"},
	}
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

const (
	running = runtimeapi.ContainerState_CONTAINER_RUNNING
	exited  = runtimeapi.ContainerState_CONTAINER_EXITED
	created = runtimeapi.ContainerState_CONTAINER_CREATED
)

func sandboxIDs(p *Pod) []string {
	var out []string
	for _, s := range p.Sandboxes {
		out = append(out, s.ID)
	}
	return out
}

func containerIDs(p *Pod) []string {
	var out []string
	for _, c := range p.Containers {
		out = append(out, c.ID)
	}
	return out
}

func TestRelistGroupsByPodNewestFirst(t *testing.T) {
	for _, tc := range []struct {
		name       string
		sandboxes  []*runtimeapi.PodSandbox
		containers []*runtimeapi.Container
		// want: per pod UID, sandbox IDs and container IDs, newest first.
		wantSandboxes  map[types.UID][]string
		wantContainers map[types.UID][]string
	}{
		{
			name: "two pods, instances sorted by creation time",
			sandboxes: []*runtimeapi.PodSandbox{
				sandbox("sa-old", "a", 10, 0, false), sandbox("sa-new", "a", 20, 1, true), sandbox("sb", "b", 15, 0, true),
			},
			containers: []*runtimeapi.Container{
				container("a1", "a", "sa-old", "main", 100, 0, exited),
				container("a3", "a", "sa-new", "main", 300, 2, running),
				container("a2", "a", "sa-new", "main", 200, 1, exited),
				container("b1", "b", "sb", "web", 50, 0, running),
			},
			wantSandboxes:  map[types.UID][]string{"a": {"sa-new", "sa-old"}, "b": {"sb"}},
			wantContainers: map[types.UID][]string{"a": {"a3", "a2", "a1"}, "b": {"b1"}},
		},
		{
			name: "same creation time: the higher attempt first",
			sandboxes: []*runtimeapi.PodSandbox{
				sandbox("s0", "a", 10, 0, false), sandbox("s1", "a", 10, 1, true),
			},
			containers: []*runtimeapi.Container{
				container("c0", "a", "s1", "main", 100, 0, exited),
				container("c2", "a", "s1", "main", 100, 2, running),
				container("c1", "a", "s1", "main", 100, 1, exited),
			},
			wantSandboxes:  map[types.UID][]string{"a": {"s1", "s0"}},
			wantContainers: map[types.UID][]string{"a": {"c2", "c1", "c0"}},
		},
		{
			// The wall clock stepped back between instances: the runtime's creation times
			// disagree with the attempts, each one more than the newest before.
			name: "created after a step back of the clock: the higher attempt first",
			sandboxes: []*runtimeapi.PodSandbox{
				sandbox("s0", "a", 200, 0, false), sandbox("s1", "a", 100, 1, true),
			},
			containers: []*runtimeapi.Container{
				container("side", "a", "s1", "side", 150, 0, running),
				container("c3", "a", "s1", "main", 300, 3, exited),
				container("c4", "a", "s1", "main", 120, 4, running),
				container("c2", "a", "s1", "main", 250, 2, exited),
			},
			wantSandboxes:  map[types.UID][]string{"a": {"s1", "s0"}},
			wantContainers: map[types.UID][]string{"a": {"c4", "c3", "side", "c2"}},
		},
		{
			name: "sandboxes and containers without the pod uid label are not pods",
			sandboxes: []*runtimeapi.PodSandbox{
				sandbox("sa", "a", 10, 0, true),
				{Id: "foreign", Labels: map[string]string{"app": "x"}, State: runtimeapi.PodSandboxState_SANDBOX_READY},
			},
			containers: []*runtimeapi.Container{
				container("a1", "a", "sa", "main", 100, 0, running),
				{Id: "stray", PodSandboxId: "foreign", Labels: map[string]string{criconfig.LabelContainerName: "x"}, State: running},
				{Id: "nolabels", PodSandboxId: "sa", State: running},
			},
			wantSandboxes:  map[types.UID][]string{"a": {"sa"}},
			wantContainers: map[types.UID][]string{"a": {"a1"}},
		},
		{
			name:           "a container with no sandbox listed still makes a pod",
			containers:     []*runtimeapi.Container{container("c", "z", "gone", "main", 1, 0, exited)},
			wantSandboxes:  map[types.UID][]string{"z": nil},
			wantContainers: map[types.UID][]string{"z": {"c"}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt := newMemRuntime()
			rt.sandboxes, rt.containers = tc.sandboxes, tc.containers
			r := New(rt, time.Second, clocktesting.NewFakeClock(time.Unix(1000, 0)), nil, quietLog(), nil)
			if err := r.Relist(context.Background()); err != nil {
				t.Fatal(err)
			}
			pods := r.Pods()
			if len(pods) != len(tc.wantContainers) {
				t.Fatalf("pods %v, want %d pods", pods, len(tc.wantContainers))
			}
			for uid, want := range tc.wantContainers {
				p := pods[uid]
				if p == nil {
					t.Fatalf("no pod %s", uid)
				}
				if p.UID != uid || p.Name != "pod-"+string(uid) || p.Namespace != "ns" {
					t.Errorf("pod %s identity: %s %s/%s", uid, p.UID, p.Namespace, p.Name)
				}
				if got := containerIDs(p); !slices.Equal(got, want) {
					t.Errorf("pod %s containers %v, want %v", uid, got, want)
				}
				if got := sandboxIDs(p); !slices.Equal(got, tc.wantSandboxes[uid]) {
					t.Errorf("pod %s sandboxes %v, want %v", uid, got, tc.wantSandboxes[uid])
				}
			}
			rt.mu.Lock()
			defer rt.mu.Unlock()
			for _, id := range []string{"stray", "nolabels"} {
				if rt.ctrStatus[id] != 0 {
					t.Errorf("status of unlabelled container %s asked %d times", id, rt.ctrStatus[id])
				}
			}
		})
	}
}

func TestRelistContainerDetails(t *testing.T) {
	rt := newMemRuntime()
	rt.sandboxes = []*runtimeapi.PodSandbox{sandbox("s1", "a", 10, 0, true), sandbox("s0", "a", 5, 0, false)}
	c := container("c1", "a", "s1", "meta-name", 100, 3, exited)
	c.Labels[criconfig.LabelContainerName] = "main"
	c.Annotations = map[string]string{criconfig.AnnotationContainerTerminationMessagePath: "/dev/termination-log"}
	rt.containers = []*runtimeapi.Container{c}
	rt.mounts["c1"] = []*runtimeapi.Mount{
		{ContainerPath: "/data", HostPath: "/var/data"},
		{ContainerPath: "/dev/termination-log", HostPath: "/pods/a/containers/main/1234"},
	}
	r := New(rt, time.Second, clocktesting.NewFakeClock(time.Unix(1000, 0)), nil, quietLog(), nil)
	if err := r.Relist(context.Background()); err != nil {
		t.Fatal(err)
	}
	p := r.Pod("a")
	got := p.Latest("main")
	if got == nil {
		t.Fatalf("no container named main (the container-name label wins over metadata): %+v", p.Containers)
	}
	want := Container{
		ID: "c1", Name: "main", Attempt: 3, SandboxID: "s1", State: exited,
		CreatedAt: time.Unix(0, 100), StartedAt: time.Unix(0, 101), FinishedAt: time.Unix(0, 102),
		ExitCode: 7, Reason: "Error", Image: "registry/img:1", ImageRef: "sha256:abc", LogPath: "/logs/c1.log",
		TerminationMessageHostPath: "/pods/a/containers/main/1234",
	}
	if got.Labels[criconfig.LabelPodUID] != "a" || got.Annotations[criconfig.AnnotationContainerTerminationMessagePath] == "" {
		t.Errorf("labels %v, annotations %v not kept", got.Labels, got.Annotations)
	}
	cp := *got
	cp.Labels, cp.Annotations = nil, nil
	if !reflect.DeepEqual(cp, want) {
		t.Errorf("container\n got %+v\nwant %+v", *got, want)
	}
	if got.Running() {
		t.Errorf("an exited container Running()")
	}
	sb := p.ReadySandbox()
	if sb == nil || sb.ID != "s1" || !slices.Equal(sb.IPs, []string{"10.1.0.1", "fd00::1"}) {
		t.Errorf("ready sandbox %+v, want s1 with both IPs", sb)
	}
	if ips := p.Sandboxes[1].IPs; ips != nil {
		t.Errorf("a not-ready sandbox has IPs %v", ips)
	}
	rt.mu.Lock()
	if rt.sbStatus["s0"] != 0 {
		t.Errorf("status of a not-ready sandbox asked %d times", rt.sbStatus["s0"])
	}
	rt.mu.Unlock()
}

func TestRelistReportsChangedPodsAndCachesDetails(t *testing.T) {
	type step struct {
		name   string
		change func(rt *memRuntime)
		// wantChanged is what the callback gets (nil: not called).
		wantChanged []types.UID
		// wantStatus is the ContainerStatus calls this relist makes, by container ID.
		wantStatus map[string]int
	}
	steps := []step{
		{
			name:        "first relist: every pod is new, every container asked",
			change:      func(*memRuntime) {},
			wantChanged: []types.UID{"a", "b", "c"},
			wantStatus:  map[string]int{"a1": 1, "b1": 1, "c1": 1},
		},
		{
			name:   "nothing changed: no report, no status calls",
			change: func(*memRuntime) {},
		},
		{
			name:        "a's container exits: only a, only its container asked",
			change:      func(rt *memRuntime) { rt.setState("a1", exited) },
			wantChanged: []types.UID{"a"},
			wantStatus:  map[string]int{"a1": 1},
		},
		{
			name: "b gets a new container: only b, only the new container asked",
			change: func(rt *memRuntime) {
				rt.mu.Lock()
				rt.containers = append(rt.containers, container("b2", "b", "sb", "side", 200, 0, running))
				rt.mu.Unlock()
			},
			wantChanged: []types.UID{"b"},
			wantStatus:  map[string]int{"b2": 1},
		},
		{
			name: "c's sandbox stops: c reported, no container status",
			change: func(rt *memRuntime) {
				rt.mu.Lock()
				rt.sandboxes[2].State = runtimeapi.PodSandboxState_SANDBOX_NOTREADY
				rt.mu.Unlock()
			},
			wantChanged: []types.UID{"c"},
		},
		{
			name: "c removed: reported once as changed",
			change: func(rt *memRuntime) {
				rt.mu.Lock()
				rt.sandboxes = rt.sandboxes[:2]
				rt.containers = slices.DeleteFunc(rt.containers, func(c *runtimeapi.Container) bool { return c.Id == "c1" })
				rt.mu.Unlock()
			},
			wantChanged: []types.UID{"c"},
		},
		{
			name:   "c stays gone: no report",
			change: func(*memRuntime) {},
		},
		{
			name: "two pods change at once: both, sorted",
			change: func(rt *memRuntime) {
				rt.setState("b2", exited)
				rt.setState("a1", created) // an odd transition is still a change
			},
			wantChanged: []types.UID{"a", "b"},
			wantStatus:  map[string]int{"a1": 1, "b2": 1},
		},
	}
	rt := newMemRuntime()
	rt.sandboxes = []*runtimeapi.PodSandbox{sandbox("sa", "a", 1, 0, true), sandbox("sb", "b", 2, 0, true), sandbox("sc", "c", 3, 0, true)}
	rt.containers = []*runtimeapi.Container{
		container("a1", "a", "sa", "main", 10, 0, running),
		container("b1", "b", "sb", "main", 20, 0, running),
		container("c1", "c", "sc", "main", 30, 0, running),
	}
	var (
		mu      sync.Mutex
		reports [][]types.UID
	)
	r := New(rt, time.Second, clocktesting.NewFakeClock(time.Unix(1000, 0)), nil, quietLog(), func(uids []types.UID) {
		mu.Lock()
		reports = append(reports, slices.Clone(uids))
		mu.Unlock()
	})
	for _, s := range steps {
		before := rt.statusCalls()
		mu.Lock()
		reports = nil
		mu.Unlock()
		s.change(rt)
		if err := r.Relist(context.Background()); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		mu.Lock()
		switch {
		case s.wantChanged == nil && len(reports) != 0:
			t.Errorf("%s: reported %v, want no call", s.name, reports)
		case s.wantChanged != nil && (len(reports) != 1 || !slices.Equal(reports[0], s.wantChanged)):
			t.Errorf("%s: reported %v, want one call with %v", s.name, reports, s.wantChanged)
		}
		mu.Unlock()
		after := rt.statusCalls()
		delta := map[string]int{}
		for id, n := range after {
			if d := n - before[id]; d > 0 {
				delta[id] = d
			}
		}
		if len(delta) != len(s.wantStatus) {
			t.Errorf("%s: ContainerStatus calls %v, want %v", s.name, delta, s.wantStatus)
		}
		for id, n := range s.wantStatus {
			if delta[id] != n {
				t.Errorf("%s: ContainerStatus calls %v, want %v", s.name, delta, s.wantStatus)
				break
			}
		}
	}
	if p := r.Pod("c"); p != nil {
		t.Errorf("removed pod c still in the view: %+v", p)
	}
	if c := r.Pod("a").Latest("main"); c.State != created {
		t.Errorf("a's container state %v, want the refreshed CREATED", c.State)
	}
}

func TestRelistErrorKeepsView(t *testing.T) {
	rt := newMemRuntime()
	rt.sandboxes = []*runtimeapi.PodSandbox{sandbox("sa", "a", 1, 0, true)}
	calls := 0
	r := New(rt, time.Second, clocktesting.NewFakeClock(time.Unix(1000, 0)), nil, quietLog(), func([]types.UID) { calls++ })
	if err := r.Relist(context.Background()); err != nil {
		t.Fatal(err)
	}
	rt.mu.Lock()
	rt.listErr = errors.New("runtime down")
	rt.mu.Unlock()
	if err := r.Relist(context.Background()); err == nil {
		t.Fatalf("Relist with a failing runtime: no error")
	}
	if r.Pod("a") == nil || calls != 1 {
		t.Errorf("after a failed relist: pod a %v, %d reports; want the old view and no new report", r.Pod("a"), calls)
	}
	if ok, _, err := r.Health(); !ok || err == nil {
		t.Errorf("Health() = %v, %v; want healthy with the last error", ok, err)
	}
}

func TestInspectReadsOnePodAfresh(t *testing.T) {
	rt := newMemRuntime()
	rt.sandboxes = []*runtimeapi.PodSandbox{sandbox("sa", "a", 1, 0, true), sandbox("sb", "b", 2, 0, true)}
	rt.containers = []*runtimeapi.Container{
		container("a1", "a", "sa", "main", 10, 0, running),
		container("b1", "b", "sb", "main", 20, 0, running),
	}
	r := New(rt, time.Second, clocktesting.NewFakeClock(time.Unix(1000, 0)), nil, quietLog(), nil)
	ctx := context.Background()
	if err := r.Relist(ctx); err != nil {
		t.Fatal(err)
	}
	rt.setState("a1", exited)
	rt.mu.Lock()
	rt.containers = append(rt.containers, container("a2", "a", "sa", "main", 30, 1, running))
	rt.mu.Unlock()

	p, err := r.Inspect(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if got := containerIDs(p); !slices.Equal(got, []string{"a2", "a1"}) {
		t.Errorf("Inspect(a) containers %v, want [a2 a1]", got)
	}
	if p.Latest("main").ID != "a2" || p.Instances("main")[1].State != exited {
		t.Errorf("Inspect(a) does not see the runtime's current state: %+v", p.Containers)
	}
	if cached := r.Pod("a").Latest("main"); cached.ID != "a1" || !cached.Running() {
		t.Errorf("Inspect changed the relisted view: %+v", cached)
	}
	rt.mu.Lock()
	last := rt.listFilters[len(rt.listFilters)-1]
	bAsked := rt.ctrStatus["b1"]
	rt.mu.Unlock()
	if last[criconfig.LabelPodUID] != "a" {
		t.Errorf("Inspect listed with filter %v, want the pod uid label", last)
	}
	if bAsked != 1 {
		t.Errorf("Inspect(a) asked for b's container (%d status calls)", bAsked)
	}
	if p, err := r.Inspect(ctx, "nope"); err != nil || p != nil || !p.Empty() {
		t.Errorf("Inspect(unknown) = %+v, %v; want nil", p, err)
	}
}

func TestReadsOfOnePodAskEachDetailOnce(t *testing.T) {
	rt := newMemRuntime()
	rt.sandboxes = []*runtimeapi.PodSandbox{sandbox("sa", "a", 1, 0, true)}
	r := New(rt, time.Second, clocktesting.NewFakeClock(time.Unix(1000, 0)), nil, quietLog(), nil)
	ctx := context.Background()
	if err := r.Relist(ctx); err != nil {
		t.Fatal(err)
	}
	rt.mu.Lock()
	rt.containers = append(rt.containers, container("a1", "a", "sa", "main", 10, 0, running))
	rt.mu.Unlock()
	// A worker's reads and an event's: the new container's details are asked once.
	for range 3 {
		if _, err := r.Inspect(ctx, "a"); err != nil {
			t.Fatal(err)
		}
		if _, err := r.refresh(ctx, "a"); err != nil {
			t.Fatal(err)
		}
	}
	rt.mu.Lock()
	ctr, sb := rt.ctrStatus["a1"], rt.sbStatus["sa"]
	rt.mu.Unlock()
	if ctr != 1 || sb != 1 {
		t.Errorf("ContainerStatus of a1 asked %d times, PodSandboxStatus of sa %d; want once each", ctr, sb)
	}
	// A changed state is asked again, by whichever read sees it first.
	rt.setState("a1", exited)
	p, err := r.Inspect(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.refresh(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	rt.mu.Lock()
	ctr = rt.ctrStatus["a1"]
	rt.mu.Unlock()
	if p.Latest("main").State != exited || ctr != 2 {
		t.Errorf("after a1 exited: Inspect saw %v, %d ContainerStatus calls; want exited and 2", p.Latest("main").State, ctr)
	}
	// The relist keeps only what exists.
	rt.mu.Lock()
	rt.containers = nil
	rt.mu.Unlock()
	if err := r.Relist(ctx); err != nil {
		t.Fatal(err)
	}
	if d, _ := r.caches(); d["a1"] != nil {
		t.Errorf("the caches keep a removed container's details after a relist")
	}
}

func TestHealth(t *testing.T) {
	for _, tc := range []struct {
		name        string
		relistAfter time.Duration // -1: never relist
		checkAfter  time.Duration // since the relist, or since New
		want        bool
	}{
		{"fresh, no relist yet", -1, 0, true},
		{"no relist for just under 3 min", -1, HealthyThreshold - time.Second, true},
		{"no relist for over 3 min", -1, HealthyThreshold + time.Second, false},
		{"relisted a minute ago", 10 * time.Minute, time.Minute, true},
		{"last relist over 3 min ago", 0, HealthyThreshold + time.Second, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
			r := New(newMemRuntime(), time.Second, clk, nil, quietLog(), nil)
			var at time.Time
			if tc.relistAfter >= 0 {
				clk.Step(tc.relistAfter)
				if err := r.Relist(context.Background()); err != nil {
					t.Fatal(err)
				}
				at = clk.Now()
			}
			clk.Step(tc.checkAfter)
			ok, last, err := r.Health()
			if ok != tc.want {
				t.Errorf("healthy = %v (%v), want %v", ok, err, tc.want)
			}
			if !ok && err == nil {
				t.Errorf("unhealthy without an error")
			}
			if !last.Equal(at) {
				t.Errorf("last relist %v, want %v", last, at)
			}
			if r.Synced() != (tc.relistAfter >= 0) {
				t.Errorf("Synced() = %v", r.Synced())
			}
		})
	}
}

func TestRunRelistsOnEveryTick(t *testing.T) {
	rt := newMemRuntime()
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	r := New(rt, time.Second, clk, nil, quietLog(), nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	lists := func() int {
		rt.mu.Lock()
		defer rt.mu.Unlock()
		return rt.ctrListCalls
	}
	waitFor(t, func() bool { return lists() == 1 && clk.HasWaiters() })
	clk.Step(time.Second)
	waitFor(t, func() bool { return lists() == 2 })
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met in 5s")
		}
		time.Sleep(time.Millisecond)
	}
}

// A container whose status the runtime fails to give (containerd busy or just restarted)
// must not vanish from its pod: that view would show the container never created, its
// restart count 0 and the pod Pending again. The pod keeps its last view until it can be
// read, and a read of that pod fails; a container the runtime no longer has (NotFound)
// drops out as before.
func TestAContainerWhoseStatusFailsKeepsThePodsLastView(t *testing.T) {
	rt := newMemRuntime()
	rt.sandboxes = []*runtimeapi.PodSandbox{sandbox("sa", "a", 10, 1, true), sandbox("sb", "b", 10, 0, true)}
	rt.containers = []*runtimeapi.Container{
		container("a0", "a", "sa", "main", 100, 0, exited),
		container("a1", "a", "sa", "main", 200, 1, running),
		container("b1", "b", "sb", "web", 100, 0, running),
	}
	var changed []types.UID
	r := New(rt, time.Second, clocktesting.NewFakeClock(time.Unix(1000, 0)), nil, quietLog(), func(uids []types.UID) { changed = uids })
	ctx := context.Background()
	if err := r.Relist(ctx); err != nil {
		t.Fatal(err)
	}

	// a1 exits and b1 exits; the runtime then fails a1's status.
	rt.setState("a1", exited)
	rt.setState("b1", exited)
	rt.mu.Lock()
	rt.ctrStatusErr["a1"] = status.Error(codes.DeadlineExceeded, "context deadline exceeded")
	rt.mu.Unlock()
	changed = nil
	if err := r.Relist(ctx); err != nil {
		t.Fatalf("relist failed for one pod's container: %v", err)
	}
	if got := containerIDs(r.Pod("a")); !slices.Equal(got, []string{"a1", "a0"}) {
		t.Errorf("pod a after a failed status of a1: containers %v, want its last view [a1 a0]", got)
	}
	if c := r.Pod("a").Latest("main"); c == nil || c.State != running || c.Attempt != 1 {
		t.Errorf("pod a's main after a failed status: %+v, want a1 running, attempt 1 (the last view)", c)
	}
	if c := r.Pod("b").Latest("web"); c == nil || c.State != exited {
		t.Errorf("pod b's web: %+v, want exited (the other pods are read)", c)
	}
	if !slices.Equal(changed, []types.UID{"b"}) {
		t.Errorf("changed %v, want [b]: pod a was not read", changed)
	}
	if p, err := r.Inspect(ctx, "a"); err == nil || !strings.Contains(err.Error(), "a1") {
		t.Errorf("Inspect of pod a: %v, %v; want an error naming container a1", p, err)
	}
	if _, err := r.Inspect(ctx, "b"); err != nil {
		t.Errorf("Inspect of pod b: %v", err)
	}

	// The runtime answers again: the pod is read.
	rt.mu.Lock()
	delete(rt.ctrStatusErr, "a1")
	rt.mu.Unlock()
	if err := r.Relist(ctx); err != nil {
		t.Fatal(err)
	}
	if c := r.Pod("a").Latest("main"); c == nil || c.ID != "a1" || c.State != exited {
		t.Errorf("pod a's main once the runtime answers: %+v, want a1 exited", c)
	}

	// A container removed between the list and its status drops out of the view.
	rt.setState("a0", running)
	rt.mu.Lock()
	rt.ctrStatusErr["a0"] = status.Error(codes.NotFound, "not found")
	rt.mu.Unlock()
	if err := r.Relist(ctx); err != nil {
		t.Fatal(err)
	}
	if got := containerIDs(r.Pod("a")); !slices.Equal(got, []string{"a1"}) {
		t.Errorf("pod a with a0 not found: containers %v, want [a1]", got)
	}
}
