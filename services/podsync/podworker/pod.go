package podworker

import (
	"bytes"
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"

	"github.com/unitlet/unitlet/services/podsync/criconfig"
)

// worker runs one pod.
type worker struct {
	m         *Manager
	uid       types.UID
	source    string
	firstSeen time.Time
	trace     startTrace
	wake      chan struct{}
	started   bool // guarded by m.mu
	// acted is set when a sync changed something in the runtime (killPod's goroutines set
	// it too): the sync then reads the pod's state again before reporting.
	acted atomic.Bool
	// specMu keeps one new version of the pod (setSpec, retryResize) taken at a time.
	specMu sync.Mutex

	mu             sync.Mutex
	pod            *corev1.Pod
	terminating    bool
	unwanted       bool // forget the pod once it is terminated
	grace          *int64
	killReason     string
	killMessage    string
	restarts       map[string]restartRequest
	waiting        map[string]waitingState
	terminated     bool
	reported       []byte // the last reported state, to report only changes
	startTime      time.Time
	lastConditions []corev1.PodCondition
	// desired is the pod as its source last gave it; pod is desired with the allocated
	// resources (see allocation and resize.go).
	desired *corev1.Pod
	alloc   allocation
	resize  resizeState
	// mounts are the containers' volume mounts prepared for mountsFor.
	mounts    map[string][]criconfig.Mount
	mountsFor *corev1.Pod
	// volumeFailures counts the pod's prepares that failed in a row.
	volumeFailures int
	// cgroupFor is the pod version whose cgroup was last made or adopted.
	cgroupFor *corev1.Pod
	// disruption is the DisruptionTarget condition of an evicted pod, nil otherwise.
	disruption *corev1.PodCondition
	// keepSucceeded: a pod killed with a reason keeps the phase Succeeded when every
	// container succeeded (a node shutdown's kill; an eviction's is Failed whatever).
	keepSucceeded bool
	// final is the status the pod ended with: once terminated, a pod's status no longer
	// follows the runtime (whose dead containers garbage collection may remove), as the
	// kubelet never changes a terminal pod's status.
	final *corev1.PodStatus
	// exits are, by container name, when the latest instance finished on the manager's
	// clock (exitedAt): the crash-loop backoff counts from there. running are when an
	// instance was last known to run: started by this worker, or seen running by a sync.
	exits   map[string]instanceSeen
	running map[string]instanceSeen
	// unknownKilled are, by container name, the instances killed because the runtime no
	// longer knew their state (killUnknown), and when the kill was asked: an app container
	// among them that did not finish before it is started again whatever the restart policy.
	unknownKilled map[string]instanceSeen
	// resetCounts are, by container name, the restart count a container shows since its
	// pod restarted all its containers (restartall.go); resetWaiting the containers so
	// removed whose next instance is not made yet.
	resetCounts  map[string]int32
	resetWaiting map[string]bool
}

// instanceSeen is a moment of a container instance on the manager's clock.
type instanceSeen struct {
	id string
	at time.Time
}

type restartRequest struct {
	containerID string
	reason      KillReason
}

// waitingState is why a container is not running, when the runtime cannot say it.
type waitingState struct{ reason, message string }

func newWorker(m *Manager, pod *corev1.Pod, source string) *worker {
	alloc := m.allocate(pod)
	inProgress := false
	for name, r := range alloc.Containers {
		if act, ok := alloc.Actuated[name]; ok && cpuMemory(act) != cpuMemory(r) {
			inProgress = true // a resize a podsync before this one allocated
		}
	}
	return &worker{
		m: m, uid: pod.UID, source: source, desired: pod, pod: alloc.apply(pod, alloc.differs(pod)), alloc: alloc,
		resize: resizeState{inProgress: inProgress},
		// A pod the API is deleting is terminating from the worker's first sync: the worker
		// may sync before setSpec runs (it starts first), and a sync that took it for a
		// running pod would start its containers again (fault run of 0c162cb: a deleted
		// pod's completed init container run again by a restarted podsync).
		terminating: pod.DeletionTimestamp != nil, grace: pod.DeletionGracePeriodSeconds,
		firstSeen:     m.o.Clock.Now(),
		wake:          make(chan struct{}, 1),
		restarts:      map[string]restartRequest{},
		unknownKilled: map[string]instanceSeen{},
		waiting:       map[string]waitingState{},
		exits:         map[string]instanceSeen{},
		running:       map[string]instanceSeen{},
	}
}

