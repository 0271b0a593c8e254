package podworker

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// resizablePod is a running-to-be pod whose container "app" has cpu and memory requests
// and limits, its memory resize policy as given.
func resizablePod(memPolicy corev1.ResourceResizeRestartPolicy) *corev1.Pod {
	pod := syncPod(corev1.RestartPolicyAlways, nil, "app")
	pod.Generation = 1
	pod.Spec.Containers[0].Resources = resources("100m", "200m", "64Mi", "64Mi")
	pod.Spec.Containers[0].ResizePolicy = []corev1.ContainerResizePolicy{{ResourceName: corev1.ResourceMemory, RestartPolicy: memPolicy}}
	return pod
}

func resources(cpuReq, cpuLim, memReq, memLim string) corev1.ResourceRequirements {
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpuReq), corev1.ResourceMemory: resource.MustParse(memReq)},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpuLim), corev1.ResourceMemory: resource.MustParse(memLim)},
	}
}

func resized(pod *corev1.Pod, r corev1.ResourceRequirements) *corev1.Pod {
	out := pod.DeepCopy()
	out.Generation++
	out.ResourceVersion += "1"
	out.Spec.Containers[0].Resources = r
	return out
}

func hasCondition(o Observed, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range o.Status.Conditions {
		if o.Status.Conditions[i].Type == t {
			return &o.Status.Conditions[i]
		}
	}
	return nil
}

// TestResizeInPlaceUpdatesTheRunningContainer: a resize under NotRequired updates the
// running container's resources (no restart), and its status shows the new allocated
// and actual resources once done, with the kubelet's events and no resize condition left.
func TestResizeInPlaceUpdatesTheRunningContainer(t *testing.T) {
	cri := newMemCRI("busybox:1")
	h := newHarness(t, cri)
	pod := resizablePod(corev1.NotRequired)
	h.m.Update(pod, "api")
	o := h.ev.waitFor(t, "running", func(o Observed) bool { return isRunning(o, "app") })
	if r := statusOf(o, "app").Resources; r == nil || r.Limits.Memory().String() != "64Mi" {
		t.Fatalf("running container's resources %+v, want the 64Mi it was created with", r)
	}

	h.m.Update(resized(pod, resources("150m", "300m", "64Mi", "128Mi")), "api")
	o = h.ev.waitFor(t, "resized", func(o Observed) bool {
		r := statusOf(o, "app").Resources
		return r != nil && r.Limits.Memory().String() == "128Mi" && hasCondition(o, corev1.PodResizeInProgress) == nil
	})
	cs := statusOf(o, "app")
	if cs.RestartCount != 0 || cs.AllocatedResources.Cpu().String() != "150m" {
		t.Errorf("restarts %d, allocated %v: want no restart, 150m allocated", cs.RestartCount, cs.AllocatedResources)
	}
	updates := cri.callsOf("UpdateContainerResources")
	if want := []string{"app memory=134217728 quota=30000 shares=153"}; !slices.Equal(updates, want) {
		t.Errorf("updates %v, want %v", updates, want)
	}
	for _, e := range []string{"ResizeStarted: Pod resize started: {", "ResizeCompleted: Pod resize completed: {"} {
		if !h.ev.hasEvent(e) {
			t.Errorf("no event %q", e)
		}
	}
}

// TestResizeRestartContainerPolicy: a memory resize under RestartContainer restarts the
// container with the new limit.
func TestResizeRestartContainerPolicy(t *testing.T) {
	cri := newMemCRI("busybox:1")
	h := newHarness(t, cri)
	pod := resizablePod(corev1.RestartContainer)
	h.m.Update(pod, "api")
	h.ev.waitFor(t, "running", func(o Observed) bool { return isRunning(o, "app") })
	h.m.Update(resized(pod, resources("100m", "200m", "64Mi", "96Mi")), "api")
	o := h.ev.waitFor(t, "restarted with the new limit", func(o Observed) bool {
		cs := statusOf(o, "app")
		return cs.RestartCount == 1 && cs.State.Running != nil && cs.Resources != nil && cs.Resources.Limits.Memory().String() == "96Mi"
	})
	if len(cri.callsOf("UpdateContainerResources")) != 0 || !h.ev.hasEvent("Killing: Container app resize requires restart") {
		t.Errorf("updates %v; events: want the restart's Killing event and no update", cri.callsOf("UpdateContainerResources"))
	}
	if c := hasCondition(o, corev1.PodResizeInProgress); c != nil {
		t.Errorf("condition %+v left after the restart", c)
	}
}

