package eviction

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/unitlet/unitlet/services/eviction/observe"
	"github.com/unitlet/unitlet/services/eviction/policy"
	"github.com/unitlet/unitlet/shared/checkpoint"
)

type fakeObserver struct {
	mu   sync.Mutex
	clk  *clocktesting.FakeClock
	mem  int64 // memory.available
	disk int64 // nodefs.available
	pods map[types.UID]observe.Pod
	// afterReclaim, when set, is nodefs.available once podsync reclaimed.
	afterReclaim int64
	reclaimed    bool
}

func (f *fakeObserver) Node(context.Context) (observe.Node, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	disk := f.disk
	if f.reclaimed && f.afterReclaim > 0 {
		disk = f.afterReclaim
	}
	return observe.Node{Time: f.clk.Now(), Signals: map[string]observe.Value{
		"memory.available": {Available: f.mem, Capacity: 8 << 30},
		"nodefs.available": {Available: disk, Capacity: 100 << 30},
	}}, nil
}

func (f *fakeObserver) Pods(context.Context) (map[types.UID]observe.Pod, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pods, nil
}

type kill struct {
	uid         types.UID
	reason, msg string
	grace       int64
}

type fakePodSync struct {
	mu       sync.Mutex
	obs      *fakeObserver
	pods     []ActivePod
	kills    []kill
	gone     map[types.UID]bool
	reclaims int
}

func (f *fakePodSync) ActivePods(context.Context) ([]ActivePod, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []ActivePod
	for _, p := range f.pods {
		if !f.gone[p.Pod.UID] {
			out = append(out, p)
		}
	}
	return out, nil
}

func (f *fakePodSync) Gone(_ context.Context, uid types.UID) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.gone[uid], nil
}

func (f *fakePodSync) Kill(_ context.Context, uid types.UID, reason, msg string, grace int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.kills = append(f.kills, kill{uid: uid, reason: reason, msg: msg, grace: grace})
	f.gone[uid] = true
	return nil
}

func (f *fakePodSync) ReclaimDisk(context.Context, bool) (Reclaimed, error) {
	f.mu.Lock()
	f.reclaims++
	f.mu.Unlock()
	f.obs.mu.Lock()
	f.obs.reclaimed = true
	f.obs.mu.Unlock()
	return Reclaimed{Containers: 2}, nil
}

func testPod(name string, priority int32) ActivePod {
	return ActivePod{Pod: &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)},
		Spec:       corev1.PodSpec{Priority: &priority, Containers: []corev1.Container{{Name: "c"}}},
	}}
}

func usage(name string, mem int64) observe.Pod {
	return observe.Pod{UID: types.UID("uid-" + name), Namespace: "default", Name: name, Memory: mem,
		Containers: []observe.Container{{Name: "c", Memory: mem}}}
}

type fixture struct {
	clk   *clocktesting.FakeClock
	obs   *fakeObserver
	ps    *fakePodSync
	store *checkpoint.Store
}

func newFixture(t *testing.T) *fixture {
	clk := clocktesting.NewFakeClock(time.Unix(1_000_000, 0))
	obs := &fakeObserver{clk: clk, mem: 4 << 30, disk: 50 << 30, pods: map[types.UID]observe.Pod{
		"uid-low": usage("low", 1<<30), "uid-high": usage("high", 2<<30),
	}}
	store, err := checkpoint.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{clk: clk, obs: obs, store: store, ps: &fakePodSync{obs: obs, gone: map[types.UID]bool{},
		pods: []ActivePod{testPod("low", 10), testPod("high", 1000)}}}
}

func (f *fixture) manager(t *testing.T, kc *kubeletconfigv1beta1.KubeletConfiguration) *Manager {
	t.Helper()
	cfg, err := policy.Parse(kc)
	if err != nil {
		t.Fatal(err)
	}
	return NewManager(Options{Observer: f.obs, PodSync: f.ps, Store: f.store, Clock: f.clk,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}, cfg)
}

func (f *fixture) round(m *Manager) types.UID {
	f.clk.Step(10 * time.Second)
	return m.synchronize(context.Background())
}

func TestHardMemoryThresholdEvictsOnePodByPriority(t *testing.T) {
	f := newFixture(t)
	m := f.manager(t, &kubeletconfigv1beta1.KubeletConfiguration{EvictionHard: map[string]string{"memory.available": "1Gi"}})
	if uid := f.round(m); uid != "" {
		t.Fatalf("evicted %s with 4Gi available", uid)
	}
	f.obs.mem = 512 << 20
	if uid := f.round(m); uid != "uid-low" {
		t.Fatalf("evicted %q, want the lower-priority pod", uid)
	}
	k := f.ps.kills[0]
	if k.reason != "Evicted" || k.grace != 1 {
		t.Errorf("kill %+v: want reason Evicted, grace 1 (hard)", k)
	}
	want := "The node was low on resource: memory. Threshold quantity: 1Gi, available: 512Mi. "
	if len(k.msg) < len(want) || k.msg[:len(want)] != want {
		t.Errorf("message %q, want it to start with %q", k.msg, want)
	}
	conds := m.Conditions()
	if !conds[0].True || conds[0].Type != corev1.NodeMemoryPressure {
		t.Errorf("conditions %+v: want MemoryPressure true", conds)
	}
	if ok, reason, msg := m.Admit(&corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}}); ok || reason != "Evicted" || msg != "The node had condition: [MemoryPressure]. " {
		t.Errorf("a BestEffort pod under memory pressure: admit %v %q %q", ok, reason, msg)
	}
	st := m.State()
	if len(st.Evictions) != 1 || st.Evictions[0].Name != "low" || st.Evictions[0].Signal != "memory.available" {
		t.Errorf("evictions %+v", st.Evictions)
	}
}

