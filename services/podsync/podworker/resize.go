package podworker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/unitlet/unitlet/services/podsync/criconfig"
	"github.com/unitlet/unitlet/services/podsync/relist"
)

// In-place pod resize, as the v1.36 kubelet makes it (InPlacePodVerticalScaling, GA):
//
//   - A pod whose spec asks for other container resources than allocated is admitted
//     again against the node's allocatable with the other pods' allocated requests. One
//     that fits is allocated (checkpointed) at once: a ResizeStarted event, the
//     PodResizeInProgress condition. One that does not waits Deferred (PodResizePending,
//     the kubelet's "Node didn't have enough resource" message) and is tried again on each
//     sync. Pod-level resources (InPlacePodLevelResourcesVerticalScaling) and non-sidecar
//     init containers (InPlacePodVerticalScalingInitContainers), both beta and on in
//     v1.36, are resized too; the Node declares both features.
//   - The allocation is then actuated on each running container whose resources differ
//     (and, when the pod-level limits change, on those that take their limits from them):
//     a container whose resizePolicy for a changed resource is RestartContainer is
//     restarted (whatever the pod's restart policy); the others get
//     UpdateContainerResources. Memory keeps the kubelet's order: the pod's cgroup grows
//     before its containers, and shrinks after them; a memory limit is never set at or
//     below the current usage, a container's or, for the pod-level limit, the sum of its
//     containers' (the resize stays in progress with the kubelet's error, and is tried
//     again). A container that is not running gets its allocated resources when it
//     starts.
//   - Once every running container and the pod's cgroup have their allocated resources,
//     PodResizeInProgress goes and a ResizeCompleted event says so.

// resizeState is the worker's account of a resize.
type resizeState struct {
	// pending is the PodResizePending condition of a resize not allocated, nil: none.
	pending *corev1.PodCondition
	// inProgress: an allocated resize not yet actuated; err is why the last attempt
	// failed.
	inProgress bool
	err        string
}

// admitResize decides a resize of pod (allocated: the pod as allocated now): nil when it
// can be allocated now, else the PodResizePending condition saying why not.
func (m *Manager) admitResize(pod, allocated *corev1.Pod) *corev1.PodCondition {
	if swapForbidsResize(pod, allocated, m.o.CRI) {
		return &corev1.PodCondition{Type: corev1.PodResizePending, Status: corev1.ConditionTrue, Reason: corev1.PodReasonInfeasible,
			Message: "In-place resize of containers with swap is not supported."}
	}
	if m.o.Allocatable == nil {
		return nil
	}
	allocatable := m.o.Allocatable()
	want := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	used := corev1.ResourceList{}
	for _, p := range m.ActivePods() {
		if p.UID == pod.UID {
			continue
		}
		for name, q := range resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{}) {
			sum := used[name]
			sum.Add(q)
			used[name] = sum
		}
	}
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		capacity, ok := allocatable[name]
		if !ok {
			continue
		}
		value := func(q resource.Quantity) int64 {
			if name == corev1.ResourceCPU {
				return q.MilliValue()
			}
			return q.Value()
		}
		req, u, c := value(want[name]), value(used[name]), value(capacity)
		if req > 0 && req > c-u {
			// The kubelet's admission message (its InsufficientResourceError); v1.36 reports
			// every resize its admission refuses as Deferred.
			return &corev1.PodCondition{Type: corev1.PodResizePending, Status: corev1.ConditionTrue, Reason: corev1.PodReasonDeferred,
				Message: fmt.Sprintf("Node didn't have enough resource: %s, requested: %d, used: %d, capacity: %d", name, req, u, c)}
		}
	}
	return nil
}

