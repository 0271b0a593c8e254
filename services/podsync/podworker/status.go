package podworker

import (
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/unitlet/unitlet/services/podsync/criconfig"
	"github.com/unitlet/unitlet/services/podsync/relist"
)

// status computes the pod's status from its spec and the runtime's state, as the kubelet's
// generateAPIPodStatus does.
func (w *worker) status(pod *corev1.Pod, rp *relist.Pod, st state) corev1.PodStatus {
	w.mu.Lock()
	waiting := map[string]waitingState{}
	for k, v := range w.waiting {
		waiting[k] = v
	}
	startTime := w.startTimeLocked(pod)
	w.mu.Unlock()

	sb := rp.ReadySandbox()
	out := corev1.PodStatus{QOSClass: criconfig.QOSClass(pod)}
	t := metav1.NewTime(startTime)
	out.StartTime = &t
	if ips := w.podIPs(pod, sb); len(ips) > 0 {
		out.PodIP = ips[0]
		for _, ip := range ips {
			out.PodIPs = append(out.PodIPs, corev1.PodIP{IP: ip})
		}
	}
	if w.m.o.HostIPs != nil {
		if hips := w.m.o.HostIPs(); len(hips) > 0 {
			out.HostIP = hips[0]
			for _, ip := range hips {
				out.HostIPs = append(out.HostIPs, corev1.HostIP{IP: ip})
			}
		}
	}

	initDone := true
	var incomplete, unready []string
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		cs := w.containerStatus(pod, c, rp, sb, waiting, true, "PodInitializing")
		out.InitContainerStatuses = append(out.InitContainerStatuses, cs)
		// A sidecar is done initializing once it has started; the others once they exit 0.
		if isSidecar(c) {
			if !cs.Ready {
				unready = append(unready, c.Name)
			}
			if cs.Started == nil || !*cs.Started {
				initDone = false
				incomplete = append(incomplete, c.Name)
			}
		} else if cs.State.Terminated == nil || cs.State.Terminated.ExitCode != 0 {
			initDone = false
			incomplete = append(incomplete, c.Name)
		}
	}
	appRan := false
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		def := "ContainerCreating"
		if !initDone {
			def = "PodInitializing"
		}
		cs := w.containerStatus(pod, c, rp, sb, waiting, false, def)
		out.ContainerStatuses = append(out.ContainerStatuses, cs)
		if !cs.Ready {
			unready = append(unready, c.Name)
		}
		appRan = appRan || cs.State.Running != nil || cs.State.Terminated != nil || cs.LastTerminationState.Terminated != nil
	}
	// Once an app container has run, the pod stays initialized while sidecars restart.
	initDone = initDone || appRan

	out.EphemeralContainerStatuses = w.ephemeralStatuses(pod, rp, sb, waiting)
	out.AllocatedResources, out.Resources = w.podResources(pod)

	out.Phase = phase(pod, out.InitContainerStatuses, out.ContainerStatuses, initDone)
	if st.killReason != "" {
		out.Reason, out.Message = st.killReason, st.killMsg
		if !st.keepSucceeded || out.Phase != corev1.PodSucceeded {
			out.Phase = corev1.PodFailed
		}
	}
	if st.terminating && out.Phase == corev1.PodRunning && rp.ReadySandbox() == nil && !anyRunning(rp) {
		// Stopped for good with containers that would have restarted: the kubelet's final
		// phase for a deleted pod is Succeeded when every container exited 0, as a
		// container that ends on SIGTERM does, else Failed.
		out.Phase = terminalPhase(out.ContainerStatuses)
	}

	cond := func(t corev1.PodConditionType, ok bool, reason, msg string) corev1.PodCondition {
		c := corev1.PodCondition{Type: t, Status: corev1.ConditionFalse, Reason: reason, Message: msg}
		if ok {
			c.Status, c.Reason, c.Message = corev1.ConditionTrue, "", ""
		}
		return c
	}
	sandboxOK := sb != nil && (pod.Spec.HostNetwork || len(sb.IPs) > 0)
	final := out.Phase == corev1.PodSucceeded || out.Phase == corev1.PodFailed
	ready := len(unready) == 0 && !final
	crReason, crMsg := "ContainersNotReady", fmt.Sprintf("containers with unready status: [%s]", strings.Join(unready, " "))
	if final {
		crReason, crMsg = "PodCompleted", ""
	}
	initReason, initMsg := "ContainersNotInitialized", fmt.Sprintf("containers with incomplete status: [%s]", strings.Join(incomplete, " "))
	out.Conditions = []corev1.PodCondition{
		cond(corev1.PodReadyToStartContainers, sandboxOK, "", ""),
		cond(corev1.PodInitialized, initDone || final && len(incomplete) == 0, initReason, initMsg),
		cond(corev1.ContainersReady, ready, crReason, crMsg),
		readyCondition(pod, ready, crReason, crMsg),
		cond(corev1.PodScheduled, true, "", ""),
	}
	if c := allRestartingCondition(pod, rp, out.Phase); c != nil {
		out.Conditions = append(out.Conditions, *c)
	}
	if initDone {
		out.Conditions[1] = cond(corev1.PodInitialized, true, "", "")
	}
	out.Conditions = append(out.Conditions, w.resizeConditions()...)
	if st.disruption != nil {
		// An evicted pod's DisruptionTarget, first, as the kubelet copies it in before the
		// conditions it owns.
		out.Conditions = append([]corev1.PodCondition{*st.disruption}, out.Conditions...)
	}
	// The generation of the pod this status is for, on the pod and each condition, as
	// the v1.36 kubelet reports it (PodObservedGenerationTracking, GA).
	out.ObservedGeneration = pod.Generation
	for i := range out.Conditions {
		out.Conditions[i].ObservedGeneration = pod.Generation
	}
	w.keepTransitionTimes(&out)
	limitTerminationMessages(pod, &out)
	return out
}

