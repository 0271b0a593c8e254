package podworker

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/flowcontrol"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/unitlet/unitlet/services/podsync/criconfig"
	"github.com/unitlet/unitlet/services/podsync/relist"
)

// syncResult is what a sync did and found.
type syncResult struct {
	operation  string // for the worker duration metric: "create", "sync", "terminate"
	status     corev1.PodStatus
	containers []ContainerRef
	terminated bool
	forget     bool
	next       time.Duration
	// unread: the runtime could not be read (the runtime restarting, say), so status says
	// nothing; the last report stands rather than one built from no containers, which
	// would send a running pod back to Pending.
	unread bool
}

// state is a consistent copy of the worker's fields for one sync.
type state struct {
	pod                   *corev1.Pod
	terminating, unwanted bool
	grace                 *int64
	killReason, killMsg   string
	keepSucceeded         bool
	disruption            *corev1.PodCondition
	restarts              map[string]restartRequest
}

func (w *worker) snapshot() state {
	w.mu.Lock()
	defer w.mu.Unlock()
	st := state{pod: w.pod, terminating: w.terminating, unwanted: w.unwanted, grace: w.grace, killReason: w.killReason, killMsg: w.killMessage, keepSucceeded: w.keepSucceeded, disruption: w.disruption, restarts: map[string]restartRequest{}}
	for k, v := range w.restarts {
		st.restarts[k] = v
	}
	return st
}

func (w *worker) sync(ctx context.Context) syncResult {
	w.retryResize()
	st := w.snapshot()
	pod := st.pod
	log := w.m.o.Log.With("pod", pod.Namespace+"/"+pod.Name, "uid", pod.UID)
	w.acted.Store(false)
	rp, err := w.m.o.View.Inspect(ctx, w.uid)
	if err != nil {
		log.Warn("read the pod's runtime state", "err", err)
		return syncResult{operation: "sync", unread: true, next: time.Second}
	}
	seen := w.m.o.Clock.Now()
	for _, c := range podContainers(rp) {
		if c.Running() {
			w.sawRunning(c.Name, c.ID, seen)
		}
	}

	// Past its activeDeadlineSeconds (which may have changed since the pod started), the
	// pod is ended Failed, as the kubelet does; before, it is synced again when it passes.
	var deadline time.Duration
	if left, ok := w.untilDeadline(pod); ok && !st.terminating && !w.isTerminated() {
		if left <= 0 {
			w.event(pod, corev1.EventTypeNormal, reasonDeadlineExceeded, messageDeadlineExceeded)
			w.terminate(nil, reasonDeadlineExceeded, messageDeadlineExceeded, false)
			st = w.snapshot()
		} else {
			deadline = left
		}
	}
	if st.terminating || w.isTerminated() {
		return w.syncTerminating(ctx, pod, rp, st)
	}
	// A pod the API has in a terminal phase ran its course before this worker (on this node
	// before podsync restarted, or it was rejected): as with the kubelet, it does not run
	// again, whatever is left of it in the runtime, and keeps the status the API has.
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		w.mu.Lock()
		w.terminated = true
		w.final = pod.Status.DeepCopy()
		w.mu.Unlock()
		return w.syncTerminating(ctx, pod, rp, st)
	}
	res := syncResult{operation: "sync"}
	if rp.Empty() {
		res.operation = "create"
	}
	w.trace.begin(rp.Empty(), w.m.o.Clock.Now())
	next, err := w.syncRunning(ctx, pod, rp, st)
	if err != nil {
		log.Info("sync pod", "err", err)
	}
	if w.acted.Load() {
		if rp, err = w.m.o.View.Inspect(ctx, w.uid); err != nil {
			log.Warn("read the pod's runtime state", "err", err)
			res.unread, res.next = true, time.Second
			return res
		}
	}
	w.finishResize(pod, rp)
	res.status = w.status(pod, rp, st)
	if allContainersRunning(pod, &res.status) {
		w.trace.mark(phaseContainersStarted, w.m.o.Clock.Now())
	}
	res.containers = refs(pod, rp)
	res.next = next
	if deadline > 0 {
		res.next = sooner(next, deadline)
	}
	// A pod whose containers are all done for good stops its sandbox (the kubelet does too).
	// Its final phase is reported first, as the kubelet's status manager has it before the
	// sandbox stops: on a loaded runtime a sandbox's stop can take minutes (fault run 19:
	// finish pods Running in the API 107 s after their container exited).
	if res.status.Phase == corev1.PodSucceeded || res.status.Phase == corev1.PodFailed {
		w.mu.Lock()
		w.terminated = true
		w.mu.Unlock()
		w.report(res)
		return w.syncTerminating(ctx, pod, rp, st)
	}
	return res
}