// swapForbidsResize reports whether a resize from allocated to desired changes the memory
// request of a container that may swap (LimitedSwap) before or after it, and whose
// memory resizePolicy does not restart it: Infeasible, as with the kubelet, which cannot
// move such a container's swap limit in place.
func swapForbidsResize(desired, allocated *corev1.Pod, o criconfig.Options) bool {
	if !o.LimitedSwap {
		return false
	}
	was := map[string]*corev1.Container{}
	for _, cs := range [][]corev1.Container{allocated.Spec.InitContainers, allocated.Spec.Containers} {
		for i := range cs {
			was[cs[i].Name] = &cs[i]
		}
	}
	for _, cs := range [][]corev1.Container{desired.Spec.InitContainers, desired.Spec.Containers} {
		for i := range cs {
			d, a := &cs[i], was[cs[i].Name]
			if a == nil || d.Resources.Requests.Memory().Equal(*a.Resources.Requests.Memory()) {
				continue
			}
			restarts := slices.ContainsFunc(a.ResizePolicy, func(p corev1.ContainerResizePolicy) bool {
				return p.ResourceName == corev1.ResourceMemory && p.RestartPolicy == corev1.RestartContainer
			})
			if !restarts && (criconfig.MaySwap(desired, d, o) || criconfig.MaySwap(allocated, a, o)) {
				return true
			}
		}
	}
	return false
}

// resizeMessage is the kubelet's resize event message: prefix, then the containers'
// resources as pod asks for them, with its generation and an error.
func resizeMessage(prefix string, pod *corev1.Pod, errMsg string) string {
	type container struct {
		Name      string                      `json:"name"`
		Resources corev1.ResourceRequirements `json:"resources,omitempty"`
	}
	summary := struct {
		InitContainers []container `json:"initContainers,omitempty"`
		Containers     []container `json:"containers,omitempty"`
		Generation     int64       `json:"generation"`
		Error          string      `json:"error,omitempty"`
	}{Generation: pod.Generation, Error: errMsg}
	for _, c := range pod.Spec.InitContainers {
		summary.InitContainers = append(summary.InitContainers, container{c.Name, c.Resources})
	}
	for _, c := range pod.Spec.Containers {
		summary.Containers = append(summary.Containers, container{c.Name, c.Resources})
	}
	b, err := json.Marshal(summary)
	if err != nil {
		return prefix
	}
	return prefix + ": " + string(b)
}

// takeSpec decides what of desired (the pod as the API has it) runs: the allocation,
// with a resize allocated first when it fits. It returns the pod to run and whether the
// resize state changed. Called without w.mu held: admission reads the other workers.
func (w *worker) takeSpec(desired *corev1.Pod) (*corev1.Pod, bool) {
	w.mu.Lock()
	resized := w.alloc.differs(desired)
	wasPending := w.resize.pending
	w.mu.Unlock()
	if len(resized) == 0 {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.resize.pending = nil
		return desired, wasPending != nil
	}
	w.mu.Lock()
	allocated := w.alloc.apply(desired, resized)
	w.mu.Unlock()
	pending := w.m.admitResize(desired, allocated)
	w.mu.Lock()
	if pending == nil {
		// Allocated: the containers' and the pod's resources as asked.
		next := allocationOf(desired)
		next.Actuated, next.ActuatedPod = w.alloc.Actuated, w.alloc.ActuatedPod
		w.alloc = next
		w.resize = resizeState{inProgress: true}
		w.m.checkpointAllocation(desired, w.alloc)
		w.mu.Unlock()
		w.event(desired, corev1.EventTypeNormal, "ResizeStarted", resizeMessage("Pod resize started", desired, ""))
		return desired, true
	}
	w.resize.pending = pending
	alloc := w.alloc
	w.mu.Unlock()
	if wasPending == nil || wasPending.Reason != pending.Reason || wasPending.Message != pending.Message {
		kind := "ResizeDeferred"
		if pending.Reason == corev1.PodReasonInfeasible {
			kind = "ResizeInfeasible"
		}
		w.event(desired, corev1.EventTypeWarning, kind, resizeMessage("Pod resize "+pending.Reason, desired, pending.Message))
	}
	return alloc.apply(desired, resized), wasPending == nil || wasPending.Message != pending.Message
}

