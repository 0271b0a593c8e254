package vmtest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/unitlet/unitlet/integration/harness"
)

// The vm node's settings for node resources (vm-node.yaml).
const (
	vmPodPidsLimit       = 256
	vmSystemReservedMem  = 256 << 20
	vmSystemReservedCPU  = 200 // milli-CPUs
	vmSystemReservedPIDs = 1000
)

// cpuWeight is cgroup v2's cpu.weight for milli-CPUs as the kubelet converts them: CPU
// shares (1024 per CPU, at least 2), then shares to weight.
func cpuWeight(milli int64) int64 {
	shares := max(milli*1024/1000, 2)
	return 1 + (shares-2)*9999/262142
}

// guestInt reads a number (or "max", -1) from a file in the guest.
func guestInt(t *testing.T, node, file string) int64 {
	t.Helper()
	s := stack.InNode(t, node, "cat", file)
	if s == "max" {
		return -1
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("%s in the guest: %q: %v", file, s, err)
	}
	return v
}

// podSlice is the pod's slice directory in the guest, by its QoS class.
func podSlice(p *corev1.Pod) string {
	uid := strings.ReplaceAll(string(p.UID), "-", "_")
	switch p.Status.QOSClass {
	case corev1.PodQOSBurstable:
		return "/sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uid + ".slice"
	case corev1.PodQOSBestEffort:
		return "/sys/fs/cgroup/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + uid + ".slice"
	}
	return "/sys/fs/cgroup/kubepods.slice/kubepods-pod" + uid + ".slice"
}

func rl(kv ...string) corev1.ResourceList {
	out := corev1.ResourceList{}
	for i := 0; i+1 < len(kv); i += 2 {
		out[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return out
}

// vmPod is a busybox pod on the vm node running script in each named container.
func vmPod(name string, scripts map[string]string) *corev1.Pod {
	grace := int64(1)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec:       corev1.PodSpec{TerminationGracePeriodSeconds: &grace, AutomountServiceAccountToken: new(bool)},
	}
	for c, script := range scripts {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{
			Name: c, Image: harness.BusyboxImage, ImagePullPolicy: corev1.PullNever, Command: []string{"sh", "-c", script},
		})
	}
	return p
}

// runVMPod creates the pod and waits until it runs; it is deleted when the test ends.
func runVMPod(t *testing.T, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	c := admin(t)
	if _, err := c.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.CoreV1().Pods(p.Namespace).Delete(context.Background(), p.Name, metav1.DeleteOptions{}) })
	var got *corev1.Pod
	stack.WaitFor(t, 3*time.Minute, "pod "+p.Name+" Running", func(ctx context.Context) (bool, string) {
		cur, err := c.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		got = cur
		events, _ := c.CoreV1().Events(p.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + p.Name})
		var msgs []string
		for _, e := range events.Items {
			msgs = append(msgs, e.Reason+": "+e.Message)
		}
		return cur.Status.Phase == corev1.PodRunning, fmt.Sprintf("%s; events %q", cur.Status.Phase, msgs)
	})
	return got
}

// guestMemTotal and guestMaxPIDs are the guest's MemTotal in bytes and its PID limit.
func guestMemTotal(t *testing.T, node string) int64 {
	t.Helper()
	f := strings.Fields(stack.InNode(t, node, "grep", "^MemTotal:", "/proc/meminfo"))
	kb, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return kb * 1024
}

func guestMaxPIDs(t *testing.T, node string) int64 {
	return min(guestInt(t, node, "/proc/sys/kernel/pid_max"), guestInt(t, node, "/proc/sys/kernel/threads-max"))
}

