package podstatus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"

	podsyncv1 "github.com/unitlet/unitlet/proto/unitlet/podsync/v1"
	"github.com/unitlet/unitlet/shared/bus"
	"github.com/unitlet/unitlet/shared/payload"
)

const node = "node-1"

// fakeWatcher is podsync's pod watch in memory: each open gets a new stream the test
// feeds message by message.
type fakeWatcher struct {
	mu      sync.Mutex
	opens   []uint64
	streams []*fakeStream
}

type item struct {
	r   *podsyncv1.WatchPodsResponse
	err error
}

type fakeStream struct {
	ctx   context.Context
	ch    chan item
	mu    sync.Mutex
	recvs int
}

func (w *fakeWatcher) WatchPods(ctx context.Context, after uint64) (bus.Stream[*podsyncv1.WatchPodsResponse], error) {
	s := &fakeStream{ctx: ctx, ch: make(chan item)}
	w.mu.Lock()
	w.opens = append(w.opens, after)
	w.streams = append(w.streams, s)
	w.mu.Unlock()
	return s, nil
}

func (s *fakeStream) Recv() (*podsyncv1.WatchPodsResponse, error) {
	s.mu.Lock()
	s.recvs++
	s.mu.Unlock()
	select {
	case it := <-s.ch:
		return it.r, it.err
	case <-s.ctx.Done():
		return nil, s.ctx.Err()
	}
}

// stream waits for the n-th open (1-based).
func (w *fakeWatcher) stream(t *testing.T, n int) *fakeStream {
	t.Helper()
	var s *fakeStream
	eventually(t, fmt.Sprintf("podsync watch opened %d times", n), func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		if len(w.streams) >= n {
			s = w.streams[n-1]
			return true
		}
		return false
	})
	return s
}

// send delivers a message on the newest stream and waits until the manager has taken it
// (it asks for the next one).
func (w *fakeWatcher) send(t *testing.T, r *podsyncv1.WatchPodsResponse) {
	t.Helper()
	w.mu.Lock()
	n := len(w.streams)
	w.mu.Unlock()
	s := w.stream(t, max(n, 1))
	s.mu.Lock()
	want := s.recvs + 1
	s.mu.Unlock()
	s.ch <- item{r: r}
	eventually(t, "message taken", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.recvs >= want
	})
}

// fail breaks the newest stream.
func (w *fakeWatcher) fail(t *testing.T, err error) {
	t.Helper()
	w.mu.Lock()
	s := w.streams[len(w.streams)-1]
	w.mu.Unlock()
	s.ch <- item{err: err}
}

func eventually(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting: %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// fixture runs a Manager over a fake clientset and an in-memory watch, recording patches
// and deletions through reactors (the fake's Actions would also do, but reactors see them
// in order with what was sent).
type fixture struct {
	client *fake.Clientset
	w      *fakeWatcher
	m      *Manager
	reg    *prometheus.Registry

	mu      sync.Mutex
	patches []recorded
	deletes []metav1.DeleteOptions
	calls   []string // "patch ns/name", "delete ns/name"
}

type recorded struct {
	name  string
	patch map[string]any
}

func newFixture(t *testing.T, clk clock.Clock, qps float32, objs ...runtime.Object) *fixture {
	t.Helper()
	f := buildFixture(t, clk, qps, objs...)
	f.start(t)
	return f
}

// buildFixture is newFixture without starting the manager: add reactors, then start.
func buildFixture(t *testing.T, clk clock.Clock, qps float32, objs ...runtime.Object) *fixture {
	t.Helper()
	f := &fixture{client: fake.NewClientset(objs...), w: &fakeWatcher{}, reg: prometheus.NewRegistry()}
	f.client.PrependReactor("patch", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		pa := a.(k8stesting.PatchAction)
		if pa.GetSubresource() != "status" {
			t.Errorf("patch of subresource %q, want status", pa.GetSubresource())
		}
		if pa.GetPatchType() != types.StrategicMergePatchType {
			t.Errorf("patch type %s, want strategic merge", pa.GetPatchType())
		}
		var p map[string]any
		if err := json.Unmarshal(pa.GetPatch(), &p); err != nil {
			t.Errorf("patch is not JSON: %v", err)
		}
		f.mu.Lock()
		f.patches = append(f.patches, recorded{name: pa.GetName(), patch: p})
		f.calls = append(f.calls, "patch "+pa.GetNamespace()+"/"+pa.GetName())
		f.mu.Unlock()
		return false, nil, nil
	})
	f.client.PrependReactor("delete", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		da := a.(k8stesting.DeleteAction)
		f.mu.Lock()
		f.deletes = append(f.deletes, da.GetDeleteOptions())
		f.calls = append(f.calls, "delete "+da.GetNamespace()+"/"+da.GetName())
		f.mu.Unlock()
		return false, nil, nil
	})
	if clk == nil {
		clk = clock.RealClock{}
	}
	f.m = New(Options{
		Client: f.client, NodeName: node, Pods: f.w, QPS: qps, Clock: clk, Registry: f.reg,
		BusMinBackoff: time.Millisecond, BusMaxBackoff: 5 * time.Millisecond,
	})
	return f
}