// checkpointAllocation writes pod's allocation, logging a failure: the resize goes on,
// and a restarted podsync finds the pod's resources as it was admitted with.
func (m *Manager) checkpointAllocation(pod *corev1.Pod, a allocation) {
	if file := m.allocationFile(pod); file != "" {
		if err := writeAllocation(file, a); err != nil {
			m.o.Log.Warn("checkpoint the pod's allocated resources", "pod", pod.Namespace+"/"+pod.Name, "err", err)
		}
	}
}

// actuated records that container name's new instance runs with r.
func (w *worker) actuated(pod *corev1.Pod, name string, r corev1.ResourceRequirements) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if cur, ok := w.alloc.Actuated[name]; ok && apiequality.Semantic.DeepEqual(cur, r) {
		return
	}
	act := maps.Clone(w.alloc.Actuated)
	if act == nil {
		act = map[string]corev1.ResourceRequirements{}
	}
	act[name] = *r.DeepCopy()
	w.alloc.Actuated = act
	w.m.checkpointAllocation(pod, w.alloc)
}

// cpuMemory is the part of r a resize changes in place.
func cpuMemory(r corev1.ResourceRequirements) [4]int64 {
	return [4]int64{r.Requests.Cpu().MilliValue(), r.Limits.Cpu().MilliValue(), r.Requests.Memory().Value(), r.Limits.Memory().Value()}
}

// memoryLimit is r's memory limit in bytes (0: none).
func memoryLimit(r corev1.ResourceRequirements) int64 { return r.Limits.Memory().Value() }

// needsRestart reports whether c's resize from cur to its spec restarts it: its
// resizePolicy for a changed resource is RestartContainer.
func needsRestart(c *corev1.Container, cur corev1.ResourceRequirements) bool {
	a, b := cpuMemory(cur), cpuMemory(c.Resources)
	changed := map[corev1.ResourceName]bool{
		corev1.ResourceCPU:    a[0] != b[0] || a[1] != b[1],
		corev1.ResourceMemory: a[2] != b[2] || a[3] != b[3],
	}
	for _, p := range c.ResizePolicy {
		if changed[p.ResourceName] && p.RestartPolicy == corev1.RestartContainer {
			return true
		}
	}
	return false
}

// podMemoryLimit is the pod cgroup's memory limit for pod (0: none).
func podMemoryLimit(pod *corev1.Pod) int64 {
	if pod.Spec.Resources != nil && !pod.Spec.Resources.Limits.Memory().IsZero() {
		return pod.Spec.Resources.Limits.Memory().Value()
	}
	var sum int64
	for _, c := range pod.Spec.Containers {
		l := c.Resources.Limits.Memory().Value()
		if l == 0 {
			return 0
		}
		sum += l
	}
	return sum
}

// unactuated are the pod's running containers in sandbox sb whose resources are not yet
// the allocated ones: to update in place, and to restart (their resizePolicy). While the
// pod-level resources are not actuated (podLevel), a container without its own CPU or
// memory limit, which takes the pod's, is updated too.
func (w *worker) unactuated(pod *corev1.Pod, rp *relist.Pod, sb *relist.Sandbox, actuated map[string]corev1.ResourceRequirements, podLevel bool) (update, restart []*corev1.Container) {
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			c := &cs[i]
			cur := rp.Latest(c.Name)
			if cur == nil || !cur.Running() || sb == nil || cur.SandboxID != sb.ID {
				continue
			}
			act, ok := actuated[c.Name]
			switch {
			case !ok:
			case cpuMemory(act) != cpuMemory(c.Resources) && needsRestart(c, act):
				restart = append(restart, c)
			case cpuMemory(act) != cpuMemory(c.Resources):
				update = append(update, c)
			case podLevel && (c.Resources.Limits.Cpu().IsZero() || c.Resources.Limits.Memory().IsZero()):
				update = append(update, c)
			}
		}
	}
	return update, restart
}

