package harnesstest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// The host's cgroup v1 hierarchies, where the stack's containerd runs node-1's pods and
// node-1's podsync (in its machine, through a bind of them) makes their cgroups.
const hostCgroups = "/sys/fs/cgroup"

// podsyncPodsLimit is node-1's podPidsLimit (single-node.yaml).
const podsyncPodsLimit = 1024

// v1Cgroup is a cgroup's directory in the v1 hierarchy of controller.
func v1Cgroup(controller string, path ...string) string {
	return filepath.Join(append([]string{hostCgroups, controller, stack.NodeCgroupRoot(podsyncNode), "kubepods"}, path...)...)
}

// readCgroupInt reads a one-number cgroup file.
func readCgroupInt(t *testing.T, path string) int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return -1
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("read %s: %q: %v", path, s, err)
	}
	return v
}

// memTotal is the host's MemTotal in bytes.
func memTotal(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb * 1024
		}
	}
	t.Fatal("no MemTotal in /proc/meminfo")
	return 0
}

// nodeMaxPIDs is the lower of pid_max and threads-max as node-1's podsync sees them: in its
// machine, whose PID namespace has its own pid_max (Linux 6.14 and later).
func nodeMaxPIDs(t *testing.T) int64 {
	t.Helper()
	var v []int64
	for _, f := range []string{"/proc/sys/kernel/pid_max", "/proc/sys/kernel/threads-max"} {
		n, err := strconv.ParseInt(stack.InNode(t, podsyncNode, "cat", f), 10, 64)
		if err != nil {
			t.Fatalf("%s in node-1's machine: %v", f, err)
		}
		v = append(v, n)
	}
	return min(v[0], v[1])
}

// processesIn lists the processes of a v1 cgroup and every cgroup below it, by command
// name.
func processesIn(t *testing.T, dir string) map[int]string {
	t.Helper()
	out := map[int]string{}
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		b, err := os.ReadFile(filepath.Join(path, "cgroup.procs"))
		if err != nil {
			return err
		}
		for _, f := range strings.Fields(string(b)) {
			pid, _ := strconv.Atoi(f)
			comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
			out[pid] = strings.TrimSpace(string(comm))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("processes of %s: %v", dir, err)
	}
	return out
}

// qosPod is a pod of the QoS class its resources make.
func qosPod(name string, res corev1.ResourceRequirements) *corev1.Pod {
	p := busyboxPod(name, "while true; do sleep 1; done")
	p.Spec.Containers[0].Resources = res
	return p
}