func (f *fixture) start(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Run did not return after cancel")
		}
	})
}

// attempts counts the calls of a verb the fake clientset saw, failed ones included.
func (f *fixture) attempts(verb string) int {
	n := 0
	for _, a := range f.client.Actions() {
		if a.GetVerb() == verb && a.GetResource().Resource == "pods" {
			n++
		}
	}
	return n
}

func (f *fixture) patchCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.patches)
}

// settle waits until the manager has nothing pending (each sent message is taken before
// send returns, so pending counts it).
func (f *fixture) settle(t *testing.T) {
	t.Helper()
	eventually(t, "no pending statuses", func() bool {
		_, pending := f.m.Stats()
		return pending == 0
	})
}

func (f *fixture) apiPod(t *testing.T, name string) *corev1.Pod {
	t.Helper()
	p, err := f.client.CoreV1().Pods("ns").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get pod %s: %v", name, err)
	}
	return p
}

func apiPod(name, uid string, st corev1.PodStatus) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(uid)},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
		Status:     st,
	}
}

func running(ready bool, at metav1.Time) corev1.PodStatus {
	return corev1.PodStatus{
		Phase:     corev1.PodRunning,
		StartTime: &at,
		PodIP:     "10.0.0.5",
		Conditions: []corev1.PodCondition{
			cond(corev1.PodReadyToStartContainers, true, at),
			cond(corev1.PodInitialized, true, at),
			cond(corev1.ContainersReady, ready, at),
			cond(corev1.PodReady, ready, at),
			cond(corev1.PodScheduled, true, at),
		},
		ContainerStatuses: []corev1.ContainerStatus{{Name: "c", Ready: ready, Image: "busybox",
			// The container's start comes from the runtime: the same after a restart.
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: t0}}}},
	}
}

func psPod(uid, name, source string, st corev1.PodStatus) *podsyncv1.Pod {
	raw, err := json.Marshal(st)
	if err != nil {
		panic(err)
	}
	return &podsyncv1.Pod{Uid: uid, Namespace: "ns", Name: name, Source: source, Status: raw}
}

func msg(seq uint64, snapshot bool, pods ...*podsyncv1.Pod) *podsyncv1.WatchPodsResponse {
	return &podsyncv1.WatchPodsResponse{Sequence: seq, Snapshot: snapshot, Pods: pods}
}

