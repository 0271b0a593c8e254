package podworker

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
)

// The steps of a new pod's first start, in order. For each, the time from podsync first
// seeing the pod until the step ended is unitlet_podsync_pod_start_phase_seconds{phase}:
// where a pod's start time goes on this node (the benchmark prints it at 100 pods).
const (
	phaseSyncStarted       = "sync_started"       // the pod's worker began its first sync
	phaseCgroup            = "cgroup"             // the pod's cgroup made
	phaseVolumes           = "volumes"            // unitlet-volumes prepared its volumes
	phaseSandbox           = "sandbox"            // RunPodSandbox returned (network set up)
	phaseContainersStarted = "containers_started" // every container runs, read back from the runtime
	phaseReported          = "reported"           // that status went to the bus
)

var startPhases = []string{phaseSyncStarted, phaseCgroup, phaseVolumes, phaseSandbox, phaseContainersStarted, phaseReported}

func newStartPhaseMetric() *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "unitlet_podsync_pod_start_phase_seconds",
		Help:    "Seconds from podsync first seeing a new pod until each step of its first start ended (sync_started, cgroup, volumes, sandbox, containers_started, reported).",
		Buckets: prometheus.ExponentialBuckets(0.005, 2, 15),
	}, []string{"phase"})
}

// startTrace records when a new pod's start steps ended, once per pod: a pod whose worker
// found it already in the runtime (podsync restarted) is not traced.
type startTrace struct {
	mu      sync.Mutex
	decided bool // the first sync said whether the pod is new
	active  bool
	marks   map[string]time.Time
}

// begin is called at each sync with whether the runtime has nothing of the pod; the first
// call decides whether the pod is traced.
func (t *startTrace) begin(fresh bool, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.decided {
		return
	}
	t.decided, t.active = true, fresh
	if fresh {
		t.marks = map[string]time.Time{phaseSyncStarted: now}
	}
}

// mark records the end of a step, the first time only.
func (t *startTrace) mark(phase string, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.marks[phase]; t.active && !ok {
		t.marks[phase] = now
	}
}

// finish observes every recorded step against firstSeen and ends the trace.
func (t *startTrace) finish(h *prometheus.HistogramVec, firstSeen time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.active {
		return
	}
	t.active = false
	if h == nil {
		return
	}
	for _, phase := range startPhases {
		if at, ok := t.marks[phase]; ok {
			h.WithLabelValues(phase).Observe(at.Sub(firstSeen).Seconds())
		}
	}
}

// allContainersRunning: the status has every container of the spec running.
func allContainersRunning(pod *corev1.Pod, status *corev1.PodStatus) bool {
	if len(status.ContainerStatuses) < len(pod.Spec.Containers) {
		return false
	}
	for _, cs := range status.ContainerStatuses {
		if cs.State.Running == nil {
			return false
		}
	}
	return true
}