// reportStopped reports the status of a terminating pod whose containers have all
// stopped, before its sandbox stops: that status is its final one, and a loaded runtime can
// take tens of seconds over a sandbox's stop (its network's teardown; CI's run of c6e9dd3:
// a node shutdown's pods stopped 7 s after it began, their sandboxes 40 s later), which a
// shutdown's budget or a pod's watcher should not wait for. The pod is not yet reported
// Terminated: that waits for the sandbox and volumes.
func (w *worker) reportStopped(ctx context.Context, pod *corev1.Pod, st state) {
	rp, err := w.m.o.View.Inspect(ctx, w.uid)
	if err != nil {
		return
	}
	for _, c := range rp.Containers {
		if c.Running() {
			return
		}
	}
	w.report(syncResult{operation: "terminate", status: w.finalStatus(pod, rp, st), containers: refs(pod, rp)})
}

// finalStatus is the status the pod ended with: the first one computed once its containers
// have stopped (see worker.final), computed now if there is none yet.
func (w *worker) finalStatus(pod *corev1.Pod, rp *relist.Pod, st state) corev1.PodStatus {
	w.mu.Lock()
	final := w.final
	w.mu.Unlock()
	if final == nil {
		status := w.status(pod, rp, st)
		final = &status
		w.mu.Lock()
		w.final = final
		w.mu.Unlock()
	}
	return *final.DeepCopy()
}

func (w *worker) isTerminated() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.terminated
}

// syncTerminating stops everything of the pod, and forgets it when it is no longer wanted.
func (w *worker) syncTerminating(ctx context.Context, pod *corev1.Pod, rp *relist.Pod, st state) syncResult {
	res := syncResult{operation: "terminate"}
	w.probesSeeDeletion(pod, rp)
	if err := w.killPod(ctx, pod, rp, st.grace, "Stopping container %s", func() { w.reportStopped(ctx, pod, st) }); err != nil {
		w.m.o.Log.Warn("stop pod", "pod", pod.Namespace+"/"+pod.Name, "err", err)
		res.status = w.status(pod, rp, st)
		res.next = time.Second
		return res
	}
	if w.acted.Load() {
		var err error
		if rp, err = w.m.o.View.Inspect(ctx, w.uid); err != nil {
			res.unread, res.next = true, time.Second
			return res
		}
	}
	if v := w.m.o.Volumes; v != nil {
		// Containers stopped: the volumes go (tmpfs unmounted, files removed).
		if err := v.Release(ctx, pod); err != nil {
			w.m.o.Log.Warn("release the pod's volumes", "pod", pod.Namespace+"/"+pod.Name, "err", err)
			res.status = w.status(pod, rp, st)
			res.next = 5 * time.Second
			return res
		}
	}
	w.mu.Lock()
	w.terminated = true
	w.mu.Unlock()
	res.terminated = true
	res.status = w.finalStatus(pod, rp, st)
	res.containers = refs(pod, rp)
	if st.unwanted {
		// Nobody wants the pod any more: remove its containers and sandboxes.
		if err := w.removeAll(ctx, rp); err != nil {
			w.m.o.Log.Warn("remove pod's containers", "pod", pod.Namespace+"/"+pod.Name, "err", err)
			res.next = 5 * time.Second
			return res
		}
		forgetBackoff(w.m.backoff, pod)
		res.forget = true
	}
	return res
}

// probesSeeDeletion hands a deleted pod to the probe workers of its running containers:
// liveness and startup probes stop (a terminating pod's containers are not restarted),
// readiness goes on until each container stops, as the kubelet's probes do.
func (w *worker) probesSeeDeletion(pod *corev1.Pod, rp *relist.Pod) {
	if w.m.o.Probes == nil || pod.DeletionTimestamp == nil || rp == nil {
		return
	}
	for _, cur := range rp.Containers {
		if !cur.Running() {
			continue
		}
		c := specOf(pod, cur.Name)
		if c.LivenessProbe != nil || c.ReadinessProbe != nil || c.StartupProbe != nil {
			w.m.o.Probes.SetContainer(pod, first(w.podIPs(pod, rp.ReadySandbox())), c, cur.ID, cur.StartedAt)
		}
	}
}

