package podworker

// Ephemeral containers (kubectl debug), as the kubelet runs them: added to a running pod
// through the pods/ephemeralcontainers subresource, each is started once in the pod's
// current sandbox, before the init containers (so a pod stuck initializing can be
// debugged), and never again whatever the pod's restart policy; once it has exited it
// stays Terminated. They are not probed, get no hooks, ports or resources (the API
// server forbids those, and podsync refuses them too), count toward neither the pod's
// phase nor its readiness, and are stopped with the pod.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/unitlet/unitlet/services/podsync/criconfig"
	"github.com/unitlet/unitlet/services/podsync/relist"
)

// ephemeralRetry is how soon a failed start of an ephemeral container is tried again,
// as for the app containers.
const ephemeralRetry = time.Second

// startEphemeral starts each of the pod's ephemeral containers that has no instance in
// the runtime yet (one that ran, in this sandbox or an earlier one, is never started
// again). A failed start is retried by a later sync.
func (w *worker) startEphemeral(ctx context.Context, pod *corev1.Pod, sb *relist.Sandbox, sbCfg *runtimeapi.PodSandboxConfig, rp *relist.Pod) {
	failed := false
	for i := range pod.Spec.EphemeralContainers {
		ec := &pod.Spec.EphemeralContainers[i]
		if rp.Latest(ec.Name) != nil {
			continue
		}
		c := (*corev1.Container)(&ec.EphemeralContainerCommon)
		// Refused before anything is prepared for it: a forbidden subPath is never mounted.
		if errs := criconfig.ValidateEphemeralContainer(ec, criconfig.EphemeralPath(pod, ec.Name)); len(errs) > 0 {
			err := fmt.Errorf("ephemeral container %s: %w", ec.Name, errs.ToAggregate())
			w.setWaiting(ec.Name, "CreateContainerConfigError", err.Error())
			w.event(pod, corev1.EventTypeWarning, "Failed", "Error: "+err.Error())
			continue
		}
		if err := w.startContainer(ctx, pod, c, sb, sbCfg, rp, false); err != nil {
			w.m.o.Log.Info("start ephemeral container", "pod", pod.Namespace+"/"+pod.Name, "container", ec.Name, "err", err)
			failed = true
		}
	}
	if failed {
		// The init containers' wait may end this sync early: wake the worker for the retry.
		after := w.m.o.Clock.After(ephemeralRetry)
		go func() {
			<-after
			w.poke()
		}()
	}
}

// ephemeralSpec is the pod's ephemeral container named name, nil when there is none.
func ephemeralSpec(pod *corev1.Pod, name string) *corev1.EphemeralContainer {
	for i := range pod.Spec.EphemeralContainers {
		if pod.Spec.EphemeralContainers[i].Name == name {
			return &pod.Spec.EphemeralContainers[i]
		}
	}
	return nil
}

// containerConfig is the CRI config of one instance of c: an ephemeral container's
// (with its target's process namespace) when c is one, else the regular one.
func (w *worker) criConfig(ctx context.Context, pod *corev1.Pod, c *corev1.Container, rp *relist.Pod, restartCount int, mounts []criconfig.Mount, pe criconfig.PodEnv) (*runtimeapi.ContainerConfig, string, error) {
	o, err := w.podOptions(pod)
	if err != nil {
		return nil, "", err
	}
	ec := ephemeralSpec(pod, c.Name)
	if ec == nil {
		return criconfig.ContainerConfig(ctx, pod, c, restartCount, mounts, pe, w.m.o.Objects, o)
	}
	target := ""
	if ec.TargetContainerName != "" {
		// The target's newest instance, as the kubelet resolves it.
		t := rp.Latest(ec.TargetContainerName)
		if t == nil {
			return nil, "", errors.New("unable to find target container " + ec.TargetContainerName)
		}
		target = t.ID
	}
	return criconfig.EphemeralContainerConfig(ctx, pod, ec, restartCount, target, mounts, pe, w.m.o.Objects, o)
}

// ephemeralContainers are the pod's ephemeral containers as containers (their common
// fields), for the container refs the node API looks names up in.
func ephemeralContainers(pod *corev1.Pod) []corev1.Container {
	out := make([]corev1.Container, 0, len(pod.Spec.EphemeralContainers))
	for _, ec := range pod.Spec.EphemeralContainers {
		out = append(out, corev1.Container(ec.EphemeralContainerCommon))
	}
	return out
}

// ephemeralStatuses are the statuses of the pod's ephemeral containers, sorted by name,
// as the kubelet reports them: never ready and without `started`, waiting
// PodInitializing (a pod with init containers) or ContainerCreating until their instance
// exists, then Running, then Terminated for good. Only a start failure the kubelet would
// retry for an app container shows as Waiting with its reason.
func (w *worker) ephemeralStatuses(pod *corev1.Pod, rp *relist.Pod, sb *relist.Sandbox, waiting map[string]waitingState) []corev1.ContainerStatus {
	if len(pod.Spec.EphemeralContainers) == 0 {
		return nil
	}
	def := "ContainerCreating"
	if len(pod.Spec.InitContainers) > 0 {
		def = "PodInitializing"
	}
	out := make([]corev1.ContainerStatus, 0, len(pod.Spec.EphemeralContainers))
	for _, c := range ephemeralContainers(pod) {
		cs := w.containerStatus(pod, &c, rp, sb, waiting, false, def)
		cs.Ready, cs.Started = false, nil
		cur := rp.Latest(c.Name)
		if cur != nil && cur.State == runtimeapi.ContainerState_CONTAINER_EXITED && cs.State.Waiting != nil &&
			(pod.DeletionTimestamp != nil || !shouldRestart(pod, &c, cur)) {
			cs.State = corev1.ContainerState{Terminated: cs.LastTerminationState.Terminated}
			cs.LastTerminationState = corev1.ContainerState{}
		}
		out = append(out, cs)
	}
	slices.SortFunc(out, func(a, b corev1.ContainerStatus) int { return strings.Compare(a.Name, b.Name) })
	return out
}