func condOf(p *corev1.Pod, typ corev1.PodConditionType) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == typ {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

func TestWritesOnlyWhenStatusChanges(t *testing.T) {
	f := newFixture(t, nil, 0, apiPod("a", "uid-a", corev1.PodStatus{Phase: corev1.PodPending}))
	f.w.send(t, msg(1, true, psPod("uid-a", "a", SourceAPI, running(false, t0))))
	f.settle(t)
	if n := f.patchCount(); n != 1 {
		t.Fatalf("patches after the first status = %d, want 1", n)
	}
	if got := f.apiPod(t, "a"); got.Status.Phase != corev1.PodRunning || condOf(got, corev1.PodReady) == nil {
		t.Fatalf("API status after write = %+v", got.Status)
	}

	// The same observation with newer times (podsync recomputed it): nothing to write.
	f.w.send(t, msg(2, false, psPod("uid-a", "a", SourceAPI, running(false, t1))))
	f.settle(t)
	if n := f.patchCount(); n != 1 {
		t.Fatalf("patches after an unchanged status = %d, want 1", n)
	}

	// Ready turns True: one write, Ready's transition time moves, the others' stay.
	f.w.send(t, msg(3, false, psPod("uid-a", "a", SourceAPI, running(true, t1))))
	f.settle(t)
	if n := f.patchCount(); n != 2 {
		t.Fatalf("patches after Ready changed = %d, want 2", n)
	}
	got := f.apiPod(t, "a")
	if c := condOf(got, corev1.PodReady); c.Status != corev1.ConditionTrue || !c.LastTransitionTime.Equal(&t1) {
		t.Errorf("Ready = %+v, want True since %v", c, t1)
	}
	if c := condOf(got, corev1.PodScheduled); !c.LastTransitionTime.Equal(&t0) {
		t.Errorf("PodScheduled moved to %v, want %v", c.LastTransitionTime, t0)
	}
	if writes, pending := f.m.Stats(); writes != 2 || pending != 0 {
		t.Errorf("Stats = %d, %d; want 2, 0", writes, pending)
	}
	if v := testutil.ToFloat64(f.m.metrics.writes.WithLabelValues(resultSuccess)); v != 2 {
		t.Errorf("writes_total{success} = %v, want 2", v)
	}
	if p := f.patches[1].patch; p["metadata"].(map[string]any)["uid"] != "uid-a" {
		t.Errorf("patch lacks the UID precondition: %v", p)
	}
}

func TestRestartWithSameStatusWritesNothing(t *testing.T) {
	// What a previous run left in the API, plus a readiness gate's condition someone else owns.
	st := running(true, t0)
	st.Conditions = append(st.Conditions, cond("example.com/gate", true, t0))
	f := newFixture(t, nil, 0, apiPod("a", "uid-a", st))
	// A restarted podsync: same observation, its own (later) times, no gate condition.
	f.w.send(t, msg(7, true, psPod("uid-a", "a", SourceAPI, running(true, t1))))
	// Once the pod is known and no longer dirty, its sync has decided: a wrong write
	// would have been made by then.
	eventually(t, "pod a synced", func() bool {
		f.m.mu.Lock()
		defer f.m.mu.Unlock()
		e := f.m.pods["uid-a"]
		return e != nil && !e.dirty
	})
	if n := f.patchCount(); n != 0 {
		t.Fatalf("a restart wrote %d patches: %v", n, f.patches)
	}
	got := f.apiPod(t, "a")
	if c := condOf(got, "example.com/gate"); c == nil {
		t.Error("the readiness gate's condition is gone")
	}
}

func TestStaticPodWritesItsMirrorPod(t *testing.T) {
	mirror := apiPod("static-node-1", "mirror-uid", corev1.PodStatus{Phase: corev1.PodPending})
	mirror.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "hash"}
	f := newFixture(t, nil, 0, mirror)

	p := psPod("static-uid", "static-node-1", "file", running(true, t0))
	f.w.send(t, msg(1, true, p))
	f.settle(t)
	if n := f.patchCount(); n != 0 {
		t.Fatalf("patched %d times before the mirror pod was known", n)
	}

	p = psPod("static-uid", "static-node-1", "file", running(true, t0))
	p.MirrorUid = "mirror-uid"
	f.w.send(t, msg(2, false, p))
	f.settle(t)
	if n := f.patchCount(); n != 1 {
		t.Fatalf("patches = %d, want 1 to the mirror pod", n)
	}
	if uid := f.patches[0].patch["metadata"].(map[string]any)["uid"]; uid != "mirror-uid" {
		t.Errorf("patch precondition uid = %v, want mirror-uid", uid)
	}
	if got := f.apiPod(t, "static-node-1"); got.Status.Phase != corev1.PodRunning {
		t.Errorf("mirror pod phase = %s, want Running", got.Status.Phase)
	}
}