func resources(kv ...string) corev1.ResourceList {
	out := corev1.ResourceList{}
	for i := 0; i+1 < len(kv); i += 2 {
		out[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return out
}

// podCgroupDir is the pod's cgroup under its QoS class in controller's hierarchy.
func podCgroupDir(controller string, p *corev1.Pod) string {
	switch p.Status.QOSClass {
	case corev1.PodQOSBurstable:
		return v1Cgroup(controller, "burstable", "pod"+string(p.UID))
	case corev1.PodQOSBestEffort:
		return v1Cgroup(controller, "besteffort", "pod"+string(p.UID))
	}
	return v1Cgroup(controller, "pod"+string(p.UID))
}

// TestCgroupsQoSTreeAndLimits: on the nspawn node (host cgroup v1, cgroupfs driver),
// podsync keeps <cgroupRoot>/kubepods with the machine's memory, CPU and PIDs, the
// burstable and besteffort QoS cgroups, and a cgroup per pod with the pod's limits and
// podPidsLimit; containers run inside them with the kubelet's OOM score per QoS class; a
// deleted pod's cgroup goes in every hierarchy.
func TestCgroupsQoSTreeAndLimits(t *testing.T) {
	t.Parallel()
	waitNodeReady(t, 90*time.Second)
	g := createPod(t, qosPod("cg-guaranteed", corev1.ResourceRequirements{
		Requests: resources("cpu", "200m", "memory", "64Mi"), Limits: resources("cpu", "200m", "memory", "64Mi")}))
	b := createPod(t, qosPod("cg-burstable", corev1.ResourceRequirements{
		Requests: resources("cpu", "100m", "memory", "32Mi"), Limits: resources("memory", "96Mi")}))
	be := createPod(t, qosPod("cg-besteffort", corev1.ResourceRequirements{}))
	pods := []*corev1.Pod{}
	for _, p := range []*corev1.Pod{g, b, be} {
		pods = append(pods, apiPodRunningReady(t, p.Name, 2*time.Minute))
	}

	// kubepods: the machine, nothing reserved (enforceNodeAllocatable pods, no reservations).
	mem, cpus := memTotal(t), int64(0)
	cpuinfo, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(cpuinfo), "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == "processor" {
			cpus++
		}
	}
	if got := readCgroupInt(t, v1Cgroup("memory", "memory.limit_in_bytes")); got > mem || got < mem-4096 {
		t.Errorf("kubepods memory.limit_in_bytes = %d, want MemTotal %d (to the page)", got, mem)
	}
	if got, want := readCgroupInt(t, v1Cgroup("pids", "pids.max")), nodeMaxPIDs(t); got != want {
		t.Errorf("kubepods pids.max = %d, want %d", got, want)
	}
	if got := readCgroupInt(t, v1Cgroup("cpu", "cpu.shares")); got != cpus*1024 {
		t.Errorf("kubepods cpu.shares = %d, want %d (%d CPUs)", got, cpus*1024, cpus)
	}
	if got := readCgroupInt(t, v1Cgroup("cpu", "besteffort", "cpu.shares")); got != 2 {
		t.Errorf("besteffort cpu.shares = %d, want 2", got)
	}
	if got := readCgroupInt(t, v1Cgroup("cpu", "burstable", "cpu.shares")); got < 102 {
		t.Errorf("burstable cpu.shares = %d, want at least 102 (cg-burstable's 100m)", got)
	}

	const unlimited = 9223372036854771712 // v1's memory "no limit", to the page
	for _, tt := range []struct {
		pod           *corev1.Pod
		memory        int64
		shares, quota int64
		oomScoreAdj   int64
	}{
		{pods[0], 64 << 20, 204, 20000, -997},
		{pods[1], 96 << 20, 102, -1, 1000 - 1000*(32<<20)/mem},
		{pods[2], unlimited, 2, -1, 1000},
	} {
		name := tt.pod.Name + " (" + string(tt.pod.Status.QOSClass) + ")"
		if got := readCgroupInt(t, filepath.Join(podCgroupDir("memory", tt.pod), "memory.limit_in_bytes")); got != tt.memory {
			t.Errorf("%s: memory.limit_in_bytes = %d, want %d", name, got, tt.memory)
		}
		if got := readCgroupInt(t, filepath.Join(podCgroupDir("cpu", tt.pod), "cpu.shares")); got != tt.shares {
			t.Errorf("%s: cpu.shares = %d, want %d", name, got, tt.shares)
		}
		if got := readCgroupInt(t, filepath.Join(podCgroupDir("cpu", tt.pod), "cpu.cfs_quota_us")); got != tt.quota {
			t.Errorf("%s: cpu.cfs_quota_us = %d, want %d", name, got, tt.quota)
		}
		if got := readCgroupInt(t, filepath.Join(podCgroupDir("pids", tt.pod), "pids.max")); got != podsyncPodsLimit {
			t.Errorf("%s: pids.max = %d, want podPidsLimit %d", name, got, podsyncPodsLimit)
		}
		// The stack's containerd runs without CAP_SYS_RESOURCE (restrict_oom_score_adj):
		// it raises a score below its own to its own, as it does the sandbox's -998. The
		// vm node, where containerd is root with every capability, sees -997 itself
		// (vmtest TestCgroupsOnTheSystemdDriver).
		procs := processesIn(t, podCgroupDir("memory", tt.pod))
		floor := int64(-1000)
		for pid, comm := range procs {
			if comm == "pause" {
				floor = readCgroupInt(t, fmt.Sprintf("/proc/%d/oom_score_adj", pid))
			}
		}
		want := max(tt.oomScoreAdj, floor)
		apps := 0
		for pid, comm := range procs {
			if comm == "pause" {
				continue
			}
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/oom_score_adj", pid))
			if errors.Is(err, os.ErrNotExist) {
				// A child that ended since the listing (the container's shell loop runs
				// a sleep each second): nothing left to check.
				continue
			}
			apps++
			if got, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err != nil || got != want {
				t.Errorf("%s: process %d (%s) oom_score_adj = %d (%v), want %d (the kubelet's %d, not below the runtime's %d)", name, pid, comm, got, err, want, tt.oomScoreAdj, floor)
			}
		}
		if apps == 0 {
			t.Errorf("%s: no container process in its pod cgroup (%v)", name, procs)
		}
		t.Logf("%s: memory %d, shares %d, quota %d, pids %d, oom_score_adj %d: %d processes", name, tt.memory, tt.shares, tt.quota, podsyncPodsLimit, tt.oomScoreAdj, len(procs))
	}

	// Deleted, the pods' cgroups go in every hierarchy once their containers are gone.
	c := admin(t)
	for _, p := range pods {
		if err := c.CoreV1().Pods("default").Delete(context.Background(), p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			t.Fatal(err)
		}
	}
	stack.WaitFor(t, time.Minute, "the deleted pods' cgroups removed", func(context.Context) (bool, string) {
		var left []string
		for _, p := range pods {
			for _, ctrl := range []string{"memory", "cpu", "pids", "cpuset", "freezer"} {
				if _, err := os.Stat(podCgroupDir(ctrl, p)); err == nil {
					left = append(left, podCgroupDir(ctrl, p))
				}
			}
		}
		return len(left) == 0, strings.Join(left, " ")
	})
}

