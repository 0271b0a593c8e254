package harnesstest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestPodsyncResizeInPlace: `kubectl patch --subresource resize` against the v1.36 API
// server, end to end. A Burstable pod's CPU and memory limits go up, then its memory
// limit down: the container's own cgroup files show each, its status shows the allocated
// and actual resources, it is not restarted (NotRequired), and no resize condition is
// left. A Guaranteed pod whose memory resizePolicy is RestartContainer is restarted with
// its new limit. A resize past the node's allocatable waits, Deferred with the kubelet's
// message, and holds no more than was allocated: a new pod is admitted next to it.
// Pod-level resources and a completed init container are resized too.
func TestPodsyncResizeInPlace(t *testing.T) {
	t.Parallel()
	waitNodeReady(t, 90*time.Second)
	c := admin(t)
	ctx := context.Background()
	resources, done := resizeResources, resizeDone
	resize := func(name, patch string) { t.Helper(); resizePod(t, name, patch) }
	limits := func(name string) string { t.Helper(); return cgroupLimits(t, name) }

	// Burstable, NotRequired (the default): in place.
	p := busyboxPod("resize", "while true; do sleep 1; done")
	p.Spec.Containers[0].Resources = resources("100m", "200m", "32Mi", "64Mi")
	createPod(t, p)
	apiPodRunningReady(t, "resize", time.Minute)
	if got := limits("resize"); !strings.HasPrefix(got, fmt.Sprint(64<<20)) || !strings.Contains(got, "20000") {
		t.Fatalf("limits before the resize: %q, want 64Mi and a 20000 quota", got)
	}
	resize("resize", `{"spec":{"containers":[{"name":"main","resources":{"limits":{"cpu":"300m","memory":"96Mi"}}}]}}`)
	got := waitAPIPod(t, time.Minute, "resize", "resized up", done("96Mi"))
	if l := limits("resize"); !strings.HasPrefix(l, fmt.Sprint(96<<20)) || !strings.Contains(l, "30000") {
		t.Errorf("the container's limits after the resize up: %q, want 96Mi and a 30000 quota", l)
	}
	cs := got.Status.ContainerStatuses[0]
	criResources(t, strings.TrimPrefix(cs.ContainerID, "containerd://"), 96<<20, 30000)
	if cs.RestartCount != 0 || cs.Resources.Limits.Cpu().String() != "300m" || cs.AllocatedResources.Memory().String() != "32Mi" {
		t.Errorf("after the resize up: restarts %d, resources %v, allocated %v", cs.RestartCount, cs.Resources, cs.AllocatedResources)
	}
	resize("resize", `{"spec":{"containers":[{"name":"main","resources":{"limits":{"memory":"48Mi"}}}]}}`)
	got = waitAPIPod(t, time.Minute, "resize", "resized down", done("48Mi"))
	if l := limits("resize"); !strings.HasPrefix(l, fmt.Sprint(48<<20)) {
		t.Errorf("the container's memory limit after the resize down: %q, want 48Mi", l)
	}
	if n := got.Status.ContainerStatuses[0].RestartCount; n != 0 {
		t.Errorf("restarted %d times by in-place resizes", n)
	}
	evs, err := c.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=resize"})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, e := range evs.Items {
		seen[e.Reason] += int(max(e.Count, 1))
	}
	if seen["ResizeStarted"] < 2 || seen["ResizeCompleted"] < 2 {
		t.Errorf("events %v, want ResizeStarted and ResizeCompleted for each resize", seen)
	}

	// A resize to all of the node's allocatable CPU, with another pod's request on the
	// node: the API server lets it through (it fits the node), the node defers it, with the
	// kubelet's message; the container keeps its resources. Asked back, the condition goes.
	n, err := c.CoreV1().Nodes().Get(ctx, podsyncNode, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hog := busyboxPod("resize-neighbour", "while true; do sleep 1; done")
	hog.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}}
	createPod(t, hog)
	apiPodRunningReady(t, "resize-neighbour", time.Minute)
	all := n.Status.Allocatable.Cpu().String()
	resize("resize", fmt.Sprintf(`{"spec":{"containers":[{"name":"main","resources":{"requests":{"cpu":%q},"limits":{"cpu":%q}}}]}}`, all, all))
	waitAPIPod(t, time.Minute, "resize", "Deferred", func(p *corev1.Pod) bool {
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodResizePending {
				return cond.Reason == corev1.PodReasonDeferred && strings.HasPrefix(cond.Message, fmt.Sprintf("Node didn't have enough resource: cpu, requested: %d, used: ", n.Status.Allocatable.Cpu().MilliValue()))
			}
		}
		return false
	})
	if l := limits("resize"); !strings.Contains(l, "30000") {
		t.Errorf("the deferred resize changed the container's CPU quota: %q", l)
	}
	// The node admits new pods against what it allocated, not against the deferred ask
	// (the scheduler counts the ask, so this pod is bound by hand).
	bound := busyboxPod("resize-bound", "while true; do sleep 1; done")
	bound.Spec.NodeName = podsyncNode
	bound.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}}
	createPod(t, bound)
	apiPodRunningReady(t, "resize-bound", time.Minute)
	resize("resize", `{"spec":{"containers":[{"name":"main","resources":{"requests":{"cpu":"100m"},"limits":{"cpu":"300m"}}}]}}`)
	waitAPIPod(t, time.Minute, "resize", "the resize asked back, no condition", done("48Mi"))

	// Pod-level resources (beta and on in v1.36; the Node declares the feature): the pod's
	// cgroup and its container, which has no limit of its own, get the new memory limit.
	pl := busyboxPod("resize-pod-level", "while true; do sleep 1; done")
	plr := resources("100m", "200m", "32Mi", "64Mi")
	pl.Spec.Resources = &plr
	createPod(t, pl)
	apiPodRunningReady(t, "resize-pod-level", time.Minute)
	resize("resize-pod-level", `{"spec":{"resources":{"limits":{"memory":"96Mi"}}}}`)
	got = waitAPIPod(t, time.Minute, "resize-pod-level", "pod-level limit resized", func(p *corev1.Pod) bool {
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodResizePending || cond.Type == corev1.PodResizeInProgress {
				return false
			}
		}
		return p.Status.ObservedGeneration == p.Generation && p.Status.Resources != nil && p.Status.Resources.Limits.Memory().String() == "96Mi"
	})
	if l := limits("resize-pod-level"); !strings.HasPrefix(l, fmt.Sprint(96<<20)) {
		t.Errorf("the container's memory limit after the pod-level resize: %q, want 96Mi", l)
	}
	if n := got.Status.ContainerStatuses[0].RestartCount; n != 0 {
		t.Errorf("the pod-level resize restarted the container %d times", n)
	}

	// A non-sidecar init container that has completed (beta and on in v1.36): allocated,
	// nothing to update.
	ic := busyboxPod("resize-init", "while true; do sleep 1; done")
	ic.Spec.InitContainers = []corev1.Container{*ic.Spec.Containers[0].DeepCopy()}
	ic.Spec.InitContainers[0].Name, ic.Spec.InitContainers[0].Command = "init", []string{"true"}
	ic.Spec.InitContainers[0].Resources = resources("100m", "100m", "32Mi", "32Mi")
	createPod(t, ic)
	apiPodRunningReady(t, "resize-init", time.Minute)
	resize("resize-init", `{"spec":{"initContainers":[{"name":"init","resources":{"requests":{"memory":"48Mi"},"limits":{"memory":"48Mi"}}}]}}`)
	waitAPIPod(t, time.Minute, "resize-init", "init container's allocation resized", func(p *corev1.Pod) bool {
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodResizePending || cond.Type == corev1.PodResizeInProgress {
				return false
			}
		}
		return p.Status.ObservedGeneration == p.Generation && len(p.Status.InitContainerStatuses) == 1 &&
			p.Status.InitContainerStatuses[0].AllocatedResources.Memory().String() == "48Mi"
	})

	// Guaranteed, memory RestartContainer: restarted with the new limit.
	g := busyboxPod("resize-restart", "while true; do sleep 1; done")
	g.Spec.Containers[0].Resources = resources("100m", "100m", "64Mi", "64Mi")
	g.Spec.Containers[0].ResizePolicy = []corev1.ContainerResizePolicy{{ResourceName: corev1.ResourceMemory, RestartPolicy: corev1.RestartContainer}}
	createPod(t, g)
	apiPodRunningReady(t, "resize-restart", time.Minute)
	resize("resize-restart", `{"spec":{"containers":[{"name":"main","resources":{"requests":{"memory":"80Mi"},"limits":{"memory":"80Mi"}}}]}}`)
	waitAPIPod(t, time.Minute, "resize-restart", "restarted with 80Mi", func(p *corev1.Pod) bool {
		return done("80Mi")(p) && p.Status.ContainerStatuses[0].RestartCount == 1 && p.Status.ContainerStatuses[0].State.Running != nil
	})
	apiPodRunningReady(t, "resize-restart", time.Minute)
	if l := limits("resize-restart"); !strings.HasPrefix(l, fmt.Sprint(80<<20)) {
		t.Errorf("the restarted container's memory limit: %q, want 80Mi", l)
	}
}