// startTimeLocked is when the node took the pod on: the time in its API status when it has
// one (a podsync that restarted keeps it), else when this worker first saw it.
func (w *worker) startTimeLocked(pod *corev1.Pod) time.Time {
	if w.startTime.IsZero() {
		w.startTime = w.m.o.Clock.Now()
		if t := pod.Status.StartTime; t != nil && !t.IsZero() {
			w.startTime = t.Time
		}
	}
	return w.startTime
}

// The kubelet's reason and message for a pod past its activeDeadlineSeconds.
const (
	reasonDeadlineExceeded  = "DeadlineExceeded"
	messageDeadlineExceeded = "Pod was active on the node longer than the specified deadline"
)

// untilDeadline is how long the pod may still be active (its activeDeadlineSeconds
// counted from its start time), and false when it has none.
func (w *worker) untilDeadline(pod *corev1.Pod) (time.Duration, bool) {
	if pod.Spec.ActiveDeadlineSeconds == nil {
		return 0, false
	}
	w.mu.Lock()
	start := w.startTimeLocked(pod)
	w.mu.Unlock()
	return time.Duration(*pod.Spec.ActiveDeadlineSeconds)*time.Second - w.m.o.Clock.Since(start), true
}

// keepTransitionTimes carries each condition's lastTransitionTime over from the previous
// status while its status has not changed.
func (w *worker) keepTransitionTimes(out *corev1.PodStatus) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := metav1.NewTime(w.m.o.Clock.Now().Truncate(time.Second))
	prev := map[corev1.PodConditionType]corev1.PodCondition{}
	for _, c := range w.lastConditions {
		prev[c.Type] = c
	}
	for i := range out.Conditions {
		c := &out.Conditions[i]
		if p, ok := prev[c.Type]; ok && p.Status == c.Status {
			c.LastTransitionTime = p.LastTransitionTime
		} else {
			c.LastTransitionTime = now
		}
	}
	w.lastConditions = out.Conditions
}

// readyCondition is the pod's Ready condition: its containers are ready and every
// readiness gate's condition is True (the kubelet's reasons and messages).
func readyCondition(pod *corev1.Pod, containersReady bool, reason, msg string) corev1.PodCondition {
	c := corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: reason, Message: msg}
	if !containersReady {
		return c
	}
	var unmet []string
	for _, g := range pod.Spec.ReadinessGates {
		found, ok := false, false
		for _, pc := range pod.Status.Conditions {
			if pc.Type == g.ConditionType {
				found, ok = true, pc.Status == corev1.ConditionTrue
			}
		}
		switch {
		case !found:
			unmet = append(unmet, fmt.Sprintf("corresponding condition of pod readiness gate %q does not exist.", g.ConditionType))
		case !ok:
			unmet = append(unmet, fmt.Sprintf("the status of pod readiness gate %q is not \"True\", but False", g.ConditionType))
		}
	}
	if len(unmet) > 0 {
		c.Reason, c.Message = "ReadinessGatesNotReady", strings.Join(unmet, ", ")
		return c
	}
	c.Status, c.Reason, c.Message = corev1.ConditionTrue, "", ""
	return c
}