func TestTerminatedDeletingPodIsDeletedWithGraceZero(t *testing.T) {
	now := metav1.Now()
	deleting := apiPod("a", "uid-a", running(true, t0))
	deleting.DeletionTimestamp = &now
	kept := apiPod("b", "uid-b", running(true, t0))
	f := newFixture(t, nil, 0, deleting, kept)

	final := running(false, t0)
	final.Phase = corev1.PodSucceeded
	a := psPod("uid-a", "a", SourceAPI, final)
	a.Terminated = true
	b := psPod("uid-b", "b", SourceAPI, final)
	b.Terminated = true
	f.w.send(t, msg(1, true, a, b))
	f.settle(t)
	eventually(t, "deletion", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return len(f.deletes) > 0
	})

	f.mu.Lock()
	calls := append([]string(nil), f.calls...)
	opts := f.deletes[0]
	f.mu.Unlock()
	if i, j := slices.Index(calls, "patch ns/a"), slices.Index(calls, "delete ns/a"); i < 0 || j < i {
		t.Errorf("calls = %v, want the final status written before the delete of ns/a", calls)
	}
	if opts.GracePeriodSeconds == nil || *opts.GracePeriodSeconds != 0 {
		t.Errorf("grace period = %v, want 0", opts.GracePeriodSeconds)
	}
	if opts.Preconditions == nil || opts.Preconditions.UID == nil || *opts.Preconditions.UID != "uid-a" {
		t.Errorf("preconditions = %+v, want uid-a", opts.Preconditions)
	}
	if _, err := f.client.CoreV1().Pods("ns").Get(context.Background(), "a", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("pod a still in the API: %v", err)
	}
	if got := f.apiPod(t, "b"); got.Status.Phase != corev1.PodSucceeded {
		t.Errorf("pod b phase = %s, want Succeeded (and not deleted: no deletionTimestamp)", got.Status.Phase)
	}
	if v := testutil.ToFloat64(f.m.metrics.deletions); v != 1 {
		t.Errorf("deletions_total = %v, want 1", v)
	}

	// The API starts deleting b later: the informer's update brings the deletion.
	got := f.apiPod(t, "b")
	got.DeletionTimestamp = &now
	if _, err := f.client.CoreV1().Pods("ns").Update(context.Background(), got, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "deletion of b", func() bool {
		_, err := f.client.CoreV1().Pods("ns").Get(context.Background(), "b", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})

	// podsync forgets them: so does the manager.
	a.Removed, b.Removed = true, true
	f.w.send(t, msg(2, false, a, b))
	eventually(t, "removed pods forgotten", func() bool {
		f.m.mu.Lock()
		defer f.m.mu.Unlock()
		return len(f.m.pods) == 0
	})
}

func TestLatestStatusWinsWhileAWriteIsInFlight(t *testing.T) {
	f := buildFixture(t, nil, 0, apiPod("a", "uid-a", corev1.PodStatus{Phase: corev1.PodPending}))
	release := make(chan struct{})
	var once sync.Once
	entered := make(chan struct{})
	f.client.PrependReactor("patch", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		once.Do(func() { close(entered); <-release })
		return false, nil, nil
	})
	f.start(t)
	v := func(msg string) corev1.PodStatus {
		st := running(false, t0)
		st.Message = msg
		return st
	}
	f.w.send(t, msg(1, true, psPod("uid-a", "a", SourceAPI, v("v1"))))
	<-entered
	f.w.send(t, msg(2, false, psPod("uid-a", "a", SourceAPI, v("v2"))))
	f.w.send(t, msg(3, false, psPod("uid-a", "a", SourceAPI, v("v3"))))
	close(release)
	f.settle(t)

	if got := f.apiPod(t, "a"); got.Status.Message != "v3" {
		t.Errorf("API message = %q, want v3", got.Status.Message)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var msgs []any
	for _, p := range f.patches {
		msgs = append(msgs, p.patch["status"].(map[string]any)["message"])
	}
	if fmt.Sprint(msgs) != "[v1 v3]" {
		t.Errorf("written messages = %v, want [v1 v3] (v2 superseded)", msgs)
	}
}

