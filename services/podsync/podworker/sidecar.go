package podworker

import (
	"context"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"

	"github.com/unitlet/unitlet/services/podsync/relist"
)

// isSidecar reports whether c is a native sidecar: an init container with restartPolicy
// Always, which keeps running for the pod's life.
func isSidecar(c *corev1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
}

// isSidecarOf reports whether name is one of pod's native sidecars.
func isSidecarOf(pod *corev1.Pod, name string) bool {
	return isSidecar(specOf(pod, name))
}

// probed reports whether c's probes run: app containers' and sidecars', not those of
// init containers that run to completion.
func probed(c *corev1.Container, init bool) bool {
	return !init || isSidecar(c)
}

// syncInitContainers starts what the pod's init containers need now, as the kubelet
// does: the first init container not yet run; the next one once the one before has
// exited 0 or, for a sidecar, has started (its startupProbe passed); and any sidecar that
// has exited, whatever the pod's restart policy (with the crash-loop backoff). It reports
// whether the pod is initialized, so its app containers may run, and when to sync again
// at the latest (a backoff ending).
//
// The newest init container that has run is where initialization stands; init containers
// before it are done, and of those only sidecars are kept running. Once an app container
// has run in the sandbox the pod stays initialized, and only sidecars are restarted.
func (w *worker) syncInitContainers(ctx context.Context, pod *corev1.Pod, rp *relist.Pod, sb *relist.Sandbox, sbCfg *runtimeapi.PodSandboxConfig) (bool, time.Duration, error) {
	inits := pod.Spec.InitContainers
	initialized := false
	for i := range pod.Spec.Containers {
		if latestIn(rp, pod.Spec.Containers[i].Name, sb.ID) != nil {
			initialized = true
			break
		}
	}
	if len(inits) == 0 {
		return true, 0, nil
	}
	last := len(inits) - 1
	// reached: an init container after this one (or an app container) has run.
	reached := initialized
	var start []int
	for i := last; i >= 0; i-- {
		c := &inits[i]
		cur := latestIn(rp, c.Name, sb.ID)
		side := isSidecar(c)
		switch {
		case cur == nil:
			if reached && side {
				start = append(start, i)
			}
			continue
		case reached && !side:
			// Ran to completion before: nothing to keep running.
		case cur.Running():
			if !side {
				break // wait for it to exit
			}
			w.probeSidecar(pod, c, cur, sb)
			if !w.hasStarted(pod, c) {
				break // its startupProbe has not passed yet
			}
			if i == last {
				initialized = true
			} else if !reached {
				start = append(start, i+1)
			}
		case cur.State == runtimeapi.ContainerState_CONTAINER_EXITED && side:
			start = append(start, i)
		case cur.State == runtimeapi.ContainerState_CONTAINER_EXITED && cur.ExitCode != 0:
			if !shouldRestart(pod, c, cur) {
				return false, 0, nil // the pod has failed
			}
			start = append(start, i)
		case cur.State == runtimeapi.ContainerState_CONTAINER_EXITED:
			if i == last {
				initialized = true
			} else {
				start = append(start, i+1)
			}
		}
		reached = true
	}
	if !reached {
		start = append(start, 0)
	}
	slices.Reverse(start)

	var next time.Duration
	for _, i := range start {
		c := &inits[i]
		if cur := latestIn(rp, c.Name, sb.ID); cur != nil && cur.State == runtimeapi.ContainerState_CONTAINER_EXITED {
			if wait := w.backoffWait(pod, c, cur); wait > 0 {
				next = sooner(next, wait)
				continue
			}
		}
		if err := w.startContainer(ctx, pod, c, sb, sbCfg, rp, true); err != nil {
			return initialized, sooner(next, time.Second), err
		}
	}
	return initialized, next, nil
}