// TestResizeDeferredWhenTheNodeIsFull: a resize past the node's allocatable waits,
// Deferred with the kubelet's message, and the container keeps its resources.
func TestResizeDeferredWhenTheNodeIsFull(t *testing.T) {
	cri := newMemCRI("busybox:1")
	h := newHarnessOpts(t, cri, func(o *Options) {
		o.Allocatable = func() corev1.ResourceList {
			return corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi")}
		}
	})
	pod := resizablePod(corev1.NotRequired)
	h.m.Update(pod, "api")
	h.ev.waitFor(t, "running", func(o Observed) bool { return isRunning(o, "app") })
	h.m.Update(resized(pod, resources("2", "2", "64Mi", "64Mi")), "api")
	o := h.ev.waitFor(t, "deferred", func(o Observed) bool { return hasCondition(o, corev1.PodResizePending) != nil })
	c := hasCondition(o, corev1.PodResizePending)
	if c.Reason != corev1.PodReasonDeferred || c.Message != "Node didn't have enough resource: cpu, requested: 2000, used: 0, capacity: 1000" {
		t.Errorf("condition %s %q", c.Reason, c.Message)
	}
	allocated := statusOf(o, "app").AllocatedResources
	if got := allocated.Cpu().String(); got != "100m" || len(cri.callsOf("UpdateContainerResources")) != 0 {
		t.Errorf("allocated cpu %s, updates %v: want 100m kept, none", got, cri.callsOf("UpdateContainerResources"))
	}
	if !h.ev.hasEvent("ResizeDeferred: Pod resize Deferred: {") {
		t.Errorf("no ResizeDeferred event")
	}
	// New pods are admitted against the allocation, not the Deferred ask (CI of stop 52:
	// a pod was refused OutOfcpu for another pod's deferred resize).
	want := resized(pod, resources("2", "2", "64Mi", "64Mi"))
	if got := h.m.Allocated(want).Spec.Containers[0].Resources.Requests.Cpu().String(); got != "100m" {
		t.Errorf("Allocated: cpu request %s, want the allocated 100m", got)
	}
}

// TestResizeNeverSetsAMemoryLimitBelowUsage: a memory limit lowered to or below the
// container's usage is not set; the resize stays in progress with the kubelet's error.
func TestResizeNeverSetsAMemoryLimitBelowUsage(t *testing.T) {
	cri := newMemCRI("busybox:1")
	cri.memoryUsage = 50 << 20
	h := newHarness(t, cri)
	pod := resizablePod(corev1.NotRequired)
	h.m.Update(pod, "api")
	h.ev.waitFor(t, "running", func(o Observed) bool { return isRunning(o, "app") })
	h.m.Update(resized(pod, resources("100m", "200m", "32Mi", "32Mi")), "api")
	o := h.ev.waitFor(t, "in progress with an error", func(o Observed) bool {
		c := hasCondition(o, corev1.PodResizeInProgress)
		return c != nil && c.Reason == corev1.PodReasonError
	})
	c := hasCondition(o, corev1.PodResizeInProgress)
	if !strings.Contains(c.Message, `attempting to set container "app" memory limit (33554432) below current usage (52428800)`) {
		t.Errorf("message %q", c.Message)
	}
	if len(cri.callsOf("UpdateContainerResources")) != 0 {
		t.Errorf("updates %v, want none", cri.callsOf("UpdateContainerResources"))
	}
}