// TestCgroupsOnTheSystemdDriver: on the vm node (cgroup v2, the systemd driver, podsync
// under its shipped unit) the QoS tree is systemd slices: kubepods.slice holds the node's
// allocatable (systemReserved taken off) in memory.max, cpu.weight and pids.max, and each
// QoS class's pod gets its own slice with the pod's limits and podPidsLimit; the containers
// carry the kubelet's OOM score per class; system.slice has the system's reserved CPU weight
// (enforceNodeAllocatable system-reserved-compressible). A deleted pod's slice goes.
func TestCgroupsOnTheSystemdDriver(t *testing.T) {
	node := vmNode(t).Name
	mem, maxPIDs := guestMemTotal(t, node), guestMaxPIDs(t, node)
	cpus, err := strconv.ParseInt(stack.InNode(t, node, "grep", "-c", "^processor", "/proc/cpuinfo"), 10, 64)
	if err != nil {
		t.Fatalf("count the guest's CPUs: %v", err)
	}

	const kp = "/sys/fs/cgroup/kubepods.slice/"
	if got, want := guestInt(t, node, kp+"memory.max"), mem-vmSystemReservedMem; got > want || got < want-4096 {
		t.Errorf("kubepods.slice memory.max = %d, want MemTotal - systemReserved = %d", got, want)
	}
	if got, want := guestInt(t, node, kp+"pids.max"), maxPIDs-vmSystemReservedPIDs; got != want {
		t.Errorf("kubepods.slice pids.max = %d, want %d", got, want)
	}
	if got, want := guestInt(t, node, kp+"cpu.weight"), cpuWeight(cpus*1000-vmSystemReservedCPU); got != want {
		t.Errorf("kubepods.slice cpu.weight = %d, want %d", got, want)
	}
	if got, want := guestInt(t, node, "/sys/fs/cgroup/system.slice/cpu.weight"), cpuWeight(vmSystemReservedCPU); got != want {
		t.Errorf("system.slice cpu.weight = %d, want %d (system-reserved-compressible)", got, want)
	}
	if got := guestInt(t, node, kp+"kubepods-besteffort.slice/cpu.weight"); got != cpuWeight(0) {
		t.Errorf("kubepods-besteffort.slice cpu.weight = %d, want %d", got, cpuWeight(0))
	}

	loop := map[string]string{"c": "exec sleep 100000"}
	g := vmPod("vm-cg-guaranteed", loop)
	g.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: rl("cpu", "200m", "memory", "64Mi"), Limits: rl("cpu", "200m", "memory", "64Mi")}
	b := vmPod("vm-cg-burstable", loop)
	b.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: rl("cpu", "100m", "memory", "32Mi"), Limits: rl("memory", "96Mi")}
	be := vmPod("vm-cg-besteffort", loop)
	var pods []*corev1.Pod
	for _, p := range []*corev1.Pod{g, b, be} {
		pods = append(pods, runVMPod(t, p))
	}
	if got := guestInt(t, node, kp+"kubepods-burstable.slice/cpu.weight"); got < cpuWeight(100) {
		t.Errorf("kubepods-burstable.slice cpu.weight = %d, want at least %d (vm-cg-burstable's 100m)", got, cpuWeight(100))
	}
	for _, tt := range []struct {
		pod         *corev1.Pod
		memory      int64
		cpuMax      string
		weight      int64
		oomScoreAdj int64
	}{
		{pods[0], 64 << 20, "20000 100000", cpuWeight(200), -997},
		{pods[1], 96 << 20, "max 100000", cpuWeight(100), 1000 - 1000*(32<<20)/mem},
		{pods[2], -1, "max 100000", cpuWeight(0), 1000},
	} {
		dir, name := podSlice(tt.pod), tt.pod.Name
		if got := guestInt(t, node, dir+"/memory.max"); got != tt.memory {
			t.Errorf("%s: memory.max = %d, want %d", name, got, tt.memory)
		}
		if got := stack.InNode(t, node, "cat", dir+"/cpu.max"); got != tt.cpuMax {
			t.Errorf("%s: cpu.max = %q, want %q", name, got, tt.cpuMax)
		}
		if got := guestInt(t, node, dir+"/cpu.weight"); got != tt.weight {
			t.Errorf("%s: cpu.weight = %d, want %d", name, got, tt.weight)
		}
		if got := guestInt(t, node, dir+"/pids.max"); got != vmPodPidsLimit {
			t.Errorf("%s: pids.max = %d, want podPidsLimit %d", name, got, vmPodPidsLimit)
		}
		// The container's sleep, in a scope of the pod's slice.
		out := stack.InNode(t, node, "sh", "-c", "for f in "+dir+"/*.scope/cgroup.procs; do for p in $(cat $f); do echo $p $(cat /proc/$p/comm) $(cat /proc/$p/oom_score_adj); done; done")
		apps := 0
		for _, line := range strings.Split(out, "\n") {
			f := strings.Fields(line)
			if len(f) != 3 || f[1] == "pause" {
				continue
			}
			apps++
			if got, _ := strconv.ParseInt(f[2], 10, 64); got != tt.oomScoreAdj {
				t.Errorf("%s: process %s (%s) oom_score_adj = %d, want %d", name, f[0], f[1], got, tt.oomScoreAdj)
			}
		}
		if apps == 0 {
			t.Errorf("%s: no container process in the pod's slice %s:\n%s", name, dir, out)
		}
		t.Logf("%s (%s): memory.max %d, cpu.max %q, cpu.weight %d, pids.max %d, oom_score_adj %d", name, tt.pod.Status.QOSClass, tt.memory, tt.cpuMax, tt.weight, vmPodPidsLimit, tt.oomScoreAdj)
	}

	c := admin(t)
	if err := c.CoreV1().Pods("default").Delete(context.Background(), pods[1].Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	stack.WaitFor(t, 3*time.Minute, "the deleted pod's slice removed", func(context.Context) (bool, string) {
		out, err := stack.Exec(node, []string{"test", "-e", podSlice(pods[1])}).CombinedOutput()
		return err != nil, string(out)
	})
}