func (w *worker) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// setSpec takes the newest version of the pod and syncs it again when the version changes
// what the pod should be (needsSync); a change of its status alone, which each write of
// the pod's own status brings back, only replaces the copy.
func (w *worker) setSpec(pod *corev1.Pod) {
	w.specMu.Lock()
	defer w.specMu.Unlock()
	w.mu.Lock()
	old := w.pod
	w.desired = pod
	w.mu.Unlock()
	pod, resizeChanged := w.takeSpec(pod)
	w.mu.Lock()
	w.pod = pod
	if pod.DeletionTimestamp != nil && !w.terminating {
		w.terminating = true
		w.grace = pod.DeletionGracePeriodSeconds
	}
	w.mu.Unlock()
	if needsSync(old, pod) || resizeChanged {
		w.poke()
	}
}

// retryResize takes the desired pod again while a resize of it waits (Deferred): the
// other pods may have made room.
func (w *worker) retryResize() {
	w.mu.Lock()
	deferred := w.resize.pending != nil && w.resize.pending.Reason == corev1.PodReasonDeferred
	desired := w.desired
	w.mu.Unlock()
	if !deferred || desired == nil {
		return
	}
	w.specMu.Lock()
	defer w.specMu.Unlock()
	pod, _ := w.takeSpec(desired)
	w.mu.Lock()
	if w.desired == desired {
		w.pod = pod
	}
	w.mu.Unlock()
}

// needsSync reports whether a new version of a pod asks for a sync, by the kubelet's rule
// for pod updates: its spec, labels, annotations or deletion changed. A status change
// matters only to a pod with readiness gates, whose conditions others set in the status
// (the kubelet reconciles those pods' readiness). Without it, every status write of any
// pod on the node woke every pod's worker, and each sync reads the pod from the runtime:
// at 100 pods starting at once, 22 reads a pod, 9000 CRI calls contending with the starts.
func needsSync(old, pod *corev1.Pod) bool {
	if old == nil || old == pod {
		return old == nil
	}
	if old.ResourceVersion != "" && old.ResourceVersion == pod.ResourceVersion && old.Generation == pod.Generation {
		return false
	}
	if !equality.Semantic.DeepEqual(old.Spec, pod.Spec) ||
		!equality.Semantic.DeepEqual(old.Labels, pod.Labels) ||
		!equality.Semantic.DeepEqual(old.Annotations, pod.Annotations) ||
		!equality.Semantic.DeepEqual(old.DeletionTimestamp, pod.DeletionTimestamp) ||
		!equality.Semantic.DeepEqual(old.DeletionGracePeriodSeconds, pod.DeletionGracePeriodSeconds) {
		return true
	}
	return len(pod.Spec.ReadinessGates) > 0 && !equality.Semantic.DeepEqual(old.Status.Conditions, pod.Status.Conditions)
}

func (w *worker) terminate(grace *int64, reason, message string, unwanted bool) {
	w.mu.Lock()
	if !w.terminating || grace != nil && (w.grace == nil || *grace < *w.grace) {
		w.grace = grace
	}
	w.terminating = true
	w.unwanted = w.unwanted || unwanted
	if reason != "" {
		w.killReason, w.killMessage = reason, message
	}
	w.mu.Unlock()
	w.poke()
}