// podUnactuated reports whether the pod's cgroup has yet to get its allocated pod-level
// resources.
func (a allocation) podUnactuated() bool {
	return a.Pod != nil && (a.ActuatedPod == nil || cpuMemory(*a.Pod) != cpuMemory(*a.ActuatedPod))
}

// finishResize ends a resize in progress once every running container has its
// allocated resources: the condition goes, a ResizeCompleted event says so.
func (w *worker) finishResize(pod *corev1.Pod, rp *relist.Pod) {
	w.mu.Lock()
	actuated := maps.Clone(w.alloc.Actuated)
	podLevel := w.alloc.podUnactuated()
	inProgress := w.resize.inProgress
	w.mu.Unlock()
	if !inProgress || podLevel {
		return
	}
	if update, restart := w.unactuated(pod, rp, rp.ReadySandbox(), actuated, false); len(update)+len(restart) > 0 {
		return
	}
	w.mu.Lock()
	w.resize.inProgress, w.resize.err = false, ""
	w.mu.Unlock()
	w.event(pod, corev1.EventTypeNormal, "ResizeCompleted", resizeMessage("Pod resize completed", pod, ""))
}

// actuateResize gives the pod's running containers in sandbox sb their allocated
// resources (see the top of this file). It reports whether it restarted a container.
func (w *worker) actuateResize(ctx context.Context, pod *corev1.Pod, rp *relist.Pod, sb *relist.Sandbox) (bool, error) {
	w.mu.Lock()
	actuated := maps.Clone(w.alloc.Actuated)
	podLevel := w.alloc.podUnactuated()
	actuatedPod := w.alloc.ActuatedPod.DeepCopy()
	was := w.resize
	w.mu.Unlock()
	update, restart := w.unactuated(pod, rp, sb, actuated, podLevel)
	if len(update) == 0 && len(restart) == 0 && !podLevel {
		return false, nil
	}
	fail := func(err error) (bool, error) {
		w.mu.Lock()
		w.resize.inProgress, w.resize.err = true, err.Error()
		w.mu.Unlock()
		if was.err != err.Error() {
			w.event(pod, corev1.EventTypeWarning, "ResizeError", resizeMessage("Pod resize error", pod, err.Error()))
		}
		return false, err
	}
	// The pod as its cgroup and containers have it now.
	old := pod.DeepCopy()
	for _, cs := range [][]corev1.Container{old.Spec.InitContainers, old.Spec.Containers} {
		for i := range cs {
			if r, ok := actuated[cs[i].Name]; ok {
				cs[i].Resources = r
			}
		}
	}
	if old.Spec.Resources != nil && actuatedPod != nil {
		old.Spec.Resources = actuatedPod
	}
	newLimit, oldLimit := podMemoryLimit(pod), podMemoryLimit(old)
	if err := w.checkMemoryDecrease(ctx, update, rp, sb, actuated, pod.Spec.Resources != nil && newLimit != 0 && (oldLimit == 0 || newLimit < oldLimit), newLimit); err != nil {
		return fail(err)
	}
	// The pod's cgroup: grown before its containers, shrunk after them.
	grow := newLimit == 0 || oldLimit != 0 && newLimit >= oldLimit
	if grow {
		if err := w.resizeCgroup(ctx, pod); err != nil {
			return fail(err)
		}
	}
	// Smaller memory limits first, as the kubelet orders its updates.
	slices.SortStableFunc(update, func(a, b *corev1.Container) int {
		da := a.Resources.Limits.Memory().Value() - memoryLimit(actuated[a.Name])
		db := b.Resources.Limits.Memory().Value() - memoryLimit(actuated[b.Name])
		return int(min(max(da-db, -1), 1))
	})
	for _, c := range update {
		cur := rp.Latest(c.Name)
		w.acted.Store(true)
		_, err := w.m.o.Runtime.UpdateContainerResources(ctx, &runtimeapi.UpdateContainerResourcesRequest{
			ContainerId: cur.ID, Linux: criconfig.ContainerResources(pod, c, w.m.o.CRI),
		})
		if err != nil {
			return fail(fmt.Errorf("update container %q resources: %w", c.Name, err))
		}
		w.actuated(pod, c.Name, c.Resources)
	}
	if !grow {
		if err := w.resizeCgroup(ctx, pod); err != nil {
			return fail(err)
		}
	}
	for _, c := range restart {
		cur := rp.Latest(c.Name)
		k := kill{message: fmt.Sprintf("Container %s resize requires restart", c.Name), reason: ReasonResize}
		at := w.m.o.Clock.Now()
		if err := w.killContainer(ctx, pod, c, cur, sb, k); err != nil {
			return fail(err)
		}
		w.mu.Lock()
		w.unknownKilled[c.Name] = instanceSeen{id: cur.ID, at: at}
		w.mu.Unlock()
	}
	w.mu.Lock()
	w.resize.err = ""
	w.mu.Unlock()
	return len(restart) > 0, nil
}