// TestPodMemoryLimitOOMKillsInsideThePodCgroup: a pod's pod-level memory limit (48Mi) binds
// its containers together: two containers of 32 MiB each, with no limits of their own, do not fit the
// pod's, so the kernel kills one of their hogs inside the pod's slice (its memory.events
// counts it), while the pod next to it runs on, its container kept from swapping (NoSwap:
// memory.swap.max 0).
func TestPodMemoryLimitOOMKillsInsideThePodCgroup(t *testing.T) {
	node := vmNode(t).Name
	neighbour := runVMPod(t, vmPod("vm-oom-neighbour", map[string]string{"c": "exec sleep 100000"}))
	// Each hog fills a 32 MiB buffer once and then blocks writing it into a pipe nobody
	// reads: 32 MiB held, no CPU. (A dd copying forever held the same, but two of them
	// starved this emulated guest until containerd's calls timed out and the second
	// container never started.)
	hog := "dd if=/dev/zero bs=32M count=1 | sleep 100000"
	p := vmPod("vm-oom-pod", map[string]string{"a": hog, "b": hog})
	p.Spec.Resources = &corev1.ResourceRequirements{Limits: rl("memory", "48Mi")}
	c := admin(t)
	if _, err := c.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.CoreV1().Pods(p.Namespace).Delete(context.Background(), p.Name, metav1.DeleteOptions{}) })
	// The kernel's word, not the runtime's: containerd reports a kill by the pod slice's
	// limit as Error/137 (it watches only the container's own cgroup), and this emulated
	// guest takes a minute or more to start the second container.
	var oomed *corev1.Pod
	stack.WaitFor(t, 3*time.Minute, "vm-oom-pod on the node", func(ctx context.Context) (bool, string) {
		cur, err := c.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		oomed = cur
		return cur.Status.QOSClass != "" && cur.UID != "", string(cur.Status.Phase)
	})
	dir := podSlice(oomed)
	var kills int64
	stack.WaitFor(t, 5*time.Minute, "an OOM kill in vm-oom-pod's slice", func(ctx context.Context) (bool, string) {
		out, err := stack.Exec(node, []string{"cat", dir + "/memory.events", dir + "/memory.current"}).CombinedOutput()
		if err != nil {
			return false, string(out)
		}
		for _, line := range strings.Split(string(out), "\n") {
			if f := strings.Fields(line); len(f) == 2 && f[0] == "oom_kill" {
				kills, _ = strconv.ParseInt(f[1], 10, 64)
			}
		}
		// On a failure, say where the pod's containers were too (memory.current last).
		state := string(out)
		if cur, err := c.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{}); err == nil {
			for _, cs := range cur.Status.ContainerStatuses {
				state += fmt.Sprintf("container %s: restarts %d, state %+v, last %+v\n", cs.Name, cs.RestartCount, cs.State, cs.LastTerminationState)
			}
		}
		return kills >= 1, state
	})
	if got := guestInt(t, node, dir+"/memory.max"); got != 48<<20 {
		t.Errorf("vm-oom-pod: pod slice memory.max = %d, want %d", got, 48<<20)
	}
	now, err := c.CoreV1().Pods("default").Get(context.Background(), neighbour.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cs := now.Status.ContainerStatuses[0]; cs.State.Running == nil || cs.RestartCount != 0 {
		t.Errorf("the neighbour pod was disturbed: %+v", cs)
	}
	// NoSwap (memorySwap.swapBehavior's default) on cgroup v2: the container may not swap,
	// whether the guest has swap or not.
	id := strings.TrimPrefix(now.Status.ContainerStatuses[0].ContainerID, "containerd://")
	if got := stack.InNode(t, node, "cat", podSlice(now)+"/cri-containerd-"+id+".scope/memory.swap.max"); got != "0" {
		t.Errorf("the neighbour's container: memory.swap.max = %q, want 0 (NoSwap)", got)
	}
	t.Logf("vm-oom-pod: %d OOM kills in its slice (memory.max 48Mi); the neighbour runs on", kills)

	// Deleted, its slice goes too (systemd stops it once the containers are gone).
	if err := c.CoreV1().Pods(p.Namespace).Delete(context.Background(), p.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The pod's 30 s grace period, the final status, podsync's cleanup round (10 s) and
	// systemd stopping the slice: on a slow emulated guest this took over a minute in CI.
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := stack.Exec(node, []string{"journalctl", "-u", "unitlet-podsync", "--no-pager", "-o", "short-monotonic", "--grep", string(oomed.UID) + "|cgroup"}).CombinedOutput()
			t.Logf("podsync's log on vm-oom-pod and cgroups:\n%s", out)
		}
	})
	stack.WaitFor(t, 3*time.Minute, "vm-oom-pod's slice removed", func(context.Context) (bool, string) {
		out, err := stack.Exec(node, []string{"test", "-e", dir}).CombinedOutput()
		return err != nil, string(out)
	})
}

