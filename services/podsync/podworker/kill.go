package podworker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/unitlet/unitlet/services/podsync/relist"
)

// minGracePeriod is the least time a container gets between its stop signal and SIGKILL
// (the kubelet's minimum).
const minGracePeriod = 2 * time.Second

// gracePeriod is how long the pod's containers get to stop: the override (a deletion's
// grace, an eviction's) when set, else the pod's terminationGracePeriodSeconds, else 30 s.
func gracePeriod(pod *corev1.Pod, override *int64) time.Duration {
	secs := int64(30)
	switch {
	case override != nil:
		secs = *override
	case pod.Spec.TerminationGracePeriodSeconds != nil:
		secs = *pod.Spec.TerminationGracePeriodSeconds
	}
	return time.Duration(secs) * time.Second
}

// killPod stops every running container of the pod in parallel (each after its preStop
// hook; sidecars after the app containers, in reverse order), then its sandboxes. Between
// the two, stopped (when set) runs once any container was stopped and a sandbox is left.
func (w *worker) killPod(ctx context.Context, pod *corev1.Pod, rp *relist.Pod, grace *int64, reasonFmt string, stopped ...func()) error {
	if rp == nil {
		return nil
	}
	var running []string
	for _, cur := range rp.Containers {
		if cur.Running() || cur.State == runtimeapi.ContainerState_CONTAINER_CREATED {
			running = append(running, cur.Name)
		}
	}
	order := newStopOrder(pod, running, w.m.o.Clock)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for _, cur := range rp.Containers {
		if !cur.Running() && cur.State != runtimeapi.ContainerState_CONTAINER_CREATED {
			continue
		}
		c := specOf(pod, cur.Name)
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := kill{grace: grace, message: fmt.Sprintf(reasonFmt, cur.Name), order: order}
			if err := w.killContainer(ctx, pod, c, cur, rp.ReadySandbox(), k); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
			order.done(cur.Name)
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if w.m.o.Probes != nil {
		w.m.o.Probes.RemovePod(pod.UID)
	}
	if len(running) > 0 && rp.ReadySandbox() != nil {
		for _, f := range stopped {
			f()
		}
	}
	for _, sb := range rp.Sandboxes {
		if !sb.Ready {
			continue
		}
		w.acted.Store(true)
		if _, err := w.m.o.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb.ID}); err != nil {
			return fmt.Errorf("stop pod sandbox %s: %w", sb.ID, err)
		}
	}
	return nil
}

// specOf is the pod's container (app or init) named name; a stand-in when the spec has
// none (an instance of an older spec). Ephemeral containers get the stand-in too, so they
// are stopped with the app containers and no hook of theirs runs (ephemeral.go).
func specOf(pod *corev1.Pod, name string) *corev1.Container {
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == name {
			return &pod.Spec.Containers[i]
		}
	}
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == name {
			return &pod.Spec.InitContainers[i]
		}
	}
	return &corev1.Container{Name: name}
}

// KillReason is why a running container is killed to be restarted.
type KillReason string

// The reasons a probe kills a container; its probe's terminationGracePeriodSeconds then
// applies.
const (
	ReasonLivenessProbe KillReason = "LivenessProbe"
	ReasonStartupProbe  KillReason = "StartupProbe"
	// ReasonUnknown: the runtime no longer knows the instance's state (killUnknown).
	ReasonUnknown KillReason = "Unknown"
	// ReasonResize: a resize whose resizePolicy restarts the container (resize.go).
	ReasonResize KillReason = "Resize"
)

// kill is how one container is to be stopped.
type kill struct {
	grace   *int64 // overrides the grace period (a deletion's, an eviction's)
	message string // the Killing event's
	reason  KillReason
	order   *stopOrder // the pod's termination order, nil: none
}