// resizeCgroup sets the pod's cgroup to pod's resources, and records its pod-level ones
// actuated.
func (w *worker) resizeCgroup(ctx context.Context, pod *corev1.Pod) error {
	if w.m.o.Cgroups != nil {
		if err := w.m.o.Cgroups.EnsurePod(ctx, pod); err != nil {
			return fmt.Errorf("set the pod's cgroup: %w", err)
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.cgroupFor = pod
	if w.alloc.podUnactuated() {
		w.alloc.ActuatedPod = w.alloc.Pod.DeepCopy()
		w.m.checkpointAllocation(pod, w.alloc)
	}
	return nil
}

// checkMemoryDecrease refuses a memory limit set at or below a container's current
// usage, or a pod-level one (podLimit, when podDecrease) at or below the pod's (the sum
// of its running containers' in sandbox sb), with the kubelet's messages.
func (w *worker) checkMemoryDecrease(ctx context.Context, update []*corev1.Container, rp *relist.Pod, sb *relist.Sandbox, actuated map[string]corev1.ResourceRequirements, podDecrease bool, podLimit int64) error {
	var errs []error
	if podDecrease {
		var usage uint64
		for _, cur := range rp.Containers {
			if !cur.Running() || sb == nil || cur.SandboxID != sb.ID {
				continue
			}
			st, err := w.m.o.Runtime.ContainerStats(ctx, &runtimeapi.ContainerStatsRequest{ContainerId: cur.ID})
			if err != nil || st.GetStats().GetMemory().GetUsageBytes() == nil {
				return fmt.Errorf("unable to read memory usage for pod %q", rp.Namespace+"/"+rp.Name)
			}
			usage += st.GetStats().GetMemory().GetUsageBytes().GetValue()
		}
		if usage >= uint64(podLimit) {
			errs = append(errs, fmt.Errorf("attempting to set pod memory limit (%d) below current usage (%d)", podLimit, usage))
		}
	}
	for _, c := range update {
		want := c.Resources.Limits.Memory().Value()
		had := memoryLimit(actuated[c.Name])
		if want == 0 || had != 0 && want >= had {
			continue
		}
		cur := rp.Latest(c.Name)
		st, err := w.m.o.Runtime.ContainerStats(ctx, &runtimeapi.ContainerStatsRequest{ContainerId: cur.ID})
		if err != nil || st.GetStats().GetMemory().GetUsageBytes() == nil {
			errs = append(errs, fmt.Errorf("missing container %q memory usage", c.Name))
			continue
		}
		if usage := st.GetStats().GetMemory().GetUsageBytes().GetValue(); usage >= uint64(want) {
			errs = append(errs, fmt.Errorf("attempting to set container %q memory limit (%d) below current usage (%d)", c.Name, want, usage))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("cannot decrease memory limits: %w", errors.Join(errs...))
	}
	return nil
}

// resizeConditions are the pod's PodResizePending and PodResizeInProgress conditions.
func (w *worker) resizeConditions() []corev1.PodCondition {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []corev1.PodCondition
	if p := w.resize.pending; p != nil {
		out = append(out, *p)
	}
	if w.resize.inProgress {
		c := corev1.PodCondition{Type: corev1.PodResizeInProgress, Status: corev1.ConditionTrue}
		if w.resize.err != "" {
			c.Reason, c.Message = corev1.PodReasonError, w.resize.err
		}
		out = append(out, c)
	}
	return out
}

// containerResources are c's allocated requests (allocatedResources) and, for a running
// instance, the resources it runs with (resources), as the container's status shows them.
func (w *worker) containerResources(c *corev1.Container, running bool) (corev1.ResourceList, *corev1.ResourceRequirements) {
	w.mu.Lock()
	defer w.mu.Unlock()
	alloc, ok := w.alloc.Containers[c.Name]
	if !ok {
		alloc = c.Resources
	}
	var requests corev1.ResourceList
	if len(alloc.Requests) > 0 {
		requests = alloc.Requests.DeepCopy()
	}
	if !running {
		return requests, nil
	}
	act, ok := w.alloc.Actuated[c.Name]
	if !ok {
		act = alloc
	}
	r := act.DeepCopy()
	return requests, r
}

// podResources are the pod's allocated requests (status.allocatedResources) and the CPU
// and memory its cgroup and containers were given (status.resources), as the v1.36
// kubelet reports them for every pod (InPlacePodLevelResourcesVerticalScaling): its
// pod-level resources where it sets them, else its containers' (requests summed, the
// larger of an init container's; a limit only where every app container has one, as
// the pod's cgroup has none otherwise).
func (w *worker) podResources(pod *corev1.Pod) (corev1.ResourceList, *corev1.ResourceRequirements) {
	w.mu.Lock()
	actuated := w.alloc.apply(pod, w.alloc.differs(pod)).DeepCopy()
	for _, cs := range [][]corev1.Container{actuated.Spec.InitContainers, actuated.Spec.Containers} {
		for i := range cs {
			if r, ok := w.alloc.Actuated[cs[i].Name]; ok {
				cs[i].Resources = *r.DeepCopy()
			}
		}
	}
	if actuated.Spec.Resources != nil && w.alloc.ActuatedPod != nil {
		actuated.Spec.Resources = w.alloc.ActuatedPod.DeepCopy()
	}
	w.mu.Unlock()

	allocated := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	out := &corev1.ResourceRequirements{Requests: corev1.ResourceList{}, Limits: corev1.ResourceList{}}
	requests := resourcehelper.PodRequests(actuated, resourcehelper.PodResourcesOptions{})
	limits := resourcehelper.PodLimits(actuated, resourcehelper.PodResourcesOptions{})
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if q, ok := requests[name]; ok && !q.IsZero() {
			out.Requests[name] = q
		}
		bounded := actuated.Spec.Resources != nil && !actuated.Spec.Resources.Limits.Name(name, resource.DecimalSI).IsZero()
		if !bounded {
			bounded = len(actuated.Spec.Containers) > 0
			for _, c := range actuated.Spec.Containers {
				bounded = bounded && !c.Resources.Limits.Name(name, resource.DecimalSI).IsZero()
			}
		}
		if q, ok := limits[name]; ok && bounded && !q.IsZero() {
			out.Limits[name] = q
		}
	}
	if len(allocated) == 0 {
		allocated = nil
	}
	if len(out.Requests) == 0 {
		out.Requests = nil
	}
	if len(out.Limits) == 0 {
		out.Limits = nil
	}
	if out.Requests == nil && out.Limits == nil {
		out = nil
	}
	return allocated, out
}