// ensureCgroup makes or adopts the pod's cgroup once per version of the pod; a failure is
// a FailedCreatePodContainer event, as the kubelet reports it, and the pod waits.
func (w *worker) ensureCgroup(ctx context.Context, pod *corev1.Pod) error {
	cg := w.m.o.Cgroups
	if cg == nil {
		return nil
	}
	w.mu.Lock()
	done := w.cgroupFor == pod
	w.mu.Unlock()
	if done {
		return nil
	}
	if err := cg.EnsurePod(ctx, pod); err != nil {
		w.event(pod, corev1.EventTypeWarning, "FailedCreatePodContainer", "unable to ensure pod container exists: "+err.Error())
		return fmt.Errorf("pod cgroup: %w", err)
	}
	w.mu.Lock()
	w.cgroupFor = pod
	w.mu.Unlock()
	return nil
}

// sandboxRetry is how soon a pod whose sandbox could not be made (its RuntimeClass
// missing or not read yet, the runtime failing) is synced again: the kubelet's pod
// worker backoff after a failed sync.
const sandboxRetry = 10 * time.Second

// How soon a pod whose volumes are not ready is synced again: a quarter second after the
// first failure, doubled after each, at most 5 s. A claim is typically bound a second or
// two after the pod is scheduled (WaitForFirstConsumer provisioning), and the kubelet
// notices within a few hundred milliseconds; unitlet-volumes backs a failing driver off
// on its own.
const (
	volumeRetryFirst = 250 * time.Millisecond
	volumeRetryMax   = 5 * time.Second
)

// volumeRetry is the wait before the next try of a pod whose prepare failed n times in
// a row.
func volumeRetry(n int) time.Duration {
	if n < 1 {
		n = 1
	}
	d := volumeRetryFirst
	for i := 1; i < n && d < volumeRetryMax; i++ {
		d *= 2
	}
	return min(d, volumeRetryMax)
}

// volumeMounts prepares the pod's volumes once per version of the pod (unitlet-volumes
// keeps their content current) and returns each container's mounts. While they cannot be
// prepared, the containers that have no instance in sandbox sb (nil: a sandbox to be
// made) wait in ContainerCreating and a FailedMount event says why; one that ran keeps its
// state. Once they are prepared, no container waits in ContainerCreating any more.
func (w *worker) volumeMounts(ctx context.Context, pod *corev1.Pod, rp *relist.Pod, sb *relist.Sandbox) (map[string][]criconfig.Mount, error) {
	v := w.m.o.Volumes
	if v == nil || len(pod.Spec.Volumes) == 0 {
		return nil, nil
	}
	w.mu.Lock()
	if w.mountsFor == pod {
		m := w.mounts
		w.mu.Unlock()
		return m, nil
	}
	w.mu.Unlock()
	mounts, err := v.Prepare(ctx, pod)
	if err != nil {
		for _, c := range append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
			if sb == nil || latestIn(rp, c.Name, sb.ID) == nil {
				w.setWaiting(c.Name, "ContainerCreating", "")
			}
		}
		w.event(pod, corev1.EventTypeWarning, "FailedMount", "MountVolume.SetUp failed: "+err.Error())
		w.mu.Lock()
		w.volumeFailures++
		w.mu.Unlock()
		return nil, fmt.Errorf("volumes: %w", err)
	}
	w.mu.Lock()
	w.volumeFailures = 0
	w.mounts, w.mountsFor = mounts, pod
	for name, wt := range w.waiting {
		if wt.reason == "ContainerCreating" {
			delete(w.waiting, name)
		}
	}
	w.mu.Unlock()
	return mounts, nil
}