func TestRateLimit(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Now())
	var objs []runtime.Object
	var pods []*podsyncv1.Pod
	for i := range 20 {
		name, uid := fmt.Sprintf("p%02d", i), fmt.Sprintf("uid-%02d", i)
		objs = append(objs, apiPod(name, uid, corev1.PodStatus{Phase: corev1.PodPending}))
		pods = append(pods, psPod(uid, name, SourceAPI, running(true, t0)))
	}
	f := newFixture(t, clk, 5, objs...) // 5/s, burst 10
	f.w.send(t, msg(1, true, pods...))

	steady := func(want int) {
		t.Helper()
		eventually(t, fmt.Sprintf("%d writes", want), func() bool { return f.patchCount() >= want })
		eventually(t, "workers waiting on the limiter", clk.HasWaiters)
		time.Sleep(50 * time.Millisecond)
		if n := f.patchCount(); n != want {
			t.Fatalf("writes = %d, want %d (QPS 5, burst 10)", n, want)
		}
	}
	steady(10) // the burst
	clk.Step(time.Second)
	steady(15) // five more per second
	clk.Step(time.Second)
	steady(20) // and the last five
	f.settle(t)
}

func TestResumeAfterStreamErrorWritesNoDuplicates(t *testing.T) {
	f := newFixture(t, nil, 0,
		apiPod("a", "uid-a", corev1.PodStatus{Phase: corev1.PodPending}),
		apiPod("b", "uid-b", corev1.PodStatus{Phase: corev1.PodPending}))
	a, b := psPod("uid-a", "a", SourceAPI, running(true, t0)), psPod("uid-b", "b", SourceAPI, running(false, t0))
	f.w.send(t, msg(1, true, a, b))
	f.settle(t)
	if n := f.patchCount(); n != 2 {
		t.Fatalf("patches = %d, want 2", n)
	}

	f.w.fail(t, errors.New("connection reset"))
	f.w.stream(t, 2)
	// podsync answers the reconnect with a snapshot (its hub no longer had seq 1's
	// successors), the same pods observed anew.
	f.w.send(t, msg(9, true, psPod("uid-a", "a", SourceAPI, running(true, t1)), psPod("uid-b", "b", SourceAPI, running(false, t1))))
	f.settle(t)
	f.w.fail(t, errors.New("connection reset"))
	f.w.stream(t, 3)
	// Then only what changed since 9.
	f.w.send(t, msg(10, false, psPod("uid-b", "b", SourceAPI, running(true, t1))))
	f.settle(t)

	f.w.mu.Lock()
	opens := fmt.Sprint(f.w.opens)
	f.w.mu.Unlock()
	if opens != "[0 1 9]" {
		t.Errorf("watch opened after %s, want [0 1 9]", opens)
	}
	if n := f.patchCount(); n != 3 {
		t.Errorf("patches = %d, want 3 (no rewrite after the reconnect, one for b's change)", n)
		for _, p := range f.patches {
			t.Logf("%s: %v", p.name, p.patch)
		}
	}
}

func TestSnapshotForgetsPodsItLacks(t *testing.T) {
	f := newFixture(t, nil, 0, apiPod("a", "uid-a", corev1.PodStatus{}), apiPod("b", "uid-b", corev1.PodStatus{}))
	f.w.send(t, msg(1, true, psPod("uid-a", "a", SourceAPI, running(true, t0)), psPod("uid-b", "b", SourceAPI, running(true, t0))))
	f.settle(t)
	f.w.send(t, msg(2, true, psPod("uid-a", "a", SourceAPI, running(true, t0))))
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if _, ok := f.m.pods["uid-b"]; ok || len(f.m.pods) != 1 {
		t.Errorf("pods after a snapshot without b: %v", f.m.pods)
	}
}

