// Package prober runs the liveness, readiness and startup probes of running containers:
// one worker per container and probe kind, on the probe's period, counting results
// against its thresholds, and reporting each change of a result.
package prober

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/unitlet/unitlet/services/podsync/lifecycle"
)

// Kind is a kind of probe.
type Kind string

// The probe kinds.
const (
	Liveness  Kind = "liveness"
	Readiness Kind = "readiness"
	Startup   Kind = "startup"
)

// metricLabel is the kind as the kubelet's probe_type label spells it.
func (k Kind) metricLabel() string {
	switch k {
	case Liveness:
		return "Liveness"
	case Readiness:
		return "Readiness"
	case Startup:
		return "Startup"
	default:
		return "UNKNOWN"
	}
}

// The API's defaults, applied when a probe arrives without them (an undefaulted manifest).
const (
	defaultTimeoutSeconds   = 1
	defaultPeriodSeconds    = 10
	defaultSuccessThreshold = 1
	defaultFailureThreshold = 3
)

// restartGrace: a container that started this long before the manager did was running
// before this process (podsync restarted); its probe state is taken from the pod's status.
const restartGrace = 10 * time.Second

// Result is a probe result for one container instance.
type Result struct {
	PodUID        types.UID
	ContainerName string
	ContainerID   string
	Kind          Kind
	Success       bool
	// Message is the probe's output or failure message ("" for a container's initial result).
	Message string
}

type containerKey struct {
	podUID types.UID
	name   string
}

// container is a running container the manager probes. Guarded by Manager.mu.
type container struct {
	key       containerKey
	pod       *corev1.Pod
	podIP     string
	spec      *corev1.Container
	id        string
	startedAt time.Time
	workers   map[Kind]*worker
}

func (c *container) probe(k Kind) *corev1.Probe {
	switch k {
	case Liveness:
		return c.spec.LivenessProbe
	case Readiness:
		return c.spec.ReadinessProbe
	case Startup:
		return c.spec.StartupProbe
	}
	return nil
}

// startedLocked reports whether the startup probe passed (true without one).
func (c *container) startedLocked() bool {
	w := c.workers[Startup]
	return w == nil || w.result == success
}

// Manager runs the probe workers of the node's running containers.
type Manager struct {
	runner  probeRunner
	clk     clock.Clock
	log     *slog.Logger
	metrics *metrics
	start   time.Time
	// jitter picks the random delay before a worker's first probe.
	jitter func(period time.Duration) time.Duration

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// events records the probes' Unhealthy and ProbeWarning events (nil: none).
	events func(pod *corev1.Pod, eventType, reason, message string)

	mu         sync.Mutex
	containers map[containerKey]*container
	running    int // worker goroutines not yet returned
	stopped    bool

	// Updates pass through an unbounded queue, so that no worker and no caller of
	// SetContainer ever blocks on a slow reader.
	qmu     sync.Mutex
	queue   []Result
	qready  chan struct{}
	updates chan Result
}