// syncRunning brings the runtime in line with a pod that should run. It returns when the
// pod needs another sync at the latest (a backoff ending), 0 for the usual resync.
func (w *worker) syncRunning(ctx context.Context, pod *corev1.Pod, rp *relist.Pod, st state) (time.Duration, error) {
	sb := rp.ReadySandbox()
	newSandbox := sb == nil // ephemeral containers wait for the next sync
	if sb == nil {
		// No ready sandbox: kill what is left and make a new one, unless the pod has
		// already run and must not be restarted, or an init container of it failed under
		// Never: the pod has failed (its status says so), and a podsync that finds it after
		// another one stopped its sandbox must not run it again.
		if !rp.Empty() && pod.Spec.RestartPolicy == corev1.RestartPolicyNever && (ranAny(pod, rp) || initFailed(pod, rp)) {
			return 0, w.killPod(ctx, pod, rp, nil, "Stopping container %s")
		}
		if !rp.Empty() {
			if err := w.killPod(ctx, pod, rp, nil, "Stopping container %s"); err != nil {
				return time.Second, err
			}
		}
		attempt := uint32(0)
		if len(rp.GetSandboxes()) > 0 {
			attempt = rp.Sandboxes[0].Attempt + 1
		}
		// The pod's cgroup, then its volumes, as the kubelet makes them before the sandbox.
		if err := w.ensureCgroup(ctx, pod); err != nil {
			return time.Second, err
		}
		w.trace.mark(phaseCgroup, w.m.o.Clock.Now())
		if _, err := w.volumeMounts(ctx, pod, nil, nil); err != nil {
			w.mu.Lock()
			n := w.volumeFailures
			w.mu.Unlock()
			return volumeRetry(n), err
		}
		w.trace.mark(phaseVolumes, w.m.o.Clock.Now())
		var err error
		if sb, err = w.runSandbox(ctx, pod, attempt); err != nil {
			return sandboxRetry, err
		}
		w.trace.mark(phaseSandbox, w.m.o.Clock.Now())
		// A new sandbox runs init containers again from the start (what follows looks at
		// the instances in sb only); the old sandboxes' instances stay in the view, so
		// that restart counts go on from them, as the kubelet's do.
		rp = &relist.Pod{UID: pod.UID, Name: pod.Name, Namespace: pod.Namespace,
			Sandboxes: append([]*relist.Sandbox{sb}, rp.GetSandboxes()...), Containers: podContainers(rp)}
	}
	o, err := w.podOptions(pod)
	if err != nil {
		return time.Second, err
	}
	sbCfg, err := criconfig.SandboxConfig(pod, sb.Attempt, o)
	if err != nil {
		return 0, err
	}
	// A running pod this worker has not seen yet (podsync restarted): adopt its cgroup and
	// set the pod's limits on it again.
	if restarted, err := w.actuateResize(ctx, pod, rp, sb); err != nil {
		return 5 * time.Second, err
	} else if restarted {
		if rp, err = w.m.o.View.Inspect(ctx, w.uid); err != nil {
			return time.Second, err
		}
	}
	if err := w.ensureCgroup(ctx, pod); err != nil {
		return time.Second, err
	}

	// A container that exited asking for it restarts the whole pod in place (restartall.go).
	if sources := restartAllSources(pod, rp, sb); len(sources) > 0 {
		if err := w.restartAll(ctx, pod, rp, sb, sources, st); err != nil {
			return time.Second, err
		}
		if rp, err = w.m.o.View.Inspect(ctx, w.uid); err != nil {
			return time.Second, err
		}
	}

	// Probe failures and spec changes: kill the instance; it is restarted below.
	for _, c := range restartable(pod) {
		cur := rp.Latest(c.Name)
		if cur == nil || !cur.Running() || cur.SandboxID != sb.ID {
			continue
		}
		k, ok := w.restartKill(pod, c, cur, st)
		if !ok {
			continue
		}
		if err := w.killContainer(ctx, pod, c, cur, sb, k); err != nil {
			return time.Second, err
		}
		w.mu.Lock()
		delete(w.restarts, c.Name)
		w.mu.Unlock()
		if rp, err = w.m.o.View.Inspect(ctx, w.uid); err != nil {
			return time.Second, err
		}
	}

	// Instances whose state the runtime lost: killed first, and then restarted below.
	if killed, err := w.killUnknown(ctx, pod, rp, sb); err != nil {
		return time.Second, err
	} else if killed {
		if rp, err = w.m.o.View.Inspect(ctx, w.uid); err != nil {
			return time.Second, err
		}
	}

	// A container whose start a killed podsync interrupted: remove it and start afresh,
	// with the same restart count.
	if removed, err := w.removeUnstarted(ctx, pod, rp, sb.ID); err != nil {
		return time.Second, err
	} else if removed {
		if rp, err = w.m.o.View.Inspect(ctx, w.uid); err != nil {
			return time.Second, err
		}
	}

	// The app containers are done for good: the sidecars stop (in the kubelet's order)
	// rather than being kept or restarted, and the pod completes.
	if appsFinished(pod, rp, sb.ID) && sidecarRunning(pod, rp) {
		return 0, w.killPod(ctx, pod, rp, nil, "Stopping container %s")
	}

	// Ephemeral containers (ephemeral.go): before the init containers, as the kubelet.
	if !newSandbox {
		w.startEphemeral(ctx, pod, sb, sbCfg, rp)
	}

	// Init containers and sidecars, in order; the app containers once they are done.
	initialized, next, err := w.syncInitContainers(ctx, pod, rp, sb, sbCfg)
	if err != nil || !initialized {
		return next, err
	}

	// App containers.
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		cur := latestIn(rp, c.Name, sb.ID)
		if cur != nil && cur.Running() {
			if cur.Running() {
				w.setWaiting(c.Name, "", "")
				// Probes follow the running instance, also one an earlier podsync started.
				if w.m.o.Probes != nil {
					w.m.o.Probes.SetContainer(pod, first(w.podIPs(pod, sb)), c, cur.ID, cur.StartedAt)
				}
			}
			continue
		}
		if cur != nil && !shouldRestart(pod, c, cur) && !w.killedUnknown(cur) {
			continue
		}
		if cur != nil {
			if wait := w.backoffWait(pod, c, cur); wait > 0 {
				next = sooner(next, wait)
				continue
			}
		}
		if err := w.startContainer(ctx, pod, c, sb, sbCfg, rp, false); err != nil {
			w.m.o.Log.Info("start container", "pod", pod.Namespace+"/"+pod.Name, "container", c.Name, "err", err)
			next = sooner(next, time.Second)
		}
	}
	w.pruneDead(ctx, pod, rp)
	return next, nil
}

