package harnesstest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/unitlet/unitlet/integration/harness"
)

// ephemeralStatus is the API server's status of the pod's ephemeral container name.
func ephemeralStatus(p *corev1.Pod, name string) *corev1.ContainerStatus {
	for i := range p.Status.EphemeralContainerStatuses {
		if p.Status.EphemeralContainerStatuses[i].Name == name {
			return &p.Status.EphemeralContainerStatuses[i]
		}
	}
	return nil
}

// waitEphemeral waits until the API server's status of the pod's ephemeral container
// name satisfies cond, and returns the pod.
func waitEphemeral(t *testing.T, within time.Duration, pod, name, what string, cond func(cs *corev1.ContainerStatus) bool) *corev1.Pod {
	t.Helper()
	var got *corev1.Pod
	stack.WaitFor(t, within, pod+"'s ephemeral container "+name+" "+what, func(ctx context.Context) (bool, string) {
		p, err := admin(t).CoreV1().Pods("default").Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		got = p
		b, _ := json.Marshal(p.Status.EphemeralContainerStatuses)
		cs := ephemeralStatus(p, name)
		return cs != nil && cond(cs), string(b)
	})
	return got
}

// TestPodspecEphemeralContainers proves kubectl debug against a running pod: an ephemeral
// container added through the pods/ephemeralcontainers subresource starts in the pod,
// shares its target's process namespace, is reached by exec and logs through the API
// server, is never restarted once it has exited (restartPolicy Always notwithstanding),
// and goes with the pod.
func TestPodspecEphemeralContainers(t *testing.T) {
	t.Parallel()
	waitNodeReady(t, 90*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := admin(t)
	// The target's process is one the debugger can recognize in its ps.
	createPod(t, busyboxPod("eph-target", "exec sleep 31337"))
	apiPodRunningReady(t, "eph-target", time.Minute)

	// What kubectl debug --target=main does: add the container through the subresource.
	p, err := c.CoreV1().Pods("default").Get(ctx, "eph-target", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, corev1.EphemeralContainer{
		EphemeralContainerCommon: corev1.EphemeralContainerCommon{
			Name: "debugger", Image: harness.BusyboxImage, ImagePullPolicy: corev1.PullNever,
			Command: []string{"sh", "-c", "echo debugger up; while ! test -e /tmp/stop; do sleep 1; done; echo debugger done; exit 3"},
		},
		TargetContainerName: "main",
	})
	if _, err := c.CoreV1().Pods("default").UpdateEphemeralContainers(ctx, "eph-target", p, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("add an ephemeral container: %v", err)
	}
	p = waitEphemeral(t, time.Minute, "eph-target", "debugger", "Running", func(cs *corev1.ContainerStatus) bool { return cs.State.Running != nil })
	cs := ephemeralStatus(p, "debugger")
	if cs.Ready || cs.Started != nil || cs.RestartCount != 0 || cs.Image != harness.BusyboxImage || !strings.HasPrefix(cs.ContainerID, "containerd://") {
		t.Errorf("debugger status %+v, want running, not ready, no started, restartCount 0, the image and a containerd ID", cs)
	}
	if p.Status.Phase != corev1.PodRunning || len(p.Status.ContainerStatuses) != 1 || !p.Status.ContainerStatuses[0].Ready {
		t.Errorf("the pod: phase %s, statuses %+v, want Running with main ready", p.Status.Phase, p.Status.ContainerStatuses)
	}
	debuggerID := cs.ContainerID

	// It sees the target's processes (PID namespace TARGET), through exec via the API
	// server and the node API.
	if out, err := kubectl(ctx, t, "exec", "eph-target", "-c", "debugger", "--", "ps"); err != nil || !strings.Contains(out, "sleep 31337") {
		t.Errorf("kubectl exec -c debugger -- ps: %q (%v), want the target's sleep 31337", out, err)
	}
	if out, err := kubectl(ctx, t, "exec", "eph-target", "-c", "debugger", "--", "cat", "/proc/1/cmdline"); err != nil || !strings.HasPrefix(out, "sleep\x0031337") {
		t.Errorf("the debugger's PID 1: %q (%v), want the target's sleep 31337", out, err)
	}
	if out, err := kubectl(ctx, t, "logs", "eph-target", "-c", "debugger"); err != nil || out != "debugger up\n" {
		t.Errorf("kubectl logs -c debugger: %q (%v), want its output", out, err)
	}

	// It exits 3; restartPolicy Always does not restart it: wait past the first backoff.
	if out, err := kubectl(ctx, t, "exec", "eph-target", "-c", "debugger", "--", "touch", "/tmp/stop"); err != nil {
		t.Fatalf("kubectl exec -c debugger -- touch /tmp/stop: %v\n%s", err, out)
	}
	p = waitEphemeral(t, 30*time.Second, "eph-target", "debugger", "Terminated", func(cs *corev1.ContainerStatus) bool { return cs.State.Terminated != nil })
	term := ephemeralStatus(p, "debugger").State.Terminated
	if term.ExitCode != 3 || term.Reason != "Error" || term.ContainerID != debuggerID {
		t.Errorf("debugger terminated %+v, want exit 3, reason Error, the same container", term)
	}
	time.Sleep(5 * time.Second)
	p, err = c.CoreV1().Pods("default").Get(ctx, "eph-target", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cs := ephemeralStatus(p, "debugger"); cs.State.Terminated == nil || cs.RestartCount != 0 || cs.ContainerID != debuggerID || cs.LastTerminationState.Terminated != nil {
		t.Errorf("5 s after it exited the debugger is %+v, want still terminated, restartCount 0, the same container", cs)
	}
	instances := 0
	for _, rc := range runtimeContainers(ctx, t, string(p.UID)) {
		if rc.GetMetadata().GetName() == "debugger" {
			instances++
		}
	}
	if instances != 1 {
		t.Errorf("the runtime has %d instances of the debugger, want the one that exited", instances)
	}
	if out, err := kubectl(ctx, t, "logs", "eph-target", "-c", "debugger"); err != nil || out != "debugger up\ndebugger done\n" {
		t.Errorf("kubectl logs -c debugger after it exited: %q (%v)", out, err)
	}

	// Deleting the pod removes it with the pod.
	if out, err := kubectl(ctx, t, "delete", "pod", "eph-target", "--wait=true"); err != nil {
		t.Fatalf("kubectl delete: %v\n%s", err, out)
	}
	stack.WaitFor(t, 30*time.Second, "the pod's containers removed from the runtime", func(ctx context.Context) (bool, string) {
		left := runtimeContainers(ctx, t, string(p.UID))
		return len(left) == 0, fmt.Sprintf("%d containers left", len(left))
	})
}

// TestPodspecKubectlDebugAttach runs the real `kubectl debug -i --target`: kubectl adds the
// container, waits for it to run and attaches to it through the API server and the node
// API; what it types reaches the container, and the container sees the target's process.
func TestPodspecKubectlDebugAttach(t *testing.T) {
	t.Parallel()
	waitNodeReady(t, 90*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	createPod(t, busyboxPod("eph-attach", "exec sleep 31338"))
	apiPodRunningReady(t, "eph-attach", time.Minute)

	// The container asks until it is answered: its first questions go to the log only,
	// before kubectl attaches, and the answer is typed once one reached kubectl. It stays
	// a while after its reply: in two make test runs whose lane ran at nice 15 beside the
	// vm, a container that exited at once after replying left kubectl without the reply
	// (the log had it), which no run of the test alone under load reproduced.
	out, err := kubectlAnswer(ctx, t, "name?", "hello\n", "debug", "-i", "eph-attach",
		"--image="+harness.BusyboxImage, "--image-pull-policy=Never", "--target=main", "-c", "dbg", "--",
		"sh", "-c", `until read -t 1 line; do echo "name?"; done; echo "got $line"; cat /proc/1/cmdline; echo; sleep 5`)
	if err != nil || !strings.Contains(out, "got hello") || !strings.Contains(out, "sleep\x0031338") {
		logs, lerr := kubectl(ctx, t, "logs", "eph-attach", "-c", "dbg")
		t.Errorf("kubectl debug -i --target=main: %v\n%q\nwant what was typed echoed and the target's sleep 31338; the container's log: %q (%v)",
			err, out, logs, lerr)
	}
	p := waitEphemeral(t, 30*time.Second, "eph-attach", "dbg", "Terminated", func(cs *corev1.ContainerStatus) bool { return cs.State.Terminated != nil })
	if cs := ephemeralStatus(p, "dbg"); cs.State.Terminated.ExitCode != 0 || cs.State.Terminated.Reason != "Completed" || cs.RestartCount != 0 {
		t.Errorf("dbg after it exited: %+v, want Completed with 0, no restart", cs)
	}
}