// TestCgroupsAdoptedAfterPodsyncSIGKILL: podsync killed with 30 pods running finds their
// cgroups and keeps them: the same directories (inodes), no second cgroup for a pod, the
// same containers with no restart.
func TestCgroupsAdoptedAfterPodsyncSIGKILL(t *testing.T) {
	// Serial: SIGKILLs unitlet-podsync.
	const n = 30
	waitNodeReady(t, 90*time.Second)
	c := admin(t)
	var names []string
	for i := 0; i < n; i++ {
		var res corev1.ResourceRequirements
		switch i % 3 {
		case 0:
			res = corev1.ResourceRequirements{Requests: resources("cpu", "10m", "memory", "16Mi"), Limits: resources("cpu", "10m", "memory", "16Mi")}
		case 1:
			res = corev1.ResourceRequirements{Requests: resources("cpu", "10m")}
		}
		p := createPod(t, qosPod(fmt.Sprintf("cg-adopt-%02d", i), res))
		names = append(names, p.Name)
	}
	inodes := map[string]uint64{}
	containers := map[string]string{}
	var pods []*corev1.Pod
	for _, name := range names {
		p := apiPodRunningReady(t, name, 3*time.Minute)
		pods = append(pods, p)
		for _, ctrl := range []string{"memory", "cpu", "pids"} {
			var st syscall.Stat_t
			if err := syscall.Stat(podCgroupDir(ctrl, p), &st); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			inodes[ctrl+"/"+name] = st.Ino
		}
		containers[name] = p.Status.ContainerStatuses[0].ContainerID
	}

	killPodsync(t)
	// Two cleanup rounds (10 s each) of the new podsync.
	time.Sleep(25 * time.Second)

	for _, p := range pods {
		for _, ctrl := range []string{"memory", "cpu", "pids"} {
			var st syscall.Stat_t
			if err := syscall.Stat(podCgroupDir(ctrl, p), &st); err != nil {
				t.Errorf("%s: its %s cgroup is gone after podsync's restart: %v", p.Name, ctrl, err)
				continue
			}
			if st.Ino != inodes[ctrl+"/"+p.Name] {
				t.Errorf("%s: its %s cgroup was made again (inode %d, was %d)", p.Name, ctrl, st.Ino, inodes[ctrl+"/"+p.Name])
			}
		}
		// One cgroup per pod: none under another QoS class.
		found := 0
		for _, dir := range []string{v1Cgroup("memory", "pod"+string(p.UID)), v1Cgroup("memory", "burstable", "pod"+string(p.UID)), v1Cgroup("memory", "besteffort", "pod"+string(p.UID))} {
			if _, err := os.Stat(dir); err == nil {
				found++
			}
		}
		if found != 1 {
			t.Errorf("%s: %d pod cgroups, want 1", p.Name, found)
		}
		now, err := c.CoreV1().Pods("default").Get(context.Background(), p.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cs := now.Status.ContainerStatuses[0]
		if cs.ContainerID != containers[p.Name] || cs.RestartCount != 0 || cs.State.Running == nil {
			t.Errorf("%s: container %s restarts %d running %v, want %s running with no restart", p.Name, cs.ContainerID, cs.RestartCount, cs.State.Running != nil, containers[p.Name])
		}
	}
	t.Logf("%d pods: %d pod cgroups adopted after podsync's SIGKILL, no container restarted", n, len(pods))
}
