package podworker

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
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
