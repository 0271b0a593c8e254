package prober

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
)

// worker probes one kind of probe of one container, on the probe's period, until it is
// stopped. It lives across container instances: a new container ID resets its results.
type worker struct {
	m            *Manager
	ct           *container
	kind         Kind
	cancel       context.CancelFunc
	trigger      chan struct{} // probe now instead of at the next tick
	log          *slog.Logger
	metricLabels prometheus.Labels // without "result"

	// Guarded by m.mu.
	removed bool    // stopped and detached from ct
	result  outcome // the current result for ct.id (unknown: none yet)
	last    outcome // the last probe's outcome
	streak  int     // how many probes in a row had outcome last
	onHold  bool    // no probing until a new container ID
}

func (w *worker) durationLabels() prometheus.Labels {
	return prometheus.Labels{
		"probe_type": w.metricLabels["probe_type"],
		"container":  w.metricLabels["container"],
		"pod":        w.metricLabels["pod"],
		"namespace":  w.metricLabels["namespace"],
	}
}

// resetLocked starts the results afresh for the container's current ID. A worker just
// created for a container that was running before the manager started (podsync
// restarted) takes its readiness and startup state from the pod's status instead, so a
// restart of podsync does not flip a ready container to unready.
func (w *worker) resetLocked(created bool) {
	w.onHold, w.last, w.streak, w.result = false, unknown, 0, unknown
	ct := w.ct
	if created && ct.startedAt.Before(w.m.start.Add(-restartGrace)) {
		cs := containerStatus(ct.pod, ct.key.name, ct.id)
		switch w.kind {
		case Readiness:
			if (cs != nil && cs.Ready) || podReady(ct.pod) {
				w.setLocked(success, "")
			}
		case Startup:
			if cs != nil && cs.Started != nil && *cs.Started {
				w.setLocked(success, "")
			}
		}
		return
	}
	switch w.kind {
	case Readiness:
		w.setLocked(failure, "")
	case Liveness:
		w.setLocked(success, "")
	}
}

// setLocked records result o and queues an update when it changed; reports whether it did.
func (w *worker) setLocked(o outcome, msg string) bool {
	if o == w.result {
		return false
	}
	w.result = o
	if o == unknown {
		return false
	}
	w.m.enqueue(Result{
		PodUID:        w.ct.key.podUID,
		ContainerName: w.ct.key.name,
		ContainerID:   w.ct.id,
		Kind:          w.kind,
		Success:       o == success,
		Message:       msg,
	})
	return true
}

func (w *worker) triggerNow() {
	select {
	case w.trigger <- struct{}{}:
	default:
	}
}

// period is the probe's period.
func (w *worker) period() time.Duration {
	w.m.mu.Lock()
	defer w.m.mu.Unlock()
	p := w.ct.probe(w.kind)
	if p == nil || p.PeriodSeconds <= 0 {
		return defaultPeriodSeconds * time.Second
	}
	return time.Duration(p.PeriodSeconds) * time.Second
}

// run probes on the period until the worker is stopped or the container no longer needs it.
func (w *worker) run(ctx context.Context) {
	defer w.m.workerDone(w)
	clk := w.m.clk
	period := w.period()

	// Probes started together right after podsync starts would all fire at once: spread
	// the first probe over one period, only in that window.
	// A trigger (readiness once startup passed) ends the wait.
	if clk.Since(w.m.start) < period {
		if d := w.m.jitter(period); d > 0 {
			t := clk.NewTimer(d)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C():
			case <-w.trigger:
				t.Stop()
			}
		}
	}

	next := clk.Now()
	for w.probe(ctx) {
		period = w.period()
		now := clk.Now()
		for next = next.Add(period); !next.After(now); next = next.Add(period) {
		}
		t := clk.NewTimer(next.Sub(now))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		case <-w.trigger:
			t.Stop()
			next = clk.Now()
		}
	}
}