// probeSidecar keeps the probe workers of a running sidecar on its current instance.
func (w *worker) probeSidecar(pod *corev1.Pod, c *corev1.Container, cur *relist.Container, sb *relist.Sandbox) {
	if w.m.o.Probes != nil {
		w.m.o.Probes.SetContainer(pod, first(w.podIPs(pod, sb)), c, cur.ID, cur.StartedAt)
	}
}

// started reports whether a running container has started: its startupProbe passed, or
// it has none.
func (w *worker) hasStarted(pod *corev1.Pod, c *corev1.Container) bool {
	return w.m.o.Probes == nil || c.StartupProbe == nil || w.m.o.Probes.Started(pod.UID, c.Name)
}

// appsFinished reports whether every app container of the pod has run in the sandbox sbID
// and none is running or will be restarted: the pod's work is done, and its sidecars are
// to be stopped rather than kept or restarted (the kubelet kills the pod then).
func appsFinished(pod *corev1.Pod, rp *relist.Pod, sbID string) bool {
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		cur := latestIn(rp, c.Name, sbID)
		if cur == nil || cur.State != runtimeapi.ContainerState_CONTAINER_EXITED || shouldRestart(pod, c, cur) {
			return false
		}
	}
	return true
}

// sidecarRunning reports whether one of the pod's sidecars runs.
func sidecarRunning(pod *corev1.Pod, rp *relist.Pod) bool {
	for _, c := range rp.Containers {
		if c.Running() && isSidecarOf(pod, c.Name) {
			return true
		}
	}
	return false
}

func sooner(a, b time.Duration) time.Duration {
	if a == 0 || b < a {
		return b
	}
	return a
}

// stopOrder orders a pod's termination as the kubelet does when it has sidecars: each
// sidecar is stopped only after every app container has stopped and after the sidecars
// that follow it in the spec, waiting at most what is left of its grace period. Every
// other container stops at once.
type stopOrder struct {
	clk     clock.Clock
	mu      sync.Mutex
	stopped map[string]chan struct{}
	after   map[string][]chan struct{}
}

// newStopOrder is the order for pod's running containers (by name); nil when the pod has
// no sidecars.
func newStopOrder(pod *corev1.Pod, running []string, clk clock.Clock) *stopOrder {
	if !slices.ContainsFunc(pod.Spec.InitContainers, func(c corev1.Container) bool { return isSidecar(&c) }) {
		return nil
	}
	o := &stopOrder{clk: clk, stopped: map[string]chan struct{}{}, after: map[string][]chan struct{}{}}
	channel := func(name string) chan struct{} {
		ch := make(chan struct{})
		if !slices.Contains(running, name) {
			close(ch)
		}
		o.stopped[name] = ch
		return ch
	}
	var apps []chan struct{}
	for _, c := range pod.Spec.Containers {
		apps = append(apps, channel(c.Name))
	}
	var later chan struct{} // the next sidecar in the spec
	for i := len(pod.Spec.InitContainers) - 1; i >= 0; i-- {
		c := &pod.Spec.InitContainers[i]
		ch := channel(c.Name)
		if !isSidecar(c) {
			continue
		}
		o.after[c.Name] = append(o.after[c.Name], apps...)
		if later != nil {
			o.after[c.Name] = append(o.after[c.Name], later)
		}
		later = ch
	}
	return o
}

// waitTurn waits until name may stop, or at most limit; it returns how long it waited.
func (o *stopOrder) waitTurn(ctx context.Context, name string, limit time.Duration) time.Duration {
	if o == nil || limit <= 0 || len(o.after[name]) == 0 {
		return 0
	}
	start := o.clk.Now()
	t := o.clk.NewTimer(limit)
	defer t.Stop()
	for _, ch := range o.after[name] {
		select {
		case <-ch:
		case <-t.C():
			return o.clk.Since(start)
		case <-ctx.Done():
			return o.clk.Since(start)
		}
	}
	return o.clk.Since(start)
}

// done records that name has stopped.
func (o *stopOrder) done(name string) {
	if o == nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if ch, ok := o.stopped[name]; ok {
		close(ch)
		delete(o.stopped, name)
	}
}
