package podworker

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/unitlet/unitlet/services/podsync/relist"
)

// A restart rule's RestartAllContainers action (RestartAllContainersOnContainerExits,
// beta and on in v1.36) restarts the whole pod in place when its container exits with a
// matching code: every container is stopped at once (no grace period, no preStop hook,
// as the kubelet does) and removed, the containers that exited with the action last, and
// the pod then runs again from its first init container in the same sandbox, keeping its
// network and volumes. As the kubelet:
//   - while the restart is under way the pod has the condition AllContainersRestarting
//     True (reason RestartAllContainersStarted), else False; only pods with such a rule
//     have it;
//   - each removed container that had run is Waiting with reason RestartingAllContainers,
//     its last state Terminated with that reason and exit code 137, and its restart count
//     one more; its next instance keeps that count and that last state;
//   - there is no crash-loop backoff: nothing of the old instances is left to count from.
//
// The reset is decided from the runtime alone (an exited instance in the pod's sandbox
// whose code a rule of its container answers with RestartAllContainers), so a podsync
// killed in the middle finds it again: the exited containers that asked for it are
// removed last.
const (
	reasonRestartingAll     = "RestartingAllContainers"
	messageRestartingAll    = "The container is removed because RestartAllContainers in place"
	reasonRestartAllStarted = "RestartAllContainersStarted"
	messageRestartAllStart  = "container exited with restart policy rule"
	// ReasonRestartAll: a container stopped because its pod restarts all its containers.
	ReasonRestartAll KillReason = "RestartAllContainers"
)

// couldRestartAll reports whether a container of pod has a RestartAllContainers rule.
func couldRestartAll(pod *corev1.Pod) bool {
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range cs {
			for _, r := range c.RestartPolicyRules {
				if r.Action == corev1.ContainerRestartRuleActionRestartAllContainers {
					return true
				}
			}
		}
	}
	return false
}

// restartsAll reports whether an instance of c that exited with exitCode restarts the pod.
func restartsAll(c *corev1.Container, exitCode int32) bool {
	r, ok := matchingRestartRule(c, exitCode)
	return ok && r.Action == corev1.ContainerRestartRuleActionRestartAllContainers
}

// restartAllSources are the pod's containers whose newest instance in sandbox sb exited
// with a code that restarts the pod, with that instance; none when sb is nil.
func restartAllSources(pod *corev1.Pod, rp *relist.Pod, sb *relist.Sandbox) map[string]*relist.Container {
	if sb == nil || !couldRestartAll(pod) {
		return nil
	}
	out := map[string]*relist.Container{}
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			cur := latestIn(rp, cs[i].Name, sb.ID)
			if cur != nil && cur.State == runtimeapi.ContainerState_CONTAINER_EXITED && !abandonedStart(cur) && restartsAll(&cs[i], cur.ExitCode) {
				out[cs[i].Name] = cur
			}
		}
	}
	return out
}

// restartAll restarts the pod's every container in place (see above): the status saying
// so is reported first, then running instances are stopped and every instance removed,
// those that asked for it last.
func (w *worker) restartAll(ctx context.Context, pod *corev1.Pod, rp *relist.Pod, sb *relist.Sandbox, sources map[string]*relist.Container, st state) error {
	w.report(syncResult{operation: "sync", status: w.status(pod, rp, st), containers: refs(pod, rp)})
	var trigger string
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range cs {
			if cur := sources[c.Name]; cur != nil && trigger == "" {
				trigger = fmt.Sprintf("container %s exited with code %d", c.Name, cur.ExitCode)
			}
		}
	}
	w.m.o.Log.Info("restarting all containers of the pod in place", "pod", pod.Namespace+"/"+pod.Name, "because", trigger)

	// The restart count each container shows from now on: one more than it showed, for
	// those that had run (the kubelet's count for a container removed this way).
	w.mu.Lock()
	if w.resetCounts == nil {
		w.resetCounts, w.resetWaiting = map[string]int32{}, map[string]bool{}
	}
	for i, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range cs {
			insts := rp.Instances(c.Name)
			if len(insts) == 0 {
				continue
			}
			n := max(int32(insts[0].Attempt), apiRestartCount(pod, c.Name, i == 0), w.resetCounts[c.Name])
			w.resetCounts[c.Name] = n + 1
			w.resetWaiting[c.Name] = true
		}
	}
	w.mu.Unlock()

	zero := int64(0)
	var targets, last []*relist.Container
	for _, cs := range [][]corev1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		for i := range cs {
			c := &cs[i]
			for _, inst := range rp.Instances(c.Name) {
				if inst.Running() || inst.State == runtimeapi.ContainerState_CONTAINER_UNKNOWN {
					k := kill{grace: &zero, reason: ReasonRestartAll,
						message: fmt.Sprintf("Stopping container %s: the pod restarts all its containers (%s)", c.Name, trigger)}
					if err := w.killContainer(ctx, pod, c, inst, sb, k); err != nil {
						return err
					}
				}
				if sources[c.Name] == inst {
					last = append(last, inst)
				} else {
					targets = append(targets, inst)
				}
			}
		}
	}
	for _, inst := range append(targets, last...) {
		w.acted.Store(true)
		if _, err := w.m.o.Runtime.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: inst.ID}); err != nil {
			return fmt.Errorf("remove container %s (%s) to restart all containers: %w", inst.Name, inst.ID, err)
		}
		if w.m.o.Probes != nil {
			w.m.o.Probes.RemoveContainer(pod.UID, inst.Name)
		}
	}
	return nil
}

// restartedAll is what a restart of all containers leaves on container c's status: the
// count it keeps, and whether it waits for its next instance (nothing of it in the runtime
// yet). A container with an instance again stops waiting.
func (w *worker) restartedAll(name string, hasInstance bool) (count int32, waiting bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if hasInstance && w.resetWaiting[name] {
		delete(w.resetWaiting, name)
	}
	return w.resetCounts[name], w.resetWaiting[name]
}

// restartedAllState is the last state of a container removed by a restart of all
// containers.
func restartedAllState() *corev1.ContainerStateTerminated {
	return &corev1.ContainerStateTerminated{Reason: reasonRestartingAll, Message: messageRestartingAll, ExitCode: 137}
}

// allRestartingCondition is the pod's AllContainersRestarting condition, for a pod with a
// RestartAllContainers rule (nil for others).
func allRestartingCondition(pod *corev1.Pod, rp *relist.Pod, phase corev1.PodPhase) *corev1.PodCondition {
	if !couldRestartAll(pod) {
		return nil
	}
	c := &corev1.PodCondition{Type: corev1.AllContainersRestarting, Status: corev1.ConditionFalse}
	switch {
	case phase == corev1.PodSucceeded:
		c.Reason = "PodCompleted"
	case phase == corev1.PodFailed:
		c.Reason = "PodFailed"
	case pod.DeletionTimestamp == nil && len(restartAllSources(pod, rp, rp.ReadySandbox())) > 0:
		c.Status, c.Reason, c.Message = corev1.ConditionTrue, reasonRestartAllStarted, messageRestartAllStart
	}
	return c
}