// killUnknown stops the instances in sandbox sb whose state the runtime reports unknown
// (containerd lost track of a task across its own restart), as the kubelet does before it
// starts such a container again, so that no second instance runs beside one that may
// still run. The runtime then reports the instance exited (containerd: code 255, reason
// Unknown). An init container goes on as one that failed: the pod fails under
// restartPolicy Never, else the init container runs again; an app container or a sidecar
// is started again whatever the policy (the kubelet's ShouldContainerBeRestarted).
func (w *worker) killUnknown(ctx context.Context, pod *corev1.Pod, rp *relist.Pod, sb *relist.Sandbox) (bool, error) {
	killed := false
	for _, c := range rp.Containers {
		if c.SandboxID != sb.ID || c.State != runtimeapi.ContainerState_CONTAINER_UNKNOWN || latestIn(rp, c.Name, sb.ID) != c {
			continue
		}
		spec := specOf(pod, c.Name)
		what := "Container"
		if !slices.ContainsFunc(pod.Spec.Containers, func(a corev1.Container) bool { return a.Name == c.Name }) {
			what = "Init container"
		}
		k := kill{message: what + ` is in "unknown" state, try killing it before restart`, reason: ReasonUnknown}
		at := w.m.o.Clock.Now()
		if err := w.killContainer(ctx, pod, spec, c, sb, k); err != nil {
			return killed, err
		}
		w.mu.Lock()
		w.unknownKilled[c.Name] = instanceSeen{id: c.ID, at: at}
		w.mu.Unlock()
		killed = true
	}
	return killed, nil
}

// killedUnknown reports whether the exited instance cur was ended by killUnknown's kill,
// and so is started again whatever the restart policy. One the runtime shows finished
// before the kill was asked ended on its own while the runtime had lost track of it (a
// task that exited while containerd restarted, found again by the stop): its own exit
// stands, and the restart policy applies to it. The kubelet restarts such a container
// under any policy; unitlet does not run again a container that completed under Never.
func (w *worker) killedUnknown(cur *relist.Container) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	k, ok := w.unknownKilled[cur.Name]
	if !ok || k.id != cur.ID {
		return false
	}
	return cur.FinishedAt.IsZero() || !cur.FinishedAt.Before(k.at)
}

