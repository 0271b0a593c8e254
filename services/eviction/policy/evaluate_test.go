package policy

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
)

func q(s string) resource.Quantity { return resource.MustParse(s) }

// mem is a memory observation of available out of 8Gi, at time at.
func mem(available string, at time.Time) Observation {
	a := q(available)
	return Observation{Available: *resource.NewQuantity(a.Value(), resource.BinarySI), Capacity: *resource.NewQuantity(8<<30, resource.BinarySI), Time: at}
}

func mustParse(t *testing.T, kc *kubeletconfigv1beta1.KubeletConfiguration) Config {
	t.Helper()
	cfg, err := Parse(kc)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func keys(ts []Threshold) string {
	var out []string
	for _, t := range ts {
		out = append(out, ThresholdKey(t))
	}
	return strings.Join(out, ",")
}

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// step is one Evaluate round and what it must decide.
type step struct {
	at           time.Duration // after t0
	obs          Observations
	crossed      string
	met          string
	actionable   string // defaults to met
	conditions   []corev1.NodeConditionType
	firstCrossed map[string]time.Duration // the soft thresholds' FirstCrossed after the round, after t0
}

func runSteps(t *testing.T, cfg Config, st *State, steps []step) {
	t.Helper()
	for i, s := range steps {
		now := t0.Add(s.at)
		r := Evaluate(cfg, s.obs, st, now)
		if got := keys(r.Crossed); got != s.crossed {
			t.Errorf("step %d: crossed %q, want %q", i, got, s.crossed)
		}
		if got := keys(r.Met); got != s.met {
			t.Errorf("step %d: met %q, want %q", i, got, s.met)
		}
		wantAct := s.actionable
		if wantAct == "" {
			wantAct = s.met
		}
		if wantAct == "-" {
			wantAct = ""
		}
		if got := keys(r.Actionable); got != wantAct {
			t.Errorf("step %d: actionable %q, want %q", i, got, wantAct)
		}
		if got := r.ConditionList(); !reflect.DeepEqual(got, s.conditions) {
			t.Errorf("step %d: conditions %v, want %v", i, got, s.conditions)
		}
		if len(r.Conditions) != 3 {
			t.Errorf("step %d: conditions map %v lacks some of the three", i, r.Conditions)
		}
		if s.firstCrossed != nil {
			want := map[string]time.Time{}
			for k, d := range s.firstCrossed {
				want[k] = t0.Add(d)
			}
			if !reflect.DeepEqual(st.FirstCrossed, want) {
				t.Errorf("step %d: FirstCrossed %v, want %v", i, st.FirstCrossed, want)
			}
		}
	}
}

var memoryPressure = []corev1.NodeConditionType{corev1.NodeMemoryPressure}

func TestEvaluateHard(t *testing.T) {
	cfg := mustParse(t, &kubeletconfigv1beta1.KubeletConfiguration{
		EvictionHard:                     map[string]string{"memory.available": "100Mi", "nodefs.available": "10%", "pid.available": "5%"},
		EvictionPressureTransitionPeriod: metav1.Duration{Duration: time.Minute},
	})
	nodefs := func(avail int64) Observation {
		return Observation{Available: *resource.NewQuantity(avail, resource.BinarySI), Capacity: *resource.NewQuantity(1000, resource.BinarySI)}
	}
	pids := func(avail int64) Observation {
		return Observation{Available: *resource.NewQuantity(avail, resource.DecimalSI), Capacity: *resource.NewQuantity(4096, resource.DecimalSI)}
	}
	var st State
	runSteps(t, cfg, &st, []step{
		// Exactly at the threshold is not below it. 5% of 4096 PIDs is 204: the kubelet
		// multiplies by the 32-bit percentage (0.0500000007) and rounds down.
		{at: 0, obs: Observations{SignalMemoryAvailable: mem("100Mi", time.Time{}), SignalNodeFsAvailable: nodefs(100), SignalPIDAvailable: pids(204)}, firstCrossed: map[string]time.Duration{}},
		{at: 10 * time.Second, obs: Observations{SignalMemoryAvailable: mem("99Mi", time.Time{}), SignalNodeFsAvailable: nodefs(99), SignalPIDAvailable: pids(203)},
			crossed: "hard/memory.available,hard/nodefs.available,hard/pid.available", met: "hard/memory.available,hard/nodefs.available,hard/pid.available",
			conditions: []corev1.NodeConditionType{corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure}, firstCrossed: map[string]time.Duration{}},
		// A missing signal crosses nothing; its condition holds for the transition period.
		{at: 20 * time.Second, obs: Observations{SignalNodeFsAvailable: nodefs(500)},
			conditions: []corev1.NodeConditionType{corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure}},
		{at: 69 * time.Second, obs: Observations{}, conditions: []corev1.NodeConditionType{corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure}},
		{at: 70 * time.Second, obs: Observations{}},
	})
}

func TestEvaluateSoftGracePeriod(t *testing.T) {
	cfg := mustParse(t, &kubeletconfigv1beta1.KubeletConfiguration{
		EvictionHard:            map[string]string{"memory.available": "100Mi"},
		EvictionSoft:            map[string]string{"memory.available": "1Gi"},
		EvictionSoftGracePeriod: map[string]string{"memory.available": "1m"},
	})
	o := func(a string) Observations { return Observations{SignalMemoryAvailable: mem(a, time.Time{})} }
	var st State
	runSteps(t, cfg, &st, []step{
		{at: 0, obs: o("2Gi"), firstCrossed: map[string]time.Duration{}},
		// Crossed: the condition is raised at once, the threshold is not met yet.
		{at: 10 * time.Second, obs: o("900Mi"), crossed: "soft/memory.available", conditions: memoryPressure,
			firstCrossed: map[string]time.Duration{"soft/memory.available": 10 * time.Second}},
		{at: 69 * time.Second, obs: o("800Mi"), crossed: "soft/memory.available", conditions: memoryPressure,
			firstCrossed: map[string]time.Duration{"soft/memory.available": 10 * time.Second}},
		// The whole grace period crossed: met.
		{at: 70 * time.Second, obs: o("800Mi"), crossed: "soft/memory.available", met: "soft/memory.available", conditions: memoryPressure,
			firstCrossed: map[string]time.Duration{"soft/memory.available": 10 * time.Second}},
		// The hard threshold too; memory signals keep configuration order, hard first.
		{at: 80 * time.Second, obs: o("50Mi"), crossed: "hard/memory.available,soft/memory.available", met: "hard/memory.available,soft/memory.available", conditions: memoryPressure},
		// Recovered: FirstCrossed goes, the condition stays for the transition period.
		{at: 90 * time.Second, obs: o("2Gi"), conditions: memoryPressure, firstCrossed: map[string]time.Duration{}},
		// Crossed again: the grace period starts over.
		{at: 100 * time.Second, obs: o("900Mi"), crossed: "soft/memory.available", conditions: memoryPressure,
			firstCrossed: map[string]time.Duration{"soft/memory.available": 100 * time.Second}},
		{at: 159 * time.Second, obs: o("900Mi"), crossed: "soft/memory.available", conditions: memoryPressure},
		{at: 160 * time.Second, obs: o("900Mi"), crossed: "soft/memory.available", met: "soft/memory.available", conditions: memoryPressure},
	})
}

func TestEvaluateTransitionPeriod(t *testing.T) {
	cfg := mustParse(t, &kubeletconfigv1beta1.KubeletConfiguration{
		EvictionHard: map[string]string{"memory.available": "100Mi", "nodefs.inodesFree": "10"},
	})
	if cfg.TransitionPeriod != 5*time.Minute {
		t.Fatalf("transition period %v", cfg.TransitionPeriod)
	}
	inodes := func(free int64) Observation {
		return Observation{Available: *resource.NewQuantity(free, resource.DecimalSI), Capacity: *resource.NewQuantity(1000, resource.DecimalSI)}
	}
	var st State
	disk := []corev1.NodeConditionType{corev1.NodeDiskPressure}
	both := []corev1.NodeConditionType{corev1.NodeMemoryPressure, corev1.NodeDiskPressure}
	runSteps(t, cfg, &st, []step{
		{at: 0, obs: Observations{SignalMemoryAvailable: mem("50Mi", time.Time{})}, crossed: "hard/memory.available", met: "hard/memory.available", conditions: memoryPressure},
		{at: time.Minute, obs: Observations{SignalMemoryAvailable: mem("1Gi", time.Time{}), SignalNodeFsInodesFree: inodes(5)},
			crossed: "hard/nodefs.inodesFree", met: "hard/nodefs.inodesFree", conditions: both},
		// Memory was last crossed at 0: true until just before 5m.
		{at: 5*time.Minute - time.Nanosecond, obs: Observations{SignalMemoryAvailable: mem("1Gi", time.Time{})}, conditions: both},
		{at: 5 * time.Minute, obs: Observations{SignalMemoryAvailable: mem("1Gi", time.Time{})}, conditions: disk},
		{at: 6 * time.Minute, obs: Observations{}},
		// Crossing again raises it again at once.
		{at: 7 * time.Minute, obs: Observations{SignalMemoryAvailable: mem("10Mi", time.Time{})}, crossed: "hard/memory.available", met: "hard/memory.available", conditions: memoryPressure},
	})
	if !st.ConditionLastObserved[corev1.NodeMemoryPressure].Equal(t0.Add(7*time.Minute)) || !st.ConditionLastObserved[corev1.NodeDiskPressure].Equal(t0.Add(time.Minute)) {
		t.Errorf("ConditionLastObserved %v", st.ConditionLastObserved)
	}
}

func TestEvaluateMinimumReclaim(t *testing.T) {
	cfg := mustParse(t, &kubeletconfigv1beta1.KubeletConfiguration{
		EvictionHard:           map[string]string{"memory.available": "100Mi"},
		EvictionMinimumReclaim: map[string]string{"memory.available": "50Mi"},
	})
	o := func(a string) Observations { return Observations{SignalMemoryAvailable: mem(a, time.Time{})} }
	var st State
	runSteps(t, cfg, &st, []step{
		// Between the threshold and threshold+minReclaim without having been met: nothing.
		{at: 0, obs: o("120Mi")},
		{at: 10 * time.Second, obs: o("90Mi"), crossed: "hard/memory.available", met: "hard/memory.available", conditions: memoryPressure},
		// Back above the threshold but not past the minimum reclaim: still met, not crossed.
		{at: 20 * time.Second, obs: o("120Mi"), met: "hard/memory.available", conditions: memoryPressure},
		{at: 30 * time.Second, obs: o("149Mi"), met: "hard/memory.available", conditions: memoryPressure},
		// At threshold+minReclaim it is resolved.
		{at: 40 * time.Second, obs: o("150Mi"), conditions: memoryPressure},
		{at: 50 * time.Second, obs: o("120Mi"), conditions: memoryPressure},
	})
	if len(st.Met) != 0 {
		t.Errorf("Met %v after recovery", st.Met)
	}
}

func TestEvaluateMinimumReclaimSoft(t *testing.T) {
	cfg := mustParse(t, &kubeletconfigv1beta1.KubeletConfiguration{
		EvictionSoft:            map[string]string{"nodefs.available": "10%"},
		EvictionSoftGracePeriod: map[string]string{"nodefs.available": "30s"},
		EvictionMinimumReclaim:  map[string]string{"nodefs.available": "5%"},
	})
	fs := func(avail int64) Observations {
		return Observations{SignalNodeFsAvailable: {Available: *resource.NewQuantity(avail, resource.BinarySI), Capacity: *resource.NewQuantity(1000, resource.BinarySI)}}
	}
	disk := []corev1.NodeConditionType{corev1.NodeDiskPressure}
	var st State
	runSteps(t, cfg, &st, []step{
		{at: 0, obs: fs(90), crossed: "soft/nodefs.available", conditions: disk, firstCrossed: map[string]time.Duration{"soft/nodefs.available": 0}},
		// Not yet met: recovering to 120 lets it go, minimum reclaim only holds a met threshold.
		{at: 10 * time.Second, obs: fs(120), conditions: disk, firstCrossed: map[string]time.Duration{}},
		{at: 20 * time.Second, obs: fs(90), crossed: "soft/nodefs.available", conditions: disk, firstCrossed: map[string]time.Duration{"soft/nodefs.available": 20 * time.Second}},
		{at: 50 * time.Second, obs: fs(90), crossed: "soft/nodefs.available", met: "soft/nodefs.available", conditions: disk},
		// Held by minimum reclaim: still met, keeps its FirstCrossed.
		{at: 60 * time.Second, obs: fs(120), met: "soft/nodefs.available", conditions: disk, firstCrossed: map[string]time.Duration{"soft/nodefs.available": 20 * time.Second}},
		{at: 70 * time.Second, obs: fs(150), conditions: disk, firstCrossed: map[string]time.Duration{}},
	})
}

func TestEvaluateActionable(t *testing.T) {
	cfg := mustParse(t, &kubeletconfigv1beta1.KubeletConfiguration{
		EvictionHard: map[string]string{"memory.available": "100Mi", "nodefs.available": "10%"},
	})
	fs := func(avail int64, at time.Time) Observation {
		return Observation{Available: *resource.NewQuantity(avail, resource.BinarySI), Capacity: *resource.NewQuantity(1000, resource.BinarySI), Time: at}
	}
	m1, m2 := t0.Add(time.Second), t0.Add(11*time.Second)
	both := []corev1.NodeConditionType{corev1.NodeMemoryPressure, corev1.NodeDiskPressure}
	var st State
	runSteps(t, cfg, &st, []step{
		// Memory comes first whatever the configuration order.
		{at: 2 * time.Second, obs: Observations{SignalMemoryAvailable: mem("10Mi", m1), SignalNodeFsAvailable: fs(10, m1)},
			crossed: "hard/memory.available,hard/nodefs.available", met: "hard/memory.available,hard/nodefs.available", conditions: both},
		// The same measurements again: met, but already acted on.
		{at: 10 * time.Second, obs: Observations{SignalMemoryAvailable: mem("10Mi", m1), SignalNodeFsAvailable: fs(10, m1)},
			crossed: "hard/memory.available,hard/nodefs.available", met: "hard/memory.available,hard/nodefs.available", actionable: "-", conditions: both},
		// A new memory measurement; nodefs of unknown time is always new.
		{at: 12 * time.Second, obs: Observations{SignalMemoryAvailable: mem("10Mi", m2), SignalNodeFsAvailable: fs(10, time.Time{})},
			crossed: "hard/memory.available,hard/nodefs.available", met: "hard/memory.available,hard/nodefs.available", conditions: both},
		{at: 13 * time.Second, obs: Observations{SignalMemoryAvailable: mem("10Mi", m2), SignalNodeFsAvailable: fs(10, time.Time{})},
			crossed: "hard/memory.available,hard/nodefs.available", met: "hard/memory.available,hard/nodefs.available", actionable: "hard/nodefs.available", conditions: both},
	})
}

func TestEvaluateRestart(t *testing.T) {
	cfg := mustParse(t, &kubeletconfigv1beta1.KubeletConfiguration{
		EvictionHard:            map[string]string{"nodefs.available": "10%"},
		EvictionSoft:            map[string]string{"memory.available": "1Gi"},
		EvictionSoftGracePeriod: map[string]string{"memory.available": "1m"},
		EvictionMinimumReclaim:  map[string]string{"nodefs.available": "10%"},
	})
	fs := func(avail int64) Observation {
		return Observation{Available: *resource.NewQuantity(avail, resource.BinarySI), Capacity: *resource.NewQuantity(1000, resource.BinarySI), Time: t0}
	}
	var st State
	r := Evaluate(cfg, Observations{SignalMemoryAvailable: mem("500Mi", t0), SignalNodeFsAvailable: fs(50)}, &st, t0)
	if keys(r.Met) != "hard/nodefs.available" {
		t.Fatalf("met %s", keys(r.Met))
	}

	// The service restarts: its state goes through its JSON checkpoint.
	b, err := json.Marshal(&st)
	if err != nil {
		t.Fatal(err)
	}
	var restored State
	if err := json.Unmarshal(b, &restored); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(restored, st) {
		t.Fatalf("round trip:\n%+v\nwant\n%+v\n(%s)", restored, st, b)
	}
	for _, field := range []string{`"firstCrossed"`, `"conditionLastObserved"`, `"met"`, `"lastObserved"`} {
		if !strings.Contains(string(b), field) {
			t.Errorf("checkpoint %s has no %s", b, field)
		}
	}

	// The grace period goes on from before the restart, and nodefs is still held by its
	// minimum reclaim.
	later := t0.Add(time.Minute)
	r = Evaluate(cfg, Observations{SignalMemoryAvailable: mem("500Mi", later), SignalNodeFsAvailable: fs(150)}, &restored, later)
	if got := keys(r.Met); got != "soft/memory.available,hard/nodefs.available" {
		t.Errorf("met after restart %q", got)
	}
	if got := keys(r.Crossed); got != "soft/memory.available" {
		t.Errorf("crossed after restart %q", got)
	}

	// A fresh state would have started the grace period over.
	var fresh State
	r = Evaluate(cfg, Observations{SignalMemoryAvailable: mem("500Mi", later), SignalNodeFsAvailable: fs(150)}, &fresh, later)
	if got := keys(r.Met); got != "" {
		t.Errorf("met from a fresh state %q", got)
	}
}

func TestEvaluatePercentageOfCapacity(t *testing.T) {
	cfg := mustParse(t, &kubeletconfigv1beta1.KubeletConfiguration{
		EvictionHard: map[string]string{"memory.available": "10%"},
	})
	var st State
	// 10% of 8Gi is 858993472 bytes: the kubelet multiplies by the 32-bit percentage
	// (0.100000001490116) and rounds down.
	r := Evaluate(cfg, Observations{SignalMemoryAvailable: mem("858993472", time.Time{})}, &st, t0)
	if len(r.Met) != 0 {
		t.Errorf("met at exactly 10%%")
	}
	r = Evaluate(cfg, Observations{SignalMemoryAvailable: mem("858993471", time.Time{})}, &st, t0)
	if len(r.Met) != 1 {
		t.Errorf("not met just below 10%%")
	}
}

func TestEvaluateSoftZeroGraceActsHard(t *testing.T) {
	cfg := mustParse(t, &kubeletconfigv1beta1.KubeletConfiguration{
		EvictionSoft:            map[string]string{"memory.available": "1Gi"},
		EvictionSoftGracePeriod: map[string]string{"memory.available": "0s"},
	})
	var st State
	r := Evaluate(cfg, Observations{SignalMemoryAvailable: mem("10Mi", time.Time{})}, &st, t0)
	if keys(r.Met) != "soft/memory.available" {
		t.Errorf("met %q", keys(r.Met))
	}
}

func TestReclaimed(t *testing.T) {
	cfg := mustParse(t, &kubeletconfigv1beta1.KubeletConfiguration{
		EvictionHard:            map[string]string{"nodefs.available": "10%", "imagefs.available": "100"},
		EvictionSoft:            map[string]string{"nodefs.available": "20%"},
		EvictionSoftGracePeriod: map[string]string{"nodefs.available": "1h"},
		EvictionMinimumReclaim:  map[string]string{"nodefs.available": "5%"},
	})
	fs := func(avail int64) Observation {
		return Observation{Available: *resource.NewQuantity(avail, resource.BinarySI), Capacity: *resource.NewQuantity(1000, resource.BinarySI)}
	}
	hard := cfg.Thresholds[1]
	if hard.Signal != SignalNodeFsAvailable || hard.Soft {
		t.Fatalf("threshold %+v", hard)
	}
	for avail, want := range map[int64]bool{99: false, 100: false, 149: false, 150: true, 400: true} {
		if got := Reclaimed(hard, fs(avail)); got != want {
			t.Errorf("Reclaimed at %d: %v", avail, got)
		}
	}
	// ReclaimedAll tests every threshold, soft ones whatever their grace period.
	if ReclaimedAll(cfg, Observations{SignalNodeFsAvailable: fs(200)}) {
		t.Error("ReclaimedAll with the soft threshold's signal below 20%+5%")
	}
	if !ReclaimedAll(cfg, Observations{SignalNodeFsAvailable: fs(250)}) {
		t.Error("not ReclaimedAll at 25%")
	}
	if ReclaimedAll(cfg, Observations{SignalNodeFsAvailable: fs(250), SignalImageFsAvailable: fs(99)}) {
		t.Error("ReclaimedAll with imagefs below its threshold")
	}
	if !ReclaimedAll(cfg, Observations{}) {
		t.Error("missing signals are not below anything")
	}
}

func TestNodeReclaim(t *testing.T) {
	type want struct{ containers, images bool }
	single, dedicated, split := FsLayout{}, FsLayout{DedicatedImageFs: true}, FsLayout{DedicatedImageFs: true, SplitContainerFs: true}
	tests := []struct {
		s      Signal
		layout FsLayout
		want   want
	}{
		{SignalMemoryAvailable, single, want{}},
		{SignalAllocatableMemoryAvailable, dedicated, want{}},
		{SignalPIDAvailable, split, want{}},
		{SignalNodeFsAvailable, single, want{true, true}},
		{SignalNodeFsInodesFree, single, want{true, true}},
		{SignalImageFsAvailable, single, want{true, true}},
		{SignalContainerFsInodesFree, single, want{true, true}},
		{SignalNodeFsAvailable, dedicated, want{}},
		{SignalNodeFsInodesFree, dedicated, want{}},
		{SignalImageFsAvailable, dedicated, want{true, true}},
		{SignalImageFsInodesFree, dedicated, want{true, true}},
		{SignalContainerFsAvailable, dedicated, want{true, true}},
		{SignalNodeFsAvailable, split, want{true, false}},
		{SignalContainerFsAvailable, split, want{true, false}},
		{SignalContainerFsInodesFree, split, want{true, false}},
		{SignalImageFsAvailable, split, want{false, true}},
		{SignalImageFsInodesFree, split, want{false, true}},
		{SignalNodeFsAvailable, FsLayout{SplitContainerFs: true}, want{true, true}},
		{"bogus", single, want{}},
	}
	for _, tc := range tests {
		c, i := NodeReclaim(tc.s, tc.layout)
		if (want{c, i}) != tc.want {
			t.Errorf("NodeReclaim(%s, %+v) = %v, %v; want %+v", tc.s, tc.layout, c, i, tc.want)
		}
	}
}

func TestSignals(t *testing.T) {
	for _, s := range Signals {
		if !s.Valid() || ConditionFor(s) == "" || Resource(s) == "" {
			t.Errorf("signal %s: valid %v, condition %q, resource %q", s, s.Valid(), ConditionFor(s), Resource(s))
		}
	}
	if Signal("memory.free").Valid() || ConditionFor("memory.free") != "" {
		t.Error("an unknown signal is valid")
	}
	for s, c := range map[Signal]corev1.NodeConditionType{
		SignalMemoryAvailable: corev1.NodeMemoryPressure, SignalAllocatableMemoryAvailable: corev1.NodeMemoryPressure,
		SignalPIDAvailable: corev1.NodePIDPressure, SignalImageFsInodesFree: corev1.NodeDiskPressure, SignalContainerFsAvailable: corev1.NodeDiskPressure,
	} {
		if ConditionFor(s) != c {
			t.Errorf("ConditionFor(%s) = %s", s, ConditionFor(s))
		}
	}
	for s, r := range map[Signal]corev1.ResourceName{
		SignalMemoryAvailable: "memory", SignalNodeFsAvailable: "ephemeral-storage", SignalImageFsInodesFree: "inodes", SignalPIDAvailable: "pids",
	} {
		if Resource(s) != r {
			t.Errorf("Resource(%s) = %s", s, Resource(s))
		}
	}
}

func TestEvaluateNilState(t *testing.T) {
	cfg := mustParse(t, &kubeletconfigv1beta1.KubeletConfiguration{EvictionHard: map[string]string{"memory.available": "100Mi"}})
	r := Evaluate(cfg, Observations{SignalMemoryAvailable: mem("1Mi", t0)}, nil, t0)
	if keys(r.Met) != "hard/memory.available" || !r.Conditions[corev1.NodeMemoryPressure] {
		t.Errorf("result %+v", r)
	}
}