func TestSoftGracePeriodAndConditionsSurviveARestart(t *testing.T) {
	f := newFixture(t)
	kc := &kubeletconfigv1beta1.KubeletConfiguration{
		EvictionSoft:              map[string]string{"memory.available": "1Gi"},
		EvictionSoftGracePeriod:   map[string]string{"memory.available": "1m"},
		EvictionMaxPodGracePeriod: 5,
	}
	m := f.manager(t, kc)
	f.obs.mem = 512 << 20
	f.round(m) // first crossed
	f.round(m) // 10 s in
	if len(f.ps.kills) != 0 {
		t.Fatal("evicted within the grace period")
	}
	// SIGKILL: a new manager from the same checkpoint.
	m = f.manager(t, kc)
	if !m.Conditions()[0].True {
		t.Error("MemoryPressure was not restored from the checkpoint")
	}
	for range 3 {
		f.round(m) // 40 s after the first crossing
	}
	if len(f.ps.kills) != 0 {
		t.Fatal("evicted before the grace period ended: the restart did not restart it, but it counted short")
	}
	f.round(m) // 50 s
	f.round(m) // 60 s: met
	if len(f.ps.kills) != 1 {
		t.Fatalf("kills %+v after the grace period from the first crossing: want one", f.ps.kills)
	}
	if g := f.ps.kills[0].grace; g != 5 {
		t.Errorf("grace %d, want evictionMaxPodGracePeriod 5", g)
	}
}

func TestAPendingEvictionIsWaitedForAfterARestart(t *testing.T) {
	f := newFixture(t)
	kc := &kubeletconfigv1beta1.KubeletConfiguration{EvictionHard: map[string]string{"memory.available": "1Gi"}}
	m := f.manager(t, kc)
	ev := Eviction{UID: "uid-low", Name: "low", Namespace: "default", Signal: "memory.available"}
	m.mu.Lock()
	m.st.Pending = &ev
	m.saveLocked()
	m.mu.Unlock()

	m = f.manager(t, kc)
	done := make(chan struct{})
	go func() { m.resumePending(context.Background()); close(done) }()
	select {
	case <-done:
		t.Fatal("did not wait for the pod evicted before the restart")
	case <-time.After(50 * time.Millisecond):
	}
	f.ps.mu.Lock()
	f.ps.gone["uid-low"] = true
	f.ps.mu.Unlock()
	for {
		select {
		case <-done:
			m.mu.Lock()
			if m.st.Pending != nil {
				t.Errorf("after the wait: pending %+v", m.st.Pending)
			}
			m.mu.Unlock()
			return
		case <-time.After(10 * time.Millisecond):
			f.clk.Step(cleanupPoll)
		}
	}
}

func TestDiskPressureReclaimsFirstAndStopsWhenThatIsEnough(t *testing.T) {
	f := newFixture(t)
	m := f.manager(t, &kubeletconfigv1beta1.KubeletConfiguration{EvictionHard: map[string]string{"nodefs.available": "10%"}})
	f.obs.disk, f.obs.afterReclaim = 5<<30, 20<<30
	if uid := f.round(m); uid != "" {
		t.Errorf("evicted %s though reclaiming freed enough", uid)
	}
	if f.ps.reclaims != 1 {
		t.Errorf("reclaims %d, want 1", f.ps.reclaims)
	}
	if !m.Conditions()[1].True {
		t.Error("DiskPressure not true while nodefs.available was below its threshold")
	}
}

func TestAReloadReplacesTheThresholds(t *testing.T) {
	f := newFixture(t)
	m := f.manager(t, &kubeletconfigv1beta1.KubeletConfiguration{EvictionHard: map[string]string{"memory.available": "100Mi"}})
	f.obs.mem = 512 << 20
	if uid := f.round(m); uid != "" {
		t.Fatalf("evicted %s above the threshold", uid)
	}
	cfg, err := policy.Parse(&kubeletconfigv1beta1.KubeletConfiguration{EvictionHard: map[string]string{"memory.available": "1Gi"}})
	if err != nil {
		t.Fatal(err)
	}
	m.SetConfig(cfg)
	if uid := f.round(m); uid != "uid-low" {
		t.Fatalf("after the reload: evicted %q, want uid-low", uid)
	}
}

func TestASubscriberGetsTheConditionsAtOnceAndAfterARestart(t *testing.T) {
	f := newFixture(t)
	kc := &kubeletconfigv1beta1.KubeletConfiguration{EvictionHard: map[string]string{"memory.available": "1Gi"}}
	m := f.manager(t, kc)
	sub := m.Subscribe(0)
	ev := <-sub.Events()
	if len(ev.Value) != 3 || ev.Value[0].True {
		t.Fatalf("first event %+v: want the three conditions, none true", ev)
	}
	sub.Close()
	f.obs.mem = 512 << 20
	f.round(m)
	last := m.hub.Seq()

	// A new process: the subscriber resumes from what it saw of the old one.
	f.clk.Step(time.Second)
	m = f.manager(t, kc)
	sub = m.Subscribe(last)
	defer sub.Close()
	select {
	case ev := <-sub.Events():
		if !ev.Value[0].True {
			t.Errorf("after the restart: %+v, want MemoryPressure true (restored)", ev.Value)
		}
	case <-time.After(time.Second):
		t.Fatal("a subscriber resuming after a restart got nothing")
	}
}