func anyRunning(rp *relist.Pod) bool {
	if rp == nil {
		return false
	}
	for _, c := range rp.Containers {
		if c.Running() {
			return true
		}
	}
	return false
}

// apiRestartCount is the restart count the API has for the pod's container name (an init
// container's when init), 0 when it has none.
func apiRestartCount(pod *corev1.Pod, name string, init bool) int32 {
	list := pod.Status.ContainerStatuses
	if init {
		list = pod.Status.InitContainerStatuses
	}
	for _, s := range list {
		if s.Name == name {
			return s.RestartCount
		}
	}
	return 0
}

// containerStatus is one container's status: its newest instance in the current sandbox,
// the one before as lastState, or why it is waiting.
func (w *worker) containerStatus(pod *corev1.Pod, c *corev1.Container, rp *relist.Pod, sb *relist.Sandbox, waiting map[string]waitingState, init bool, defaultWaiting string) corev1.ContainerStatus {
	cs := corev1.ContainerStatus{Name: c.Name, Image: c.Image}
	insts := rp.Instances(c.Name)
	var cur, prev *relist.Container
	if len(insts) > 0 {
		cur = insts[0]
	}
	// lastState is the newest instance before cur that ran: starts the runtime abandoned
	// never did.
	for _, inst := range insts[min(1, len(insts)):] {
		if !abandonedStart(inst) {
			prev = inst
			break
		}
	}
	if cur != nil {
		cs.RestartCount = int32(cur.Attempt)
		cs.ContainerID = w.containerID(cur.ID)
		if cur.ImageRef != "" {
			cs.ImageID = cur.ImageRef
		}
	}
	// A restart count never goes down: removing an instance that never started (removeUnstarted)
	// leaves an older one newest until the next is made, and the count the API already has
	// stands meanwhile (fault run 22: restartCount 0 after 1 while containerd restarted).
	if n := apiRestartCount(pod, c.Name, init); n > cs.RestartCount {
		cs.RestartCount = n
	}
	// A restart of all the pod's containers removed its instances (restartall.go).
	resetCount, resetWaiting := w.restartedAll(c.Name, len(insts) > 0)
	cs.RestartCount = max(cs.RestartCount, resetCount)
	wt, isWaiting := waiting[c.Name]
	if resetWaiting && !isWaiting {
		wt, isWaiting = waitingState{reason: reasonRestartingAll, message: messageRestartingAll}, true
	}
	if cur != nil && abandonedStart(cur) {
		// It never ran: waiting for its next start, the instance before it as lastState.
		if !isWaiting {
			wt, isWaiting = waitingState{reason: defaultWaiting}, true
		}
		cs.ContainerID = ""
		if prev != nil && prev.State == runtimeapi.ContainerState_CONTAINER_EXITED {
			cs.ContainerID = w.containerID(prev.ID)
			cs.LastTerminationState.Terminated = w.terminatedState(c, prev)
		}
		cur = nil
	}
	switch {
	case cur != nil && cur.Running():
		cs.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(cur.StartedAt)}
		if prev != nil && prev.State == runtimeapi.ContainerState_CONTAINER_EXITED {
			cs.LastTerminationState.Terminated = w.terminatedState(c, prev)
		}
		started := true
		if probed(c, init) {
			cs.Ready = w.m.o.Probes == nil || w.m.o.Probes.Ready(pod.UID, c.Name)
			started = w.m.o.Probes == nil || w.m.o.Probes.Started(pod.UID, c.Name)
		}
		cs.Started = &started
	case cur != nil && cur.State == runtimeapi.ContainerState_CONTAINER_EXITED && isWaiting && w.willRestart(pod, c, cur, init):
		// Why the next instance is not running yet. A container that will not run again
		// keeps its terminated state whatever an earlier attempt failed of (the kubelet
		// shows a start error only for a container it restarts).
		cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: wt.reason, Message: wt.message}
		cs.LastTerminationState.Terminated = w.terminatedState(c, cur)
	case cur != nil && cur.State == runtimeapi.ContainerState_CONTAINER_EXITED:
		cs.State.Terminated = w.terminatedState(c, cur)
		if prev != nil && prev.State == runtimeapi.ContainerState_CONTAINER_EXITED {
			cs.LastTerminationState.Terminated = w.terminatedState(c, prev)
		}
		if init && !isSidecar(c) && cur.ExitCode == 0 {
			cs.Ready = true
		}
	case isWaiting:
		cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: wt.reason, Message: wt.message}
	default:
		cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: defaultWaiting}
	}
	if cs.State.Waiting != nil && cs.LastTerminationState.Terminated == nil && prev != nil && prev.State == runtimeapi.ContainerState_CONTAINER_EXITED {
		// An instance created and not started yet: the one before is its lastState, as the
		// kubelet shows it, so that the pod stays Running while its container restarts.
		cs.LastTerminationState.Terminated = w.terminatedState(c, prev)
	}
	if resetCount > 0 && prev == nil && cs.LastTerminationState.Terminated == nil && (cur != nil || resetWaiting) {
		// The instance before was removed by the restart of all containers: that is its
		// last state, as the kubelet carries it over.
		cs.LastTerminationState.Terminated = restartedAllState()
	}
	if cs.Started == nil {
		f := false
		cs.Started = &f
	}
	cs.VolumeMounts = w.volumeMountStatuses(pod, c)
	if ephemeralSpec(pod, c.Name) == nil {
		// Resizable containers only: the API server takes a running container's resources
		// as the node's support for resize.
		cs.AllocatedResources, cs.Resources = w.containerResources(c, cs.State.Running != nil)
	}
	if cur != nil && cur.User != nil {
		// The identity the runtime reports the container runs as, as the kubelet shows it.
		u := cur.User
		cs.User = &corev1.ContainerUser{Linux: &corev1.LinuxContainerUser{UID: u.GetUid(), GID: u.GetGid(), SupplementalGroups: u.GetSupplementalGroups()}}
	}
	return cs
}