// TestSnapshotInParts: a snapshot podsync sends in parts replaces the pods only at its
// last part, and pods in later parts are never forgotten in between (a forgotten pod
// would be synced again); a stream that breaks between parts reopens from 0 and the
// unfinished parts are dropped.
func TestSnapshotInParts(t *testing.T) {
	f := newFixture(t, nil, 0,
		apiPod("a", "uid-a", corev1.PodStatus{}), apiPod("b", "uid-b", corev1.PodStatus{}),
		apiPod("c", "uid-c", corev1.PodStatus{}), apiPod("d", "uid-d", corev1.PodStatus{}))
	a, b, c, d := psPod("uid-a", "a", SourceAPI, running(true, t0)), psPod("uid-b", "b", SourceAPI, running(true, t0)),
		psPod("uid-c", "c", SourceAPI, running(true, t0)), psPod("uid-d", "d", SourceAPI, running(true, t0))
	f.w.send(t, msg(1, true, a, b, c))
	f.settle(t)
	written := f.patchCount()
	uids := func() []string {
		f.m.mu.Lock()
		defer f.m.mu.Unlock()
		var out []string
		for uid := range f.m.pods {
			out = append(out, uid)
		}
		slices.Sort(out)
		return out
	}

	part := func(seq uint64, snapshot, continues bool, pods ...*podsyncv1.Pod) *podsyncv1.WatchPodsResponse {
		return &podsyncv1.WatchPodsResponse{Sequence: seq, Snapshot: snapshot, SnapshotContinues: continues, Pods: pods}
	}
	// The first part (a alone) forgets nothing yet; nor does the second (b).
	f.w.send(t, part(0, true, true, a))
	f.w.send(t, part(0, false, true, b))
	if got := fmt.Sprint(uids()); got != "[uid-a uid-b uid-c]" {
		t.Errorf("pods during a snapshot in parts: %s, want a, b and c still", got)
	}
	// The stream breaks: the resumed watch starts from 0 with a new snapshot, whose end
	// (d, sequence 5) makes a, d the pods; c is forgotten, b not kept from the lost parts.
	f.w.fail(t, errors.New("connection reset"))
	f.w.stream(t, 2)
	f.w.send(t, part(0, true, true, a))
	f.w.send(t, part(5, false, false, d))
	f.settle(t)
	if got := fmt.Sprint(uids()); got != "[uid-a uid-d]" {
		t.Errorf("pods after the snapshot: %s, want a and d", got)
	}
	f.w.mu.Lock()
	opens := fmt.Sprint(f.w.opens)
	f.w.mu.Unlock()
	if opens != "[0 0]" {
		t.Errorf("watch opened after %s, want [0 0] (a part is not a point to resume from)", opens)
	}
	// Only d was new: a's status was written before and did not change.
	if n := f.patchCount(); n != written+1 {
		t.Errorf("patches = %d, want %d (d's only)", n, written+1)
	}
	// A change after the snapshot is a change.
	f.w.send(t, msg(6, false, psPod("uid-b", "b", SourceAPI, running(true, t0))))
	if got := fmt.Sprint(uids()); got != "[uid-a uid-b uid-d]" {
		t.Errorf("pods after a change: %s", got)
	}
}