// restartable are the containers a probe or a spec change restarts while they run: the
// pod's sidecars and its app containers.
func restartable(pod *corev1.Pod) []*corev1.Container {
	var out []*corev1.Container
	for i := range pod.Spec.InitContainers {
		if isSidecar(&pod.Spec.InitContainers[i]) {
			out = append(out, &pod.Spec.InitContainers[i])
		}
	}
	for i := range pod.Spec.Containers {
		out = append(out, &pod.Spec.Containers[i])
	}
	return out
}

// restartKill is whether a running instance is to be killed for a restart, and how: a
// failed liveness or startup probe of this instance, or a container whose spec changed
// (the kubelet's messages).
func (w *worker) restartKill(pod *corev1.Pod, c *corev1.Container, cur *relist.Container, st state) (kill, bool) {
	what := "Container " + c.Name
	if isSidecar(c) {
		what = "Init container " + c.Name
	}
	k := kill{}
	if r, ok := st.restarts[c.Name]; ok && r.containerID == cur.ID {
		k.reason = r.reason
		switch r.reason {
		case ReasonStartupProbe:
			k.message = what + " failed startup probe"
		default:
			k.message = what + " failed liveness probe"
		}
		if !isSidecar(c) && canRestart(pod, c) {
			k.message += ", will be restarted"
		}
		return k, true
	}
	if info := criconfig.ParseContainerLabels(cur.Labels, cur.Annotations); info.Hash != 0 && info.Hash != criconfig.Hash(c) {
		k.message = what + " definition changed"
		if !isSidecar(c) {
			k.message += ", will be restarted"
		}
		return k, true
	}
	return k, false
}

// interruptedStart reports whether a container instance never ran because a podsync was
// killed while starting it: created and never started, or failed to start while the start
// journal says a start was in flight (containerd ends a start whose caller goes away).
// Such an instance is no failure of the container's: it does not count as a restart.
func (w *worker) interruptedStart(c *relist.Container) bool {
	switch c.State {
	case runtimeapi.ContainerState_CONTAINER_CREATED:
		return true
	case runtimeapi.ContainerState_CONTAINER_EXITED:
		return c.StartedAt.IsZero() && w.m.journal.interrupted(c.ID)
	}
	return false
}

// removeUnstarted removes the pod's containers in sandbox sbID whose start was interrupted.
func (w *worker) removeUnstarted(ctx context.Context, pod *corev1.Pod, rp *relist.Pod, sbID string) (bool, error) {
	removed := false
	for _, c := range rp.Containers {
		if c.SandboxID != sbID {
			continue
		}
		if !c.StartedAt.IsZero() {
			// It ran: a start of it the journal kept (its outcome unknown) did happen.
			w.m.journal.end(c.ID)
			continue
		}
		if !w.interruptedStart(c) {
			continue
		}
		w.m.o.Log.Info("removing a container created but never started", "pod", pod.Namespace+"/"+pod.Name, "container", c.Name, "id", c.ID)
		if _, err := w.m.o.Runtime.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: c.ID}); err != nil {
			if c.State != runtimeapi.ContainerState_CONTAINER_EXITED {
				return removed, fmt.Errorf("remove unstarted container %s: %w", c.ID, err)
			}
			// containerd 2.x keeps the created task of a start it abandoned and refuses to
			// remove the container until it restarts (containerd issue 11037). It stays, as
			// a start that never ran, and a new instance is started beside it.
			w.m.o.Log.Warn("the runtime keeps a container whose start it abandoned; starting a new instance beside it", "pod", pod.Namespace+"/"+pod.Name, "container", c.Name, "id", c.ID, "err", err)
			w.m.journal.end(c.ID)
			continue
		}
		w.acted.Store(true)
		w.m.journal.end(c.ID)
		removed = true
	}
	return removed, nil
}

// latestIn is the newest instance of a container in the sandbox sbID.
func latestIn(rp *relist.Pod, name, sbID string) *relist.Container {
	for _, c := range rp.Instances(name) {
		if c.SandboxID == sbID {
			return c
		}
	}
	return nil
}