// criResources checks the resources the runtime reports for a container (what crictl
// inspect shows): its memory limit and CPU quota. containerd 1.6 reports none; later
// versions must.
func criResources(t *testing.T, id string, memory, quota int64) {
	t.Helper()
	ctx := context.Background()
	rt := criClient(t)
	v, err := rt.Runtime.Version(ctx, &runtimeapi.VersionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	st, err := rt.Runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
	if err != nil {
		t.Fatal(err)
	}
	l := st.GetStatus().GetResources().GetLinux()
	if l == nil {
		if !strings.HasPrefix(strings.TrimPrefix(v.RuntimeVersion, "v"), "1.6.") {
			t.Errorf("%s %s reports no resources for container %s", v.RuntimeName, v.RuntimeVersion, id)
		}
		return
	}
	if l.MemoryLimitInBytes != memory || l.CpuQuota != quota {
		t.Errorf("the runtime's resources of container %s: memory limit %d, CPU quota %d; want %d, %d", id, l.MemoryLimitInBytes, l.CpuQuota, memory, quota)
	}
}

func resizeResources(cpuReq, cpuLim, memReq, memLim string) corev1.ResourceRequirements {
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpuReq), corev1.ResourceMemory: resource.MustParse(memReq)},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpuLim), corev1.ResourceMemory: resource.MustParse(memLim)},
	}
}