// willRestart reports whether c, whose newest instance cur has exited, is to run again:
// the rules syncRunning and syncInitContainers follow.
func (w *worker) willRestart(pod *corev1.Pod, c *corev1.Container, cur *relist.Container, init bool) bool {
	switch {
	case pod.DeletionTimestamp != nil:
		return false
	case init && isSidecar(c):
		return true
	case init:
		return abandonedStart(cur) || cur.ExitCode != 0 && shouldRestart(pod, c, cur)
	}
	return shouldRestart(pod, c, cur) || w.killedUnknown(cur)
}

func (w *worker) containerID(id string) string {
	name := w.m.o.RuntimeName
	if name == "" {
		name = "containerd"
	}
	return name + "://" + id
}

// terminatedState describes a finished instance, with the termination message its policy asks
// for.
func (w *worker) terminatedState(c *corev1.Container, inst *relist.Container) *corev1.ContainerStateTerminated {
	t := &corev1.ContainerStateTerminated{
		ExitCode: inst.ExitCode, Reason: inst.Reason, Message: inst.Message,
		StartedAt: metav1.NewTime(inst.StartedAt), FinishedAt: metav1.NewTime(inst.FinishedAt),
		ContainerID: w.containerID(inst.ID),
	}
	if t.Reason == "" {
		t.Reason = "Error"
		if t.ExitCode == 0 {
			t.Reason = "Completed"
		}
	}
	t.Message = terminationMessage(c, inst)
	return t
}

// terminalPhase is the phase of a pod that will run no more (deleted, its containers
// stopped): Succeeded when every app container's last run exited 0, else Failed (the
// kubelet's getPhase for a terminal pod).
func terminalPhase(apps []corev1.ContainerStatus) corev1.PodPhase {
	for _, s := range apps {
		if s.State.Terminated == nil || s.State.Terminated.ExitCode != 0 {
			return corev1.PodFailed
		}
	}
	return corev1.PodSucceeded
}

