package harnesstest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	podsyncv1 "github.com/unitlet/unitlet/proto/unitlet/podsync/v1"
)

// TestPodsyncStaticPodsGetTheAPIsValidation: static pods pass the API server's whole
// validation of a new pod, as the kubelet runs it on file pods. A manifest with
// Bidirectional mount propagation in an unprivileged container, one with an unmasked
// /proc and the host's user namespace, and one whose seccomp profile climbs out of the
// profile root are each skipped, the log naming the file and the field; the good manifest
// beside them runs.
func TestPodsyncStaticPodsGetTheAPIsValidation(t *testing.T) {
	t.Parallel()
	registerNode(t)
	dir := stack.NodeManifestDir(podsyncNode)
	container := "  - name: main\n    image: unitlet.local/busybox:1\n    imagePullPolicy: Never\n    command: [sh, -c, 'sleep 3600']\n"
	bad := []struct{ file, name, spec, field string }{
		{"v47-bidirectional.yaml", "v47-bidirectional", "  volumes:\n  - name: host\n    hostPath: {path: /tmp}\n  containers:\n" + container +
			"    volumeMounts: [{name: host, mountPath: /host, mountPropagation: Bidirectional}]\n", "mountPropagation"},
		{"v47-unmasked.yaml", "v47-unmasked", "  containers:\n" + container + "    securityContext: {procMount: Unmasked}\n", "securityContext.procMount"},
		{"v47-seccomp.yaml", "v47-seccomp", "  securityContext:\n    seccompProfile: {type: Localhost, localhostProfile: ../../etc/evil.json}\n  containers:\n" + container,
			"seccompProfile.localhostProfile"},
	}
	write := func(file, name, spec string) string {
		path := filepath.Join(dir, file)
		if err := os.WriteFile(path, []byte("apiVersion: v1\nkind: Pod\nmetadata:\n  name: "+name+"\nspec:\n"+spec), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(path) })
		return path
	}
	for _, b := range bad {
		write(b.file, b.name, b.spec)
	}
	write("v47-good.yaml", "v47-good", "  containers:\n"+container)

	waitPod(t, time.Minute, "default/v47-good-"+podsyncNode, "Running", func(_ *podsyncv1.Pod, st corev1.PodStatus) bool {
		return st.Phase == corev1.PodRunning
	})
	stack.WaitFor(t, 30*time.Second, "podsync's log of each invalid manifest, naming the file and the field", func(ctx context.Context) (bool, string) {
		out, err := stack.Exec(podsyncNode, []string{"journalctl", "-u", "unitlet-podsync", "-o", "cat", "--no-pager"}).CombinedOutput()
		var missing []string
		for _, b := range bad {
			found := false
			for _, l := range strings.Split(string(out), "\n") {
				if strings.Contains(l, "skipped a bad pod manifest") && strings.Contains(l, filepath.Join(dir, b.file)) && strings.Contains(l, b.field) {
					found = true
				}
			}
			if !found {
				missing = append(missing, b.file+" ("+b.field+")")
			}
		}
		return len(missing) == 0, fmt.Sprintf("not logged: %v (%v)", missing, err)
	})
	pods := podsyncPods(context.Background(), t)
	for _, b := range bad {
		if _, ok := pods["default/"+b.name+"-"+podsyncNode]; ok {
			t.Errorf("podsync runs the invalid static pod %s", b.file)
		}
	}
}

// TestPodsyncKillsWhatAGonePodLeftInItsCgroup: a process left in a pod's cgroup after the
// pod is deleted and its containers stopped (here one moved there from the node, as a
// daemon that escaped its container's stop would be) is killed, and the cgroup removed,
// as the kubelet kills every process of an orphaned pod cgroup before it destroys it. On
// the nspawn node: the host's cgroup v1 hierarchies, the cgroupfs driver, each process
// killed by its pid. (Processes of the stack's containerd are in the host's pid namespace,
// which podsync in its machine does not see; the one left here is in the machine's.)
func TestPodsyncKillsWhatAGonePodLeftInItsCgroup(t *testing.T) {
	t.Parallel()
	waitNodeReady(t, 90*time.Second)
	p := createPod(t, busyboxPod("v47-leftover", "sleep 3600"))
	pod := apiPodRunningReady(t, p.Name, 2*time.Minute)
	if pod.Status.QOSClass != corev1.PodQOSBestEffort {
		t.Fatalf("QoS class %s, want BestEffort", pod.Status.QOSClass)
	}
	rel := filepath.Join(stack.NodeCgroupRoot(podsyncNode), "kubepods", "besteffort", "pod"+string(pod.UID))

	// A process of the node's joins the pod's cgroup in every hierarchy that has it, as
	// podsync sees them in its machine (the host's, bound at /run/unitlet-host-cgroup).
	const marker = "sleep 4747"
	script := fmt.Sprintf(`n=0; for d in /run/unitlet-host-cgroup/*%s; do [ -f "$d/cgroup.procs" ] && echo $$ > "$d/cgroup.procs" && n=$((n+1)); done; [ $n -gt 0 ] || exit 3; exec %s`, rel, marker)
	leftover := stack.Exec(podsyncNode, []string{"sh", "-c", script})
	if err := leftover.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- leftover.Wait() }()
	t.Cleanup(func() {
		if leftover.ProcessState == nil {
			killHostProcess(marker)
		}
	})
	var hostPid int
	stack.WaitFor(t, 20*time.Second, "the leftover process in the pod's memory cgroup", func(context.Context) (bool, string) {
		procs := processesIn(t, filepath.Join(hostCgroups, "memory", rel))
		for pid := range procs {
			if cmdline(pid) == marker {
				hostPid = pid
				return true, ""
			}
		}
		select {
		case err := <-done:
			t.Fatalf("the leftover process ended early: %v", err)
		default:
		}
		return false, fmt.Sprintf("processes %v", procs)
	})

	if err := admin(t).CoreV1().Pods("default").Delete(context.Background(), p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || !ee.Sys().(syscall.WaitStatus).Signaled() || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Errorf("the leftover process %d ended with %v, want SIGKILL", hostPid, err)
		}
		t.Logf("the leftover process %d was killed %v after the pod's deletion", hostPid, time.Since(start).Round(time.Second))
	case <-time.After(90 * time.Second):
		t.Fatalf("the process %d left in the deleted pod's cgroup still runs after 90 s", hostPid)
	}
	stack.WaitFor(t, time.Minute, "the pod's cgroup removed in every hierarchy", func(context.Context) (bool, string) {
		var left []string
		for _, ctrl := range []string{"memory", "cpu", "pids", "cpuset", "freezer"} {
			if _, err := os.Stat(filepath.Join(hostCgroups, ctrl, rel)); err == nil {
				left = append(left, ctrl)
			}
		}
		return len(left) == 0, fmt.Sprintf("still in %v", left)
	})
	stack.WaitFor(t, 20*time.Second, "podsync's log of the kill", func(ctx context.Context) (bool, string) {
		out, err := stack.Exec(podsyncNode, []string{"sh", "-c", "journalctl -u unitlet-podsync -o cat --no-pager | grep 'killed processes left in a gone pod' | grep -F " + string(pod.UID) + " || true"}).CombinedOutput()
		return strings.TrimSpace(string(out)) != "", fmt.Sprintf("%s %v", out, err)
	})
}

// cmdline is a host process's command line, its arguments joined by spaces.
func cmdline(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
}

// killHostProcess kills, by its command line, what a failed test left running.
func killHostProcess(cmd string) {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err == nil && cmdline(pid) == cmd {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}