// resizePod patches pod name's resize subresource.
func resizePod(t *testing.T, name, patch string) {
	t.Helper()
	if _, err := admin(t).CoreV1().Pods("default").Patch(context.Background(), name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "resize"); err != nil {
		t.Fatalf("resize %s: %v", name, err)
	}
}

// cgroupLimits are a pod's (first) container's own limits, from its cgroup files (v2,
// else v1): memory, then CPU quota.
func cgroupLimits(t *testing.T, name string) string {
	t.Helper()
	return strings.Join(strings.Fields(mustInPod(t, name, "sh", "-c",
		`if [ -f /sys/fs/cgroup/memory.max ]; then cat /sys/fs/cgroup/memory.max /sys/fs/cgroup/cpu.max; else cat /sys/fs/cgroup/memory/memory.limit_in_bytes /sys/fs/cgroup/cpu/cpu.cfs_quota_us; fi`)), " ")
}

// resizeDone: the pod's one container has memLimit and no resize condition is left.
func resizeDone(memLimit string) func(*corev1.Pod) bool {
	return func(p *corev1.Pod) bool {
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodResizePending || cond.Type == corev1.PodResizeInProgress {
				return false
			}
		}
		if len(p.Status.ContainerStatuses) != 1 {
			return false
		}
		r := p.Status.ContainerStatuses[0].Resources
		return p.Status.ObservedGeneration == p.Generation && r != nil && r.Limits.Memory().String() == memLimit
	}
}

// TestPodsyncResizeFinishedAfterASIGKILL: a memory limit below the container's usage waits,
// in progress with the kubelet's error; podsync SIGKILLed meanwhile finds the resize in its
// checkpoint and finishes it once the usage is below the new limit. Serial: SIGKILLs
// unitlet-podsync.
func TestPodsyncResizeFinishedAfterASIGKILL(t *testing.T) {
	waitNodeReady(t, 90*time.Second)
	p := busyboxPod("resize-sigkill", "while true; do sleep 1; done")
	p.Spec.Containers[0].Resources = resizeResources("100m", "200m", "32Mi", "64Mi")
	createPod(t, p)
	apiPodRunningReady(t, "resize-sigkill", time.Minute)
	mustInPod(t, "resize-sigkill", "dd", "if=/dev/zero", "of=/dev/shm/fill", "bs=1M", "count=40")
	resizePod(t, "resize-sigkill", `{"spec":{"containers":[{"name":"main","resources":{"limits":{"memory":"40Mi"}}}]}}`)
	waitAPIPod(t, time.Minute, "resize-sigkill", "the decrease below usage in progress, Error", func(p *corev1.Pod) bool {
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodResizeInProgress {
				return cond.Reason == corev1.PodReasonError && strings.Contains(cond.Message, "below current usage")
			}
		}
		return false
	})
	sigkill(t, "podsync")
	restartServices(t)
	// The node API finds the pod again once the new podsync has it.
	stack.WaitFor(t, time.Minute, "the fill removed", func(context.Context) (bool, string) {
		out, err := inPod(t, "resize-sigkill", "rm", "-f", "/dev/shm/fill")
		return err == nil, out
	})
	waitAPIPod(t, 2*time.Minute, "resize-sigkill", "the decrease finished by the restarted podsync", resizeDone("40Mi"))
	if l := cgroupLimits(t, "resize-sigkill"); !strings.HasPrefix(l, fmt.Sprint(40<<20)) {
		t.Errorf("the container's memory limit after the restarted podsync's resize: %q, want 40Mi", l)
	}
}