// shouldRestart applies the container's restart rules and policy (ContainerRestartRules,
// beta and on in v1.36), else the pod's, to a finished instance. A start the runtime
// abandoned is tried again whatever the policy: the container never ran.
func shouldRestart(pod *corev1.Pod, c *corev1.Container, inst *relist.Container) bool {
	if abandonedStart(inst) {
		return true
	}
	return containerShouldRestart(pod, c, inst.ExitCode)
}

// containerShouldRestart is the kubelet's rule for a container that exited with exitCode:
// the first of its restartPolicyRules that matches the code decides (action Restart, or
// RestartAllContainers, which restarts it with the rest of the pod), else its own
// restartPolicy, else the pod's.
func containerShouldRestart(pod *corev1.Pod, c *corev1.Container, exitCode int32) bool {
	if c.RestartPolicy != nil {
		if _, ok := matchingRestartRule(c, exitCode); ok {
			return true
		}
		switch *c.RestartPolicy {
		case corev1.ContainerRestartPolicyAlways:
			return true
		case corev1.ContainerRestartPolicyOnFailure:
			return exitCode != 0
		case corev1.ContainerRestartPolicyNever:
			return false
		}
	}
	switch pod.Spec.RestartPolicy {
	case corev1.RestartPolicyNever:
		return false
	case corev1.RestartPolicyOnFailure:
		return exitCode != 0
	}
	return true
}

// matchingRestartRule is the first of c's restartPolicyRules whose exit codes match.
func matchingRestartRule(c *corev1.Container, exitCode int32) (corev1.ContainerRestartRule, bool) {
	for _, r := range c.RestartPolicyRules {
		if r.ExitCodes == nil {
			continue
		}
		in := slices.Contains(r.ExitCodes.Values, exitCode)
		switch r.ExitCodes.Operator {
		case corev1.ContainerRestartRuleOnExitCodesOpIn:
			if in {
				return r, true
			}
		case corev1.ContainerRestartRuleOnExitCodesOpNotIn:
			if !in {
				return r, true
			}
		}
	}
	return corev1.ContainerRestartRule{}, false
}

// canRestart reports whether c can ever be restarted: by a restart rule, its own
// restartPolicy or the pod's (the kubelet's IsContainerRestartable).
func canRestart(pod *corev1.Pod, c *corev1.Container) bool {
	if c.RestartPolicy != nil {
		for _, r := range c.RestartPolicyRules {
			if r.Action == corev1.ContainerRestartRuleActionRestart {
				return true
			}
		}
		return *c.RestartPolicy != corev1.ContainerRestartPolicyNever
	}
	return pod.Spec.RestartPolicy != corev1.RestartPolicyNever
}

// ranAny reports whether any app container of the pod has run.
func ranAny(pod *corev1.Pod, rp *relist.Pod) bool {
	for _, c := range pod.Spec.Containers {
		if rp.Latest(c.Name) != nil {
			return true
		}
	}
	return false
}

// initFailed reports whether the newest instance of a regular init container of the pod
// exited non-zero (a start the runtime abandoned aside): the rule by which the status
// counts an init container failed.
func initFailed(pod *corev1.Pod, rp *relist.Pod) bool {
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		if isSidecar(c) {
			continue
		}
		if cur := rp.Latest(c.Name); cur != nil && cur.State == runtimeapi.ContainerState_CONTAINER_EXITED && cur.ExitCode != 0 && !abandonedStart(cur) {
			return true
		}
	}
	return false
}

// abandonedStart reports whether the runtime gave up a container's start because the
// agent's call was cancelled (podsync stopped or was killed during StartContainer): the
// container never ran and its failure is not the workload's. containerd 2.x leaves such a
// container exited with reason StartError and "context canceled" in its message, and
// keeps its created task, so the instance cannot be removed until containerd restarts
// (containerd issue 11037). The container is started again at once, with no crash-loop
// backoff, and its status shows it waiting rather than failed.
func abandonedStart(c *relist.Container) bool {
	return c.State == runtimeapi.ContainerState_CONTAINER_EXITED && c.StartedAt.IsZero() &&
		c.Reason == "StartError" && strings.Contains(c.Message, "context canceled")
}