// TestPodPidsLimitStopsAForkLoop: a pod that tries to start 400 processes stops at
// podPidsLimit (256): a subshell forks until the kernel refuses (and dies of it, as a
// shell does), the container's main process stays; the pod's slice then holds its limit
// (less the subshell), and a cgroup of the pod counts the refused forks in pids.events (the forking
// task's cgroup on this 6.1 kernel, the limiting one on newer ones).
func TestPodPidsLimitStopsAForkLoop(t *testing.T) {
	node := vmNode(t).Name
	p := runVMPod(t, vmPod("vm-fork-loop", map[string]string{
		"c": "(i=0; while [ $i -lt 400 ]; do sleep 100000 & i=$((i+1)); done) 2>/dev/null; echo spawned; exec sleep 100000",
	}))
	dir := podSlice(p)
	var refused, cur int64
	stack.WaitFor(t, 2*time.Minute, "the pod's slice full and forks refused", func(context.Context) (bool, string) {
		out := stack.InNode(t, node, "sh", "-c", "cat $(find "+dir+" -name pids.events) | awk '$1 == \"max\" {n += $2} END {print n+0}'")
		refused, _ = strconv.ParseInt(out, 10, 64)
		cur = guestInt(t, node, dir+"/pids.current")
		// Full: the subshell refused its fork has exited, so one below the limit.
		return refused > 0 && cur >= vmPodPidsLimit-2, fmt.Sprintf("pids.current %d, refused %d", cur, refused)
	})
	if got := guestInt(t, node, dir+"/pids.max"); got != vmPodPidsLimit {
		t.Errorf("pids.max = %d, want %d", got, vmPodPidsLimit)
	}
	if cur > vmPodPidsLimit {
		t.Errorf("pids.current = %d, over podPidsLimit %d", cur, vmPodPidsLimit)
	}
	// The container was not restarted: only the subshell died of the refusals.
	now, err := admin(t).CoreV1().Pods("default").Get(context.Background(), p.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cs := now.Status.ContainerStatuses[0]; cs.RestartCount != 0 || cs.State.Running == nil {
		t.Errorf("vm-fork-loop's container: %+v, want running with no restart", cs)
	}
	t.Logf("vm-fork-loop: %d processes in the pod (pids.max %d), %d forks refused", cur, vmPodPidsLimit, refused)
	// On cgroup v2 the kernel kills a container's processes together on OOM
	// (singleProcessOOMKill unset), as the kubelet asks; the sandbox is left as it is.
	id := strings.TrimPrefix(now.Status.ContainerStatuses[0].ContainerID, "containerd://")
	if got := guestInt(t, node, dir+"/cri-containerd-"+id+".scope/memory.oom.group"); got != 1 {
		t.Errorf("memory.oom.group of vm-fork-loop's container: %d, want 1", got)
	}
}