// killGrace is the container's grace period as the kubelet computes it: an override,
// else the pod's deletion grace, else for a probe's kill the probe's own
// terminationGracePeriodSeconds, else the pod's.
func killGrace(pod *corev1.Pod, c *corev1.Container, k kill) time.Duration {
	if k.grace == nil && pod.DeletionGracePeriodSeconds == nil {
		var p *corev1.Probe
		switch k.reason {
		case ReasonLivenessProbe:
			p = c.LivenessProbe
		case ReasonStartupProbe:
			p = c.StartupProbe
		}
		if p != nil && p.TerminationGracePeriodSeconds != nil {
			return time.Duration(*p.TerminationGracePeriodSeconds) * time.Second
		}
	}
	return gracePeriod(pod, k.grace)
}

// killContainer runs the container's preStop hook within the grace period, waits for its
// turn in the pod's termination order, then stops it with what is left of the grace (at
// least the kubelet's 2 s).
func (w *worker) killContainer(ctx context.Context, pod *corev1.Pod, c *corev1.Container, cur *relist.Container, sb *relist.Sandbox, k kill) error {
	g := killGrace(pod, c, k)
	w.event(pod, corev1.EventTypeNormal, "Killing", k.message)
	if c.Lifecycle != nil && c.Lifecycle.PreStop != nil && w.m.o.Hooks != nil && g > 0 {
		start := w.m.o.Clock.Now()
		hctx, cancel := context.WithTimeout(ctx, g)
		err := w.m.o.Hooks(hctx, pod, c, cur.ID, first(w.podIPs(pod, sb)), c.Lifecycle.PreStop)
		cancel()
		if err != nil {
			w.event(pod, corev1.EventTypeWarning, "FailedPreStopHook", fmt.Sprintf("PreStopHook failed: %v", err))
		}
		g -= w.m.o.Clock.Since(start)
	}
	g -= k.order.waitTurn(ctx, c.Name, g)
	g = max(g, minGracePeriod)
	if k.grace != nil && *k.grace == 0 {
		g = 0
	}
	if w.m.o.Probes != nil {
		w.m.o.Probes.RemoveContainer(pod.UID, c.Name)
	}
	w.acted.Store(true)
	if _, err := w.m.o.Runtime.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: cur.ID, Timeout: int64(g.Seconds())}); err != nil {
		return fmt.Errorf("stop container %s (%s): %w", c.Name, cur.ID, err)
	}
	return nil
}

// removeAll removes every container and sandbox of a pod nobody wants any more.
func (w *worker) removeAll(ctx context.Context, rp *relist.Pod) error {
	if rp == nil {
		return nil
	}
	if !rp.Empty() {
		w.acted.Store(true)
	}
	for _, c := range rp.Containers {
		if _, err := w.m.o.Runtime.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: c.ID}); err != nil {
			return fmt.Errorf("remove container %s: %w", c.ID, err)
		}
	}
	for _, sb := range rp.Sandboxes {
		if _, err := w.m.o.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb.ID}); err != nil {
			return fmt.Errorf("remove pod sandbox %s: %w", sb.ID, err)
		}
	}
	return nil
}

// pruneDead removes finished instances of each container beyond the newest finished one
// (the kubelet's container garbage collection keeps one), and old stopped sandboxes.
func (w *worker) pruneDead(ctx context.Context, pod *corev1.Pod, rp *relist.Pod) {
	names := map[string]bool{}
	for _, c := range rp.Containers {
		names[c.Name] = true
	}
	for name := range names {
		dead := 0
		for _, c := range rp.Instances(name) {
			if c.Running() || c.State == runtimeapi.ContainerState_CONTAINER_CREATED {
				continue
			}
			if dead++; dead <= 1 {
				continue
			}
			w.acted.Store(true)
			if _, err := w.m.o.Runtime.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: c.ID}); err != nil {
				w.m.o.Log.Debug("remove dead container", "pod", pod.Namespace+"/"+pod.Name, "container", c.ID, "err", err)
			}
		}
	}
	for i, sb := range rp.Sandboxes {
		if i == 0 || sb.Ready {
			continue
		}
		inUse := false
		for _, c := range rp.Containers {
			inUse = inUse || c.SandboxID == sb.ID
		}
		if !inUse {
			w.acted.Store(true)
			_, _ = w.m.o.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb.ID})
		}
	}
}