// TestResizeResumesAfterARestart: a podsync that allocated a resize and was stopped
// before it reached the container (here: the runtime refused the update) leaves it in
// the allocation checkpoint; the next podsync, given the pod as the API has it, finishes
// it on the running container without a restart.
func TestResizeResumesAfterARestart(t *testing.T) {
	cri := newMemCRI("busybox:1")
	dir := t.TempDir()
	h := newHarnessOpts(t, cri, func(o *Options) { o.StateDir = dir })
	pod := resizablePod(corev1.NotRequired)
	h.m.Update(pod, "api")
	h.ev.waitFor(t, "running", func(o Observed) bool { return isRunning(o, "app") })
	cri.mu.Lock()
	cri.refuseUpdates = true
	cri.mu.Unlock()
	want := resized(pod, resources("100m", "200m", "64Mi", "128Mi"))
	h.m.Update(want, "api")
	h.ev.waitFor(t, "in progress with an error", func(o Observed) bool {
		c := hasCondition(o, corev1.PodResizeInProgress)
		return c != nil && c.Reason == corev1.PodReasonError
	})
	h.stop()

	cri.mu.Lock()
	cri.refuseUpdates = false
	cri.mu.Unlock()
	h2 := newHarnessOpts(t, cri, func(o *Options) { o.StateDir = dir })
	h2.m.Update(want, "api")
	o := h2.ev.waitFor(t, "resized by the next podsync", func(o Observed) bool {
		r := statusOf(o, "app").Resources
		return r != nil && r.Limits.Memory().String() == "128Mi" && hasCondition(o, corev1.PodResizeInProgress) == nil
	})
	if n := statusOf(o, "app").RestartCount; n != 0 || len(cri.callsOf("UpdateContainerResources")) != 1 {
		t.Errorf("restarts %d, updates %v: want the one update, no restart", n, cri.callsOf("UpdateContainerResources"))
	}
}

// memCgroups records the pods whose cgroup is set, as a Cgroups.
type memCgroups struct {
	mu   sync.Mutex
	sets []string // the pod-level memory limit each EnsurePod set
}

func (c *memCgroups) EnsurePod(_ context.Context, pod *corev1.Pod) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sets = append(c.sets, fmt.Sprint(podMemoryLimit(pod)))
	return nil
}

func (c *memCgroups) last() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.sets) == 0 {
		return ""
	}
	return c.sets[len(c.sets)-1]
}

// podLevelPod is a pod with pod-level resources and a container "app" without its own.
func podLevelPod() *corev1.Pod {
	pod := syncPod(corev1.RestartPolicyAlways, nil, "app")
	pod.Generation = 1
	r := resources("100m", "200m", "64Mi", "128Mi")
	pod.Spec.Resources = &r
	return pod
}

func podLevelResized(pod *corev1.Pod, memLimit string) *corev1.Pod {
	out := pod.DeepCopy()
	out.Generation++
	out.Spec.Resources.Limits[corev1.ResourceMemory] = resource.MustParse(memLimit)
	return out
}

// TestResizePodLevelResources: a resize of pod-level resources (beta and on in v1.36)
// sets the pod's cgroup and updates the containers that take their limits from it; the
// pod's status.resources shows it. A pod-level memory limit below the containers' usage
// is not set, with the kubelet's error.
func TestResizePodLevelResources(t *testing.T) {
	cri := newMemCRI("busybox:1")
	cg := &memCgroups{}
	h := newHarnessOpts(t, cri, func(o *Options) { o.Cgroups = cg })
	pod := podLevelPod()
	h.m.Update(pod, "api")
	o := h.ev.waitFor(t, "running", func(o Observed) bool { return isRunning(o, "app") })
	if r := o.Status.Resources; r == nil || r.Limits.Memory().String() != "128Mi" || r.Requests.Cpu().String() != "100m" {
		t.Fatalf("status.resources %+v, want the pod-level 100m and 128Mi", r)
	}
	if a := o.Status.AllocatedResources[corev1.ResourceMemory]; a.String() != "64Mi" {
		t.Errorf("status.allocatedResources %v, want the pod-level 64Mi request", a)
	}

	up := podLevelResized(pod, "256Mi")
	h.m.Update(up, "api")
	o = h.ev.waitFor(t, "resized up", func(o Observed) bool {
		return o.Status.Resources != nil && o.Status.Resources.Limits.Memory().String() == "256Mi" && hasCondition(o, corev1.PodResizeInProgress) == nil
	})
	if got := cg.last(); got != fmt.Sprint(256<<20) {
		t.Errorf("the pod cgroup's last memory limit %s, want 256Mi", got)
	}
	if got := cri.callsOf("UpdateContainerResources"); len(got) != 1 || !strings.Contains(got[0], fmt.Sprintf("memory=%d", 256<<20)) {
		t.Errorf("updates %v, want app (no limit of its own) given the pod's 256Mi", got)
	}
	if !h.ev.hasEvent("ResizeCompleted") || statusOf(o, "app").RestartCount != 0 {
		t.Errorf("no ResizeCompleted event, or app restarted")
	}

	cri.mu.Lock()
	cri.memoryUsage = 100 << 20
	cri.mu.Unlock()
	h.m.Update(podLevelResized(up, "96Mi"), "api")
	o = h.ev.waitFor(t, "the decrease refused", func(o Observed) bool {
		c := hasCondition(o, corev1.PodResizeInProgress)
		return c != nil && c.Reason == corev1.PodReasonError
	})
	want := fmt.Sprintf("cannot decrease memory limits: attempting to set pod memory limit (%d) below current usage (%d)", 96<<20, 100<<20)
	if c := hasCondition(o, corev1.PodResizeInProgress); c.Message != want {
		t.Errorf("condition message %q, want %q", c.Message, want)
	}
	if got := cg.last(); got != fmt.Sprint(256<<20) || o.Status.Resources.Limits.Memory().String() != "256Mi" {
		t.Errorf("the pod cgroup's memory limit %s, status %v: want 256Mi kept", got, o.Status.Resources.Limits)
	}
}