// evict terminates the pod for node pressure: a Warning event with reason and message,
// then the pod ends Failed with them and the DisruptionTarget condition. A pod that has
// already terminated keeps its final status and gets no event.
func (w *worker) evict(grace *int64, reason, message string) {
	if pod, ok := w.disrupt(message, false); ok {
		w.event(pod, corev1.EventTypeWarning, reason, message)
		w.terminate(grace, reason, message, false)
	}
}

// shutdown terminates the pod for a node shutdown, as the kubelet's shutdown manager does:
// no event; the pod ends Failed (Succeeded when every container succeeded) with reason and
// message and the DisruptionTarget condition. A pod that has already terminated keeps its
// final status.
func (w *worker) shutdown(grace int64, reason, message string) {
	if _, ok := w.disrupt(message, true); ok {
		w.terminate(&grace, reason, message, false)
	}
}

// disrupt gives a pod the kubelet's DisruptionTarget condition (TerminationByKubelet, the
// message) before it is killed, unless it has terminated already (false).
func (w *worker) disrupt(message string, keepSucceeded bool) (*corev1.Pod, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.terminated {
		return nil, false
	}
	w.disruption = &corev1.PodCondition{
		Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, ObservedGeneration: w.pod.Generation,
		Reason: corev1.PodReasonTerminationByKubelet, Message: message,
	}
	w.keepSucceeded = keepSucceeded
	return w.pod, true
}

func (w *worker) restart(name, containerID string, reason KillReason) {
	w.mu.Lock()
	w.restarts[name] = restartRequest{containerID: containerID, reason: reason}
	w.mu.Unlock()
	w.poke()
}

func (w *worker) setWaiting(name, reason, message string) {
	w.mu.Lock()
	if reason == "" {
		delete(w.waiting, name)
	} else {
		w.waiting[name] = waitingState{reason, message}
	}
	w.mu.Unlock()
}

// loop syncs the pod whenever something happens to it, and every resync period.
func (w *worker) loop(ctx context.Context) {
	clk := w.m.o.Clock
	for {
		next := w.syncOnce(ctx)
		if next < 0 {
			return // forgotten
		}
		if next == 0 || next > w.m.o.Resync {
			next = w.m.o.Resync
		}
		t := clk.NewTimer(next)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-w.wake:
		case <-t.C():
		}
		t.Stop()
	}
}

// syncOnce runs one sync and reports the result. It returns when to sync again at the
// latest (0: the resync period), or -1 when the worker is done.
func (w *worker) syncOnce(ctx context.Context) time.Duration {
	start := w.m.o.Clock.Now()
	res := w.sync(ctx)
	w.m.metrics.workerDuration.WithLabelValues(res.operation).Observe(w.m.o.Clock.Since(start).Seconds())
	if res.forget {
		// Gone from the manager before the bus hears Removed, so a reader of the
		// event never finds the worker still there.
		w.m.forget(w)
		w.report(res)
		return -1
	}
	w.report(res)
	return res.next
}

// report sends the pod's state when it changed since the last report. A sync that could
// not read the runtime reports nothing: the last report stands.
func (w *worker) report(res syncResult) {
	if res.unread && !res.forget {
		return
	}
	w.mu.Lock()
	obs := Observed{
		Pod: w.pod, Source: w.source, Status: res.status,
		Terminating: w.terminating, Terminated: res.terminated, Removed: res.forget,
		FirstSeen: w.firstSeen, Containers: res.containers,
	}
	b, _ := json.Marshal(struct {
		O Observed
		V string
	}{obs, w.pod.ResourceVersion})
	same := bytes.Equal(b, w.reported)
	w.reported = b
	w.mu.Unlock()
	if !same && w.m.o.Report != nil {
		w.m.o.Report(obs)
	}
	if res.forget || res.terminated {
		w.trace.finish(nil, w.firstSeen)
	} else if allContainersRunning(obs.Pod, &obs.Status) {
		w.trace.mark(phaseReported, w.m.o.Clock.Now())
		w.trace.finish(w.m.metrics.startPhase, w.firstSeen)
	}
}
