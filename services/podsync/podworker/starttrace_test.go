package podworker

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

func TestANewPodsStartIsTracedOncePerStep(t *testing.T) {
	cri := newMemCRI("busybox:1")
	reg := prometheus.NewRegistry()
	h := newHarnessOpts(t, cri, func(o *Options) { o.Registry = reg })
	pod := syncPod(corev1.RestartPolicyAlways, nil, "app")
	h.m.Update(pod, "api")
	h.ev.waitFor(t, "app running", func(o Observed) bool { return isRunning(o, "app") })
	// Another sync and a restart add nothing: only the first start is traced.
	h.m.Trigger(pod.UID)
	cri.exit(t, "app", 1)
	h.m.Trigger(pod.UID)
	h.ev.waitFor(t, "app running again", func(o Observed) bool {
		return isRunning(o, "app") && statusOf(o, "app").RestartCount == 1
	})
	time.Sleep(50 * time.Millisecond)

	counts := phaseCounts(t, reg)
	// No volumes: the step is still passed (nothing to prepare).
	for _, phase := range startPhases {
		if counts[phase] != 1 {
			t.Errorf("phase %s observed %d times, want once: %v", phase, counts[phase], counts)
		}
	}
}

func TestAnAdoptedPodIsNotTraced(t *testing.T) {
	cri := newMemCRI("busybox:1")
	pod := syncPod(corev1.RestartPolicyAlways, nil, "app")
	// The runtime runs the pod already (an earlier podsync started it).
	first := newHarness(t, cri)
	first.m.Update(pod, "api")
	first.ev.waitFor(t, "app running", func(o Observed) bool { return isRunning(o, "app") })

	reg := prometheus.NewRegistry()
	h := newHarnessOpts(t, cri, func(o *Options) { o.Registry = reg })
	h.m.Update(pod, "api")
	h.ev.waitFor(t, "app running", func(o Observed) bool { return isRunning(o, "app") })
	if counts := phaseCounts(t, reg); len(counts) != 0 {
		t.Errorf("an adopted pod's start traced: %v", counts)
	}
}

// phaseCounts are the observations of unitlet_podsync_pod_start_phase_seconds by phase.
func phaseCounts(t *testing.T, reg *prometheus.Registry) map[string]uint64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	for _, mf := range mfs {
		if mf.GetName() != "unitlet_podsync_pod_start_phase_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			out[m.GetLabel()[0].GetValue()] = m.GetHistogram().GetSampleCount()
		}
	}
	return out
}

// A pod's worker syncs again for a new spec, labels, annotations or deletion, not for a
// status the API now has (each status write brings one back), unless readiness gates make
// the status's conditions the pod's input.
func TestOnlyMeaningfulChangesSyncThePodAgain(t *testing.T) {
	base := syncPod(corev1.RestartPolicyAlways, nil, "app")
	base.ResourceVersion = "1"
	next := func(change func(p *corev1.Pod)) *corev1.Pod {
		p := base.DeepCopy()
		p.ResourceVersion = "2"
		change(p)
		return p
	}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want bool
	}{
		{"the same version", base.DeepCopy(), false},
		{"status only", next(func(p *corev1.Pod) { p.Status.Phase = corev1.PodRunning }), false},
		{"spec", next(func(p *corev1.Pod) { p.Spec.Containers[0].Image = "busybox:2" }), true},
		{"labels", next(func(p *corev1.Pod) { p.Labels = map[string]string{"a": "b"} }), true},
		{"annotations", next(func(p *corev1.Pod) { p.Annotations = map[string]string{"a": "b"} }), true},
		{"deleted", next(func(p *corev1.Pod) { p.DeletionGracePeriodSeconds = ptr.To[int64](30) }), true},
		{"a readiness gate's condition", next(func(p *corev1.Pod) {
			p.Status.Conditions = []corev1.PodCondition{{Type: "example.com/gate", Status: corev1.ConditionTrue}}
		}), false},
	} {
		if got := needsSync(base, tc.pod); got != tc.want {
			t.Errorf("%s: needsSync %v, want %v", tc.name, got, tc.want)
		}
	}
	gated := base.DeepCopy()
	gated.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: "example.com/gate"}}
	set := gated.DeepCopy()
	set.ResourceVersion = "2"
	set.Status.Conditions = []corev1.PodCondition{{Type: "example.com/gate", Status: corev1.ConditionTrue}}
	if !needsSync(gated, set) {
		t.Error("a pod with a readiness gate whose condition was set: no sync")
	}
	if !needsSync(nil, base) {
		t.Error("a new pod: no sync")
	}
}