// NewManager returns a running Manager. It runs exec probes through ex, keeps time with
// clk, registers the kubelet's prober metrics on reg (nil: none) and logs to log.
func NewManager(ex lifecycle.Execer, clk clock.Clock, reg prometheus.Registerer, log *slog.Logger) *Manager {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("component", "prober")
	met, err := newMetrics(reg)
	if err != nil {
		log.Error("register prober metrics", "err", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &Manager{
		runner:     probeRunner{ex: ex, http: lifecycle.NewHTTPClient(0)},
		clk:        clk,
		log:        log,
		metrics:    met,
		start:      clk.Now(),
		jitter:     func(p time.Duration) time.Duration { return rand.N(p) },
		ctx:        ctx,
		cancel:     cancel,
		containers: make(map[containerKey]*container),
		qready:     make(chan struct{}, 1),
		updates:    make(chan Result),
	}
	m.wg.Add(1)
	go m.forward()
	return m
}

// RecordEvents makes the manager record its events (Unhealthy for each failed probe run,
// ProbeWarning for a success with a warning) through record. Call it before the first
// SetContainer.
func (m *Manager) RecordEvents(record func(pod *corev1.Pod, eventType, reason, message string)) {
	m.events = record
}

func (m *Manager) event(pod *corev1.Pod, eventType, reason, message string) {
	if m.events != nil {
		m.events(pod, eventType, reason, message)
	}
}

// Updates delivers each change of a probe result (not every probe run), in order, for
// podsync to act on: a liveness or startup failure means the container is to be restarted
// (each is delivered once per container ID); readiness changes go into the status. A new
// container ID's initial results (readiness false, liveness true) count as changes.
// The channel is closed by Stop.
func (m *Manager) Updates() <-chan Result {
	return m.updates
}

// SetContainer starts or updates the probe workers for a running container of pod (whose
// IP is podIP). A new containerID starts the container's results afresh and readiness is
// probed at once; startedAt is when this container started (initialDelaySeconds counts
// from it; only the first call for a container ID sets it, see placed). Call it again with the same ID when the pod object changes (e.g. its
// deletionTimestamp is set). The manager copies c but keeps pod as given: treat it as
// immutable afterwards (as objects from an informer's cache are).
func (m *Manager) SetContainer(pod *corev1.Pod, podIP string, c *corev1.Container, containerID string, startedAt time.Time) {
	key := containerKey{podUID: pod.UID, name: c.Name}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopped {
		return
	}
	ct := m.containers[key]
	if ct == nil {
		ct = &container{key: key, workers: make(map[Kind]*worker)}
		m.containers[key] = ct
	}
	newID := ct.id != containerID
	ct.pod, ct.podIP, ct.spec = pod, podIP, c.DeepCopy()
	if newID || ct.startedAt.IsZero() {
		ct.startedAt = m.placed(startedAt)
	}
	if newID {
		ct.id = containerID
	}

	for _, k := range [...]Kind{Startup, Readiness, Liveness} {
		w := ct.workers[k]
		switch {
		case ct.probe(k) == nil:
			if w != nil {
				m.stopWorkerLocked(w)
			}
		case w == nil:
			if pod.DeletionTimestamp != nil && k != Readiness {
				continue // a pod being deleted gets no liveness or startup probing
			}
			w = m.newWorkerLocked(ct, k)
			w.resetLocked(true)
		case newID:
			w.resetLocked(false)
			if k == Readiness {
				w.triggerNow()
			}
		}
	}
}

// placed is startedAt on the manager's clock, taken once per container instance. A start
// time read from the runtime is a reading of the node's wall clock, which may step: its
// age by the wall clock now is kept as an instant with Go's monotonic reading, so a
// later step moves neither the end of initialDelaySeconds nor the restart grace. A start
// after now (the clock stepped back since) counts from now.
func (m *Manager) placed(startedAt time.Time) time.Time {
	now := m.clk.Now()
	return now.Add(-max(now.Sub(startedAt), 0))
}

// RemoveContainer stops the probe workers of a container and forgets its results.
func (m *Manager) RemoveContainer(podUID types.UID, containerName string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.removeLocked(containerKey{podUID: podUID, name: containerName})
}

// RemovePod stops the probe workers of all containers of a pod and forgets their results.
func (m *Manager) RemovePod(podUID types.UID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for key := range m.containers {
		if key.podUID == podUID {
			m.removeLocked(key)
		}
	}
}

func (m *Manager) removeLocked(key containerKey) {
	ct := m.containers[key]
	if ct == nil {
		return
	}
	for _, w := range ct.workers {
		m.stopWorkerLocked(w)
	}
	delete(m.containers, key)
}

// Ready reports the container's readiness: false until its readiness probe succeeds,
// true without a readiness probe once the container has started; false for a container
// the manager does not know.
func (m *Manager) Ready(podUID types.UID, containerName string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	ct := m.containers[containerKey{podUID: podUID, name: containerName}]
	if ct == nil || !ct.startedLocked() {
		return false
	}
	w := ct.workers[Readiness]
	return w == nil || w.result == success
}

// Started reports whether the container's startup probe passed (true without one);
// false for a container the manager does not know.
func (m *Manager) Started(podUID types.UID, containerName string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	ct := m.containers[containerKey{podUID: podUID, name: containerName}]
	return ct != nil && ct.startedLocked()
}

// Stop stops every worker, waits for them to return and closes Updates.
func (m *Manager) Stop() {
	m.mu.Lock()
	if !m.stopped {
		m.stopped = true
		for key := range m.containers {
			m.removeLocked(key)
		}
	}
	m.mu.Unlock()
	m.cancel()
	m.wg.Wait()
}

// workerCount is the number of worker goroutines still running.
func (m *Manager) workerCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.running
}

func (m *Manager) newWorkerLocked(ct *container, k Kind) *worker {
	ctx, cancel := context.WithCancel(m.ctx)
	w := &worker{
		m:       m,
		ct:      ct,
		kind:    k,
		cancel:  cancel,
		trigger: make(chan struct{}, 1),
		log:     m.log.With("pod", ct.pod.Namespace+"/"+ct.pod.Name, "container", ct.key.name, "probe", string(k)),
		metricLabels: prometheus.Labels{
			"probe_type": k.metricLabel(),
			"container":  ct.key.name,
			"pod":        ct.pod.Name,
			"namespace":  ct.pod.Namespace,
			"pod_uid":    string(ct.key.podUID),
		},
	}
	ct.workers[k] = w
	m.running++
	m.wg.Add(1)
	go w.run(ctx)
	return w
}

// stopWorkerLocked detaches w from its container and tells it to stop.
func (m *Manager) stopWorkerLocked(w *worker) {
	if w.ct.workers[w.kind] == w {
		delete(w.ct.workers, w.kind)
	}
	w.removed = true
	w.cancel()
}

// workerDone is called by a worker's goroutine as it returns.
func (m *Manager) workerDone(w *worker) {
	m.mu.Lock()
	if !w.removed {
		m.stopWorkerLocked(w)
	}
	m.running--
	m.mu.Unlock()
	if m.metrics != nil {
		for _, o := range [...]outcome{success, failure, unknown} {
			l := prometheus.Labels{"result": o.metricLabel()}
			for k, v := range w.metricLabels {
				l[k] = v
			}
			m.metrics.total.Delete(l)
		}
		m.metrics.duration.Delete(w.durationLabels())
	}
	m.wg.Done()
}

// enqueue queues an update for the reader of Updates.
func (m *Manager) enqueue(r Result) {
	m.qmu.Lock()
	m.queue = append(m.queue, r)
	m.qmu.Unlock()
	select {
	case m.qready <- struct{}{}:
	default:
	}
}

// forward moves queued updates to the Updates channel until Stop.
func (m *Manager) forward() {
	defer m.wg.Done()
	defer close(m.updates)
	for {
		m.qmu.Lock()
		if len(m.queue) == 0 {
			m.qmu.Unlock()
			select {
			case <-m.ctx.Done():
				return
			case <-m.qready:
				continue
			}
		}
		r := m.queue[0]
		m.queue[0] = Result{}
		m.queue = m.queue[1:]
		m.qmu.Unlock()
		select {
		case m.updates <- r:
		case <-m.ctx.Done():
			return
		}
	}
}