func TestRetriesFailedWritesAndDropsGonePods(t *testing.T) {
	f := buildFixture(t, nil, 0, apiPod("a", "uid-a", corev1.PodStatus{}))
	var mu sync.Mutex
	failures := 2
	f.client.PrependReactor("patch", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		if failures > 0 {
			failures--
			if failures == 0 {
				return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "pods"}, "a", errors.New("changed"))
			}
			return true, nil, apierrors.NewInternalError(errors.New("etcd hiccup"))
		}
		return false, nil, nil
	})
	f.start(t)
	f.w.send(t, msg(1, true,
		psPod("uid-a", "a", SourceAPI, running(true, t0)),
		psPod("uid-gone", "gone", SourceAPI, running(true, t0)), // not in the API: dropped
	))
	f.settle(t)
	if got := f.apiPod(t, "a"); got.Status.Phase != corev1.PodRunning {
		t.Errorf("phase after retries = %s, want Running", got.Status.Phase)
	}
	if v := testutil.ToFloat64(f.m.metrics.writes.WithLabelValues(resultError)); v != 1 {
		t.Errorf("writes_total{error} = %v, want 1", v)
	}
	if v := testutil.ToFloat64(f.m.metrics.writes.WithLabelValues(resultConflict)); v != 1 {
		t.Errorf("writes_total{conflict} = %v, want 1", v)
	}
	if n := f.attempts("patch"); n != 3 {
		t.Errorf("patch attempts = %d, want 3 (two failures, one success; none for the gone pod)", n)
	}
}

type fakePodSyncClient struct {
	podsyncv1.PodSyncServiceClient
	after uint64
}

func (c *fakePodSyncClient) WatchPods(_ context.Context, in *podsyncv1.WatchPodsRequest, _ ...grpc.CallOption) (grpc.ServerStreamingClient[podsyncv1.WatchPodsResponse], error) {
	c.after = in.GetAfterSequence()
	return nil, errors.New("unavailable")
}

func TestFromClientPassesTheSequence(t *testing.T) {
	c := &fakePodSyncClient{}
	if _, err := FromClient(c).WatchPods(context.Background(), 42); err == nil {
		t.Error("the client's error was lost")
	}
	if c.after != 42 {
		t.Errorf("after_sequence = %d, want 42", c.after)
	}
}

// The node authorizer answers Forbidden for a pod that no longer exists (it is no longer
// bound to the node): such a pod is dropped like a NotFound one, not retried for ever.
func TestForbiddenReadOfAPodMissingFromTheInformerDropsIt(t *testing.T) {
	f := buildFixture(t, nil, 0, apiPod("a", "uid-a", corev1.PodStatus{}))
	f.client.PrependReactor("get", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.(k8stesting.GetAction).GetName() == "gone" {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "gone", errors.New("no relationship found between node 'n' and this object"))
		}
		return false, nil, nil
	})
	f.start(t)
	f.w.send(t, msg(1, true,
		psPod("uid-a", "a", SourceAPI, running(true, t0)),
		psPod("uid-gone", "gone", SourceAPI, running(true, t0)),
	))
	f.settle(t)
	if n := f.attempts("get"); n != 1 {
		t.Errorf("reads = %d, want 1: a Forbidden read of a pod the informer lacks means it is gone", n)
	}
	if got := f.apiPod(t, "a"); got.Status.Phase != corev1.PodRunning {
		t.Errorf("phase of a = %s, want Running", got.Status.Phase)
	}
}

func TestStatusInAnUnknownSchemaIsNotWritten(t *testing.T) {
	f := newFixture(t, nil, 0, apiPod("a", "uid-a", corev1.PodStatus{Phase: corev1.PodPending}), apiPod("b", "uid-b", corev1.PodStatus{Phase: corev1.PodPending}))
	newer := psPod("uid-a", "a", SourceAPI, running(false, t0))
	newer.StatusSchema = "core/v2.PodStatus"
	current := psPod("uid-b", "b", SourceAPI, running(false, t0))
	current.StatusSchema = payload.SchemaPodStatus
	f.w.send(t, msg(1, true, newer, current))
	f.settle(t)
	if got := f.apiPod(t, "a").Status.Phase; got != corev1.PodPending {
		t.Errorf("pod a, its status in an unknown schema: phase %s in the API, want Pending (nothing written)", got)
	}
	if got := f.apiPod(t, "b").Status.Phase; got != corev1.PodRunning {
		t.Errorf("pod b: phase %s in the API, want Running", got)
	}
}