// forgetBackoff drops the crash-loop backoffs of a pod that is gone: its containers' at
// their current spec, and any older ones (a spec changed since) once they are stale.
func forgetBackoff(b *flowcontrol.Backoff, pod *corev1.Pod) {
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			b.DeleteEntry(backoffKey(pod, &cs[i]))
		}
	}
	b.GC()
}

// backoffKey names a container's crash-loop backoff.
func backoffKey(pod *corev1.Pod, c *corev1.Container) string {
	return fmt.Sprintf("%s_%s_%s_%s_%d", pod.UID, pod.Namespace, pod.Name, c.Name, criconfig.Hash(c))
}

// backoffWait is how long a finished container must still wait before its restart (the
// kubelet's crash-loop backoff); while it waits, the container is Waiting CrashLoopBackOff.
func (w *worker) backoffWait(pod *corev1.Pod, c *corev1.Container, cur *relist.Container) time.Duration {
	if abandonedStart(cur) {
		w.event(pod, corev1.EventTypeNormal, "StartAbandoned", fmt.Sprintf("The runtime abandoned the start of container %s when podsync stopped; starting it again", c.Name))
		return 0
	}
	key := backoffKey(pod, c)
	b := w.m.backoff
	finished := w.exitedAt(cur)
	if b.IsInBackOffSince(key, finished) {
		d := b.Get(key)
		wait := d - w.m.o.Clock.Since(finished)
		msg := fmt.Sprintf("back-off %s restarting failed container=%s pod=%s_%s(%s)", d, c.Name, pod.Name, pod.Namespace, pod.UID)
		w.setWaiting(c.Name, "CrashLoopBackOff", msg)
		w.event(pod, corev1.EventTypeWarning, "BackOff", fmt.Sprintf("Back-off restarting failed container %s in pod %s_%s(%s)", c.Name, pod.Name, pod.Namespace, pod.UID))
		return max(wait, 100*time.Millisecond)
	}
	b.Next(key, finished)
	return 0
}

// exitedAt is when the exited container instance cur finished, on the manager's clock.
// The runtime's FinishedAt is a reading of the node's wall clock, which may step (NTP, an
// operator's date -s): a backoff counted from it would end at once after a step forward
// and run on for the length of a step back. So the first sync that sees the exit takes
// its age by the wall clock then, and keeps the instant that far before the clock's Now,
// which in Go carries the monotonic reading: later steps move neither the backoff's start
// nor its end. The instant is no later than Now (the clock stepped back between the exit
// and the sync) and no earlier than when the instance was last known to run (the clock
// stepped forward between), so a step before the exit was seen errs by the instance's
// run at most.
func (w *worker) exitedAt(cur *relist.Container) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	if e, ok := w.exits[cur.Name]; ok && e.id == cur.ID {
		return e.at
	}
	now := w.m.o.Clock.Now()
	at := now.Add(-max(now.Sub(cur.FinishedAt), 0))
	if r, ok := w.running[cur.Name]; ok && r.id == cur.ID && at.Before(r.at) {
		at = r.at
	}
	w.exits[cur.Name] = instanceSeen{id: cur.ID, at: at}
	return at
}

// podContainers are rp's container instances; none for a nil pod.
func podContainers(rp *relist.Pod) []*relist.Container {
	if rp == nil {
		return nil
	}
	return rp.Containers
}

// sawRunning records that the named container's instance id ran at at.
func (w *worker) sawRunning(name, id string, at time.Time) {
	w.mu.Lock()
	w.running[name] = instanceSeen{id: id, at: at}
	w.mu.Unlock()
}

func (w *worker) event(pod *corev1.Pod, eventType, reason, message string) {
	if w.m.o.Events != nil {
		w.m.o.Events.Event(pod, eventType, reason, message)
	}
}

// refs are the runtime instances of the pod's containers.
func refs(pod *corev1.Pod, rp *relist.Pod) []ContainerRef {
	var out []ContainerRef
	add := func(cs []corev1.Container, init bool) {
		for _, c := range cs {
			r := ContainerRef{Name: c.Name, Init: init}
			if cur := rp.Latest(c.Name); cur != nil {
				r.ID, r.LogPath = cur.ID, cur.LogPath
			}
			out = append(out, r)
		}
	}
	add(pod.Spec.InitContainers, true)
	add(pod.Spec.Containers, false)
	add(ephemeralContainers(pod), false)
	return out
}