// probe runs the probe once if it is due and records the outcome; it reports whether
// the worker should keep going.
func (w *worker) probe(ctx context.Context) bool {
	m := w.m
	m.mu.Lock()
	if w.removed {
		m.mu.Unlock()
		return false
	}
	if w.onHold {
		m.mu.Unlock()
		return true
	}
	ct := w.ct
	p := ct.probe(w.kind)
	t := target{pod: ct.pod, podIP: ct.podIP, container: ct.spec, containerID: ct.id}
	startedAt, started := ct.startedAt, ct.startedLocked()
	m.mu.Unlock()
	if p == nil {
		return false
	}

	if w.settledForDeletion(t.containerID) {
		w.log.Debug("pod is being deleted, probe stops")
		return false
	}
	if int32(m.clk.Since(startedAt).Seconds()) < p.InitialDelaySeconds {
		return true
	}
	// The startup probe runs until it passed; the others only after it did.
	if (w.kind == Startup) == started {
		return true
	}

	begin := m.clk.Now()
	o, msg, err := m.runner.run(ctx, p, t)
	if ctx.Err() != nil {
		return false
	}
	w.observe(o, err, m.clk.Since(begin))
	// The pod's deletion came while the run went on (a preStop hook may have removed what
	// the probe checks): its outcome is dropped as that of a run begun after it would be.
	// The kubelet keeps it, and may report the container Unhealthy as it terminates.
	if w.settledForDeletion(t.containerID) {
		w.log.Debug("pod deletion seen while the probe ran: its outcome is dropped, probe stops")
		return false
	}
	if err != nil {
		w.log.Debug("probe could not run", "containerID", t.containerID, "err", err)
		return true
	}
	// Each failed run is an Unhealthy event, each warning a ProbeWarning (the kubelet's
	// reasons and wording: "Liveness probe failed: ...").
	switch o {
	case failure:
		w.log.Debug("probe failed", "containerID", t.containerID, "output", msg)
		m.event(t.pod, corev1.EventTypeWarning, "Unhealthy", w.kind.metricLabel()+" probe failed: "+msg)
	case warning:
		m.event(t.pod, corev1.EventTypeWarning, "ProbeWarning", w.kind.metricLabel()+" probe warning: "+msg)
		o = success
	}

	m.mu.Lock()
	defer m.mu.Unlock()
	if w.removed || w.onHold || ct.id != t.containerID {
		return true // the container changed while probing: this outcome is stale
	}
	if o == w.last {
		w.streak++
	} else {
		w.last, w.streak = o, 1
	}
	if (o == failure && w.streak < threshold(p.FailureThreshold, defaultFailureThreshold)) ||
		(o == success && w.streak < threshold(p.SuccessThreshold, defaultSuccessThreshold)) {
		return true
	}
	if w.setLocked(o, msg) {
		w.log.Info("probe result changed", "containerID", t.containerID, "success", o == success, "output", truncate(msg, 256))
		// Readiness waits for the startup probe: probe it the moment that passed, so a
		// ready container is Ready without waiting for a readiness period.
		if rw := ct.workers[Readiness]; w.kind == Startup && o == success && rw != nil {
			rw.triggerNow()
		}
	}
	// A liveness failure restarts the container and a startup probe is done either way:
	// rest until the next container instance.
	if (w.kind == Liveness && o == failure) || w.kind == Startup {
		w.onHold, w.streak = true, 0
	}
	return true
}

// settledForDeletion reports whether the pod is being deleted and w is a liveness or
// startup probe, which a deletion ends: it settles on success (for instance id, if still
// the container's) and probes no more.
func (w *worker) settledForDeletion(id string) bool {
	if w.kind != Liveness && w.kind != Startup {
		return false
	}
	m := w.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if w.ct.pod.DeletionTimestamp == nil {
		return false
	}
	if !w.removed && w.ct.id == id {
		w.setLocked(success, "")
	}
	return true
}

// observe counts a probe run in the kubelet's metrics (the duration, as the kubelet,
// only for runs that did not fail).
func (w *worker) observe(o outcome, err error, d time.Duration) {
	met := w.m.metrics
	if met == nil {
		return
	}
	if err != nil {
		o = unknown
	}
	l := prometheus.Labels{"result": o.metricLabel()}
	for k, v := range w.metricLabels {
		l[k] = v
	}
	met.total.With(l).Inc()
	if o != failure {
		met.duration.With(w.durationLabels()).Observe(d.Seconds())
	}
}

func threshold(v, def int32) int {
	if v <= 0 {
		return int(def)
	}
	return int(v)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// containerStatus finds the status of container name in pod's status, if it is about
// the instance id (statuses carry "<runtime>://<id>").
func containerStatus(pod *corev1.Pod, name, id string) *corev1.ContainerStatus {
	for _, list := range [][]corev1.ContainerStatus{pod.Status.ContainerStatuses, pod.Status.InitContainerStatuses} {
		for i := range list {
			cs := &list[i]
			if cs.Name == name && (cs.ContainerID == id || strings.HasSuffix(cs.ContainerID, "://"+id)) {
				return cs
			}
		}
	}
	return nil
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