// phase is the pod's phase from its containers' statuses (the kubelet's getPhase).
// Sidecars count as running while they run; one that has not started holds the pod
// Pending only until it is initialized; a stopped sidecar does not count. A pod initialized
// once (initialized is also true once an app container has run) is not Pending again while
// a new sandbox runs its init containers again: the kubelet's phase falls back to Pending
// then, a status going backwards that unitlet does not report.
func phase(pod *corev1.Pod, inits, apps []corev1.ContainerStatus, initialized bool) corev1.PodPhase {
	pendingInit, pendingSidecars, failedInit, failedInitFinal := 0, 0, 0, 0
	running, waiting, stopped, stoppedFinal, succeeded := 0, 0, 0, 0, 0
	// final reports whether a container of spec that exited with the code will not be
	// restarted (its restart rules and policy, or the pod's).
	// A container that a restart of all containers removed is restarting.
	final := func(spec []corev1.Container, i int, t *corev1.ContainerStateTerminated) bool {
		c := &corev1.Container{} // a status without its spec: the pod's policy decides
		if i < len(spec) {
			c = &spec[i]
		}
		return t.Reason != reasonRestartingAll && !containerShouldRestart(pod, c, t.ExitCode)
	}
	for i, s := range inits {
		if i < len(pod.Spec.InitContainers) && isSidecar(&pod.Spec.InitContainers[i]) {
			switch {
			case s.State.Running != nil:
				if s.Started == nil || !*s.Started {
					pendingSidecars++
				}
				running++
			case s.State.Terminated != nil:
			case s.State.Waiting != nil && s.LastTerminationState.Terminated != nil:
			default:
				pendingSidecars++
				waiting++
			}
			continue
		}
		switch {
		case s.State.Terminated != nil && s.State.Terminated.ExitCode == 0:
		case s.State.Terminated != nil:
			failedInit++
			if final(pod.Spec.InitContainers, i, s.State.Terminated) {
				failedInitFinal++
			}
		case s.State.Waiting != nil && s.LastTerminationState.Terminated != nil && s.LastTerminationState.Terminated.ExitCode != 0:
			failedInit++
			if final(pod.Spec.InitContainers, i, s.LastTerminationState.Terminated) {
				failedInitFinal++
			}
		default:
			pendingInit++
		}
	}
	for i, s := range apps {
		switch {
		case s.State.Running != nil:
			running++
		case s.State.Terminated != nil:
			stopped++
			if s.State.Terminated.ExitCode == 0 {
				succeeded++
			}
			if final(pod.Spec.Containers, i, s.State.Terminated) {
				stoppedFinal++
			}
		case s.State.Waiting != nil && s.LastTerminationState.Terminated != nil:
			stopped++
			if final(pod.Spec.Containers, i, s.LastTerminationState.Terminated) {
				stoppedFinal++
			}
		default:
			waiting++
		}
	}
	// The kubelet's getPhase with ContainerRestartRules (beta, on in v1.36): each
	// container's own rules and policy, falling back to the pod's, decide what restarts.
	switch {
	case failedInitFinal > 0:
		return corev1.PodFailed
	case (pendingInit > 0 || failedInit > 0 || pendingSidecars > 0) && !initialized:
		return corev1.PodPending
	case waiting > 0:
		return corev1.PodPending
	case running > 0:
		return corev1.PodRunning
	case stopped > 0:
		switch {
		case stopped != stoppedFinal:
			return corev1.PodRunning // at least one of them is restarting
		case stopped == succeeded:
			return corev1.PodSucceeded
		default:
			return corev1.PodFailed
		}
	}
	return corev1.PodPending
}

// volumeMountStatuses are the container's volume mounts as the kubelet reports them: each
// read-only one with its recursive read-only mode as resolved for the pod's runtime
// handler (Enabled or Disabled).
func (w *worker) volumeMountStatuses(pod *corev1.Pod, c *corev1.Container) []corev1.VolumeMountStatus {
	if len(c.VolumeMounts) == 0 {
		return nil
	}
	// The handler's support is looked up only for a mount that asks for it.
	supported := sync.OnceValue(func() bool { return w.criOptions(pod).RecursiveReadOnly })
	out := make([]corev1.VolumeMountStatus, 0, len(c.VolumeMounts))
	for _, vm := range c.VolumeMounts {
		st := corev1.VolumeMountStatus{Name: vm.Name, MountPath: vm.MountPath, ReadOnly: vm.ReadOnly}
		if vm.ReadOnly {
			mode := corev1.RecursiveReadOnlyDisabled
			asks := vm.RecursiveReadOnly != nil && *vm.RecursiveReadOnly != corev1.RecursiveReadOnlyDisabled
			if on, err := criconfig.RecursiveReadOnly(vm, asks && supported()); err == nil && on {
				mode = corev1.RecursiveReadOnlyEnabled
			}
			st.RecursiveReadOnly = &mode
		}
		out = append(out, st)
	}
	return out
}