// TestResizeACompletedInitContainer: a non-sidecar init container's resize (beta and on
// in v1.36) is allocated; it runs no more, so nothing is updated and the resize completes.
func TestResizeACompletedInitContainer(t *testing.T) {
	cri := newMemCRI("busybox:1")
	h := newHarness(t, cri)
	pod := syncPod(corev1.RestartPolicyAlways, []string{"init"}, "app")
	pod.Generation = 1
	pod.Spec.InitContainers[0].Resources = resources("100m", "200m", "64Mi", "64Mi")
	h.m.Update(pod, "api")
	h.initDoneAppRunning(t, pod)
	next := pod.DeepCopy()
	next.Generation++
	next.Spec.InitContainers[0].Resources = resources("100m", "200m", "96Mi", "128Mi")
	h.m.Update(next, "api")
	h.ev.waitFor(t, "init container resized", func(o Observed) bool {
		allocated := statusOf(o, "init").AllocatedResources[corev1.ResourceMemory]
		return o.Status.ObservedGeneration == 2 && allocated.String() == "96Mi" &&
			hasCondition(o, corev1.PodResizeInProgress) == nil && hasCondition(o, corev1.PodResizePending) == nil
	})
	if got := cri.callsOf("UpdateContainerResources"); len(got) != 0 || !h.ev.hasEvent("ResizeCompleted") {
		t.Errorf("updates %v, completed %v: want none, completed", got, h.ev.hasEvent("ResizeCompleted"))
	}
}

// TestResizeOfASwappingContainerIsInfeasible: under LimitedSwap, a change of the memory
// request of a container that may swap is Infeasible with the kubelet's message, unless its
// memory resizePolicy restarts it.
func TestResizeOfASwappingContainerIsInfeasible(t *testing.T) {
	for _, policy := range []corev1.ResourceResizeRestartPolicy{corev1.NotRequired, corev1.RestartContainer} {
		t.Run(string(policy), func(t *testing.T) {
			cri := newMemCRI("busybox:1")
			h := newHarnessOpts(t, cri, func(o *Options) {
				o.CRI.LimitedSwap, o.CRI.SwapController, o.CRI.MemoryCapacity, o.CRI.SwapCapacity = true, true, 4<<30, 1<<30
			})
			pod := resizablePod(policy)
			pod.Spec.Containers[0].Resources = resources("100m", "200m", "32Mi", "64Mi")
			h.m.Update(pod, "api")
			h.ev.waitFor(t, "running", func(o Observed) bool { return isRunning(o, "app") })
			h.m.Update(resized(pod, resources("100m", "200m", "48Mi", "64Mi")), "api")
			o := h.ev.waitFor(t, "the resize decided", func(o Observed) bool {
				allocated := statusOf(o, "app").AllocatedResources[corev1.ResourceMemory]
				return o.Status.ObservedGeneration == 2 && (hasCondition(o, corev1.PodResizePending) != nil || allocated.String() == "48Mi")
			})
			c := hasCondition(o, corev1.PodResizePending)
			switch policy {
			case corev1.NotRequired:
				if c == nil || c.Reason != corev1.PodReasonInfeasible || c.Message != "In-place resize of containers with swap is not supported." {
					t.Errorf("condition %+v, want Infeasible with the kubelet's message", c)
				}
			case corev1.RestartContainer:
				if c != nil {
					t.Errorf("condition %+v: a container whose memory resize restarts it may change its request", c)
				}
			}
		})
	}
}
