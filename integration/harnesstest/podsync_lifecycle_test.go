package harnesstest

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	podsyncv1 "github.com/unitlet/unitlet/proto/unitlet/podsync/v1"
)

func testServerPod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeName:                      podsyncNode,
			AutomountServiceAccountToken:  ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To[int64](2),
			Containers: []corev1.Container{{
				Name: "server", Image: "unitlet.local/testserver:1", ImagePullPolicy: corev1.PullNever,
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
			}},
		},
	}
}

func httpProbe(period, failures int32) *corev1.Probe {
	return &corev1.Probe{
		ProbeHandler:     corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("http")}},
		PeriodSeconds:    period,
		TimeoutSeconds:   1,
		SuccessThreshold: 1,
		FailureThreshold: failures,
	}
}

// flipHealth switches the test server's /healthz in the pod at ip.
func flipHealth(t *testing.T, ip, to string) {
	t.Helper()
	// Running is not listening yet: wait until the server answers.
	stack.WaitFor(t, 20*time.Second, "the test server in "+ip+" answers", func(context.Context) (bool, string) {
		resp, err := http.Get(fmt.Sprintf("http://%s:8080/healthz", ip))
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return true, ""
	})
	resp, err := http.Post(fmt.Sprintf("http://%s:8080/healthz/%s", ip, to), "text/plain", nil)
	if err != nil {
		t.Fatalf("switch /healthz of %s to %s: %v", ip, to, err)
	}
	resp.Body.Close()
}

func TestPodsyncReadinessProbeFlipsReadiness(t *testing.T) {
	t.Parallel()
	p := testServerPod("readiness")
	p.Spec.Containers[0].ReadinessProbe = httpProbe(1, 1)
	createPod(t, p)
	key := "default/readiness"
	_, st := waitPod(t, time.Minute, key, "ready", func(_ *podsyncv1.Pod, st corev1.PodStatus) bool {
		return len(st.ContainerStatuses) == 1 && st.ContainerStatuses[0].Ready
	})
	flipHealth(t, st.PodIP, "fail")
	waitPod(t, 20*time.Second, key, "not ready after /healthz fails", func(_ *podsyncv1.Pod, st corev1.PodStatus) bool {
		return !st.ContainerStatuses[0].Ready && conditionIs(st, corev1.PodReady, corev1.ConditionFalse)
	})
	flipHealth(t, st.PodIP, "ok")
	_, st = waitPod(t, 20*time.Second, key, "ready again", func(_ *podsyncv1.Pod, st corev1.PodStatus) bool {
		return st.ContainerStatuses[0].Ready && conditionIs(st, corev1.PodReady, corev1.ConditionTrue)
	})
	if st.ContainerStatuses[0].RestartCount != 0 {
		t.Errorf("a readiness failure restarted the container (restartCount %d)", st.ContainerStatuses[0].RestartCount)
	}
}

func conditionIs(st corev1.PodStatus, ct corev1.PodConditionType, want corev1.ConditionStatus) bool {
	for _, c := range st.Conditions {
		if c.Type == ct {
			return c.Status == want
		}
	}
	return false
}

func TestPodsyncLivenessProbeRestartsContainer(t *testing.T) {
	t.Parallel()
	p := testServerPod("liveness")
	p.Spec.Containers[0].LivenessProbe = httpProbe(1, 2)
	p.Spec.Containers[0].LivenessProbe.InitialDelaySeconds = 2
	createPod(t, p)
	key := "default/liveness"
	_, st := waitPod(t, time.Minute, key, "running", func(_ *podsyncv1.Pod, st corev1.PodStatus) bool {
		return len(st.ContainerStatuses) == 1 && st.ContainerStatuses[0].State.Running != nil
	})
	firstID := st.ContainerStatuses[0].ContainerID
	flipHealth(t, st.PodIP, "fail")
	_, st = waitPod(t, 30*time.Second, key, "restarted by its liveness probe", func(_ *podsyncv1.Pod, st corev1.PodStatus) bool {
		cs := st.ContainerStatuses[0]
		return cs.RestartCount == 1 && cs.State.Running != nil && cs.ContainerID != firstID
	})
	// The new instance serves a healthy /healthz again: no further restarts.
	time.Sleep(4 * time.Second)
	_, st = waitPod(t, time.Second, key, "still one restart", func(_ *podsyncv1.Pod, st corev1.PodStatus) bool { return true })
	if n := st.ContainerStatuses[0].RestartCount; n != 1 {
		t.Errorf("restartCount %d after the healthy restart, want 1", n)
	}
}

func TestPodsyncHooks(t *testing.T) {
	t.Parallel()
	p := busyboxPod("hooks", "while true; do sleep 1; done")
	p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](10)
	p.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{
		PostStart: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"sh", "-c", "echo started > /tmp/poststart"}}},
		PreStop:   &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"sh", "-c", "echo prestop-ran > /proc/1/fd/1"}}},
	}
	created := createPod(t, p)
	waitPod(t, time.Minute, "default/hooks", "running", func(_ *podsyncv1.Pod, st corev1.PodStatus) bool { return st.Phase == corev1.PodRunning })
	ctrs := runtimeContainers(context.Background(), t, string(created.UID))
	if len(ctrs) != 1 {
		t.Fatalf("%d containers, want 1", len(ctrs))
	}
	rt, err := stack.CRI()
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	out, err := rt.Runtime.ExecSync(context.Background(), &runtimeapi.ExecSyncRequest{ContainerId: ctrs[0].Id, Cmd: []string{"cat", "/tmp/poststart"}, Timeout: 5})
	if err != nil || strings.TrimSpace(string(out.GetStdout())) != "started" {
		t.Errorf("the postStart hook's file: %q %v", out.GetStdout(), err)
	}
	if err := admin(t).CoreV1().Pods("default").Delete(context.Background(), "hooks", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	logFile := filepath.Join(stack.Dir(), "nodes", podsyncNode, "pod-logs", "default_hooks_"+string(created.UID), "main", "0.log")
	stack.WaitFor(t, 30*time.Second, "the preStop hook's output in the container log", func(context.Context) (bool, string) {
		b, err := os.ReadFile(logFile)
		return strings.Contains(string(b), "prestop-ran"), fmt.Sprintf("%q %v", b, err)
	})
}

// servicePID is the host pid of one of podsyncNode's unitlet services ("podsync",
// "status").
func servicePID(t testing.TB, svc string) int {
	t.Helper()
	pid, err := stack.ServicePID(podsyncNode, svc)
	if err != nil {
		t.Fatalf("%v\n%s", err, stack.Logs(20))
	}
	return pid
}

// podsyncPID is the host pid of podsyncNode's unitlet-podsync.
func podsyncPID(t testing.TB) int { return servicePID(t, "podsync") }

// sigkill kills one of podsyncNode's unitlet services with SIGKILL and waits until it is
// gone.
func sigkill(t *testing.T, svc string) {
	t.Helper()
	pid := servicePID(t, svc)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 50; i++ {
		if syscall.Kill(pid, 0) != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// restartServices starts podsyncNode's services that do not run (on an nspawn node systemd
// restarts a killed one by itself) and waits until each answers.
func restartServices(t *testing.T) {
	t.Helper()
	for _, n := range stack.Stack().Nodes {
		if n.Name != podsyncNode {
			continue
		}
		for _, svc := range append(append([]string{}, n.Services...), n.HostServices...) {
			if err := stack.StartService(context.Background(), podsyncNode, svc); err != nil {
				t.Fatalf("start the killed services again: %v\n%s", err, stack.Logs(20))
			}
		}
	}
}

// killPodsync kills podsync with SIGKILL and waits until it answers again.
func killPodsync(t *testing.T) {
	t.Helper()
	sigkill(t, "podsync")
	restartServices(t)
}

func TestPodsyncSIGKILLDuringABurst(t *testing.T) {
	// Serial: SIGKILLs unitlet-podsync.
	const n = 30
	registerNode(t)
	c := admin(t)
	waitDefaultServiceAccount(t, "default")
	for i := 0; i < n; i++ {
		p := busyboxPod(fmt.Sprintf("burst-%02d", i), "while true; do sleep 1; done")
		if _, err := c.CoreV1().Pods("default").Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for i := 0; i < n; i++ {
			_ = c.CoreV1().Pods("default").Delete(context.Background(), fmt.Sprintf("burst-%02d", i), metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		}
	})
	time.Sleep(1500 * time.Millisecond) // in the middle of starting them
	killPodsync(t)

	allRunning := func(what string) map[string]*podsyncv1.Pod {
		var pods map[string]*podsyncv1.Pod
		stack.WaitFor(t, 2*time.Minute, what, func(ctx context.Context) (bool, string) {
			pods = podsyncPods(ctx, t)
			running := 0
			for i := 0; i < n; i++ {
				if p := pods[fmt.Sprintf("default/burst-%02d", i)]; p != nil && statusOf(p).Phase == corev1.PodRunning &&
					len(statusOf(p).ContainerStatuses) == 1 && statusOf(p).ContainerStatuses[0].Ready {
					running++
				}
			}
			return running == n, fmt.Sprintf("%d of %d running", running, n)
		})
		return pods
	}
	pods := allRunning("all 30 pods running after podsync was killed during the burst")

	rt, err := stack.CRI()
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	ids := map[string]string{}
	for i := 0; i < n; i++ {
		key := fmt.Sprintf("default/burst-%02d", i)
		uid := pods[key].GetUid()
		ctrs := runtimeContainers(context.Background(), t, uid)
		sbs, err := rt.Runtime.ListPodSandbox(context.Background(), &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"io.kubernetes.pod.uid": uid}}})
		if err != nil {
			t.Fatal(err)
		}
		// containerd 2.x abandons a start whose caller went away and keeps the container,
		// exited with reason StartError, and its created task (containerd issue 11037);
		// podsync starts it again at once. Such a start never ran: it is counted apart.
		ran, abandoned := 0, 0
		for _, c := range ctrs {
			st, err := rt.Runtime.ContainerStatus(context.Background(), &runtimeapi.ContainerStatusRequest{ContainerId: c.Id})
			if err != nil {
				t.Fatal(err)
			}
			if s := st.GetStatus(); s.GetState() == runtimeapi.ContainerState_CONTAINER_EXITED && s.GetStartedAt() == 0 &&
				s.GetReason() == "StartError" && strings.Contains(s.GetMessage(), "context canceled") {
				abandoned++
				t.Logf("%s: the runtime abandoned a start when podsync was killed: %s", key, s.GetMessage())
				continue
			}
			ran++
		}
		if ran != 1 || len(sbs.Items) != 1 {
			t.Errorf("%s: %d containers that ran and %d sandboxes in the runtime, want 1 and 1 (nothing started twice)", key, ran, len(sbs.Items))
		}
		if cs := statusOf(pods[key]).ContainerStatuses; len(cs) != 1 || int(cs[0].RestartCount) != abandoned || cs[0].LastTerminationState.Terminated != nil {
			t.Errorf("%s: container statuses %+v, want one container never restarted (%d abandoned starts)", key, cs, abandoned)
		} else {
			ids[key] = cs[0].ContainerID
		}
	}

	// Killed again with everything running: nothing is restarted.
	killPodsync(t)
	allRunning("all 30 pods still running after a second SIGKILL")
	time.Sleep(3 * time.Second)
	pods = podsyncPods(context.Background(), t)
	for key, id := range ids {
		cs := statusOf(pods[key]).ContainerStatuses
		if len(cs) != 1 || cs[0].ContainerID != id || cs[0].LastTerminationState.Terminated != nil || !cs[0].Ready {
			t.Errorf("%s after podsync's restart: %+v, want the same ready container %s, never restarted", key, cs, id)
		}
	}
}

func TestPodsyncKeepsPodsWhileTheAPIServerIsDown(t *testing.T) {
	// Serial: SIGSTOPs the API server.
	created := createPod(t, busyboxPod("api-outage", "while true; do sleep 1; done"))
	_, st := waitPod(t, time.Minute, "default/api-outage", "running", func(_ *podsyncv1.Pod, st corev1.PodStatus) bool { return st.Phase == corev1.PodRunning })
	id := st.ContainerStatuses[0].ContainerID
	var apiPID int
	for _, c := range stack.Status() {
		if c.Name == "kube-apiserver" {
			apiPID = c.PID
		}
	}
	if apiPID == 0 {
		t.Fatal("no kube-apiserver in the stack")
	}
	// Stopped, not killed: its connections hang as they do when the server is unreachable.
	if err := syscall.Kill(apiPID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			_ = syscall.Kill(apiPID, syscall.SIGCONT)
		}
	}()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		time.Sleep(5 * time.Second)
		ctrs := runtimeContainers(context.Background(), t, string(created.UID))
		if len(ctrs) != 1 || !strings.HasSuffix(id, ctrs[0].Id) || ctrs[0].State != runtimeapi.ContainerState_CONTAINER_RUNNING {
			t.Fatalf("with the API server down the pod's containers changed: %v", ctrs)
		}
	}
	if err := syscall.Kill(apiPID, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	resumed = true
	// Caught up: a pod created now runs.
	createPod(t, busyboxPod("after-outage", "while true; do sleep 1; done"))
	waitPod(t, time.Minute, "default/after-outage", "running after the API server came back", func(_ *podsyncv1.Pod, st corev1.PodStatus) bool { return st.Phase == corev1.PodRunning })
	_, st = waitPod(t, time.Second, "default/api-outage", "still the same container", func(_ *podsyncv1.Pod, st corev1.PodStatus) bool { return true })
	if st.ContainerStatuses[0].ContainerID != id || st.ContainerStatuses[0].RestartCount != 0 {
		t.Errorf("after the outage: %+v, want container %s never restarted", st.ContainerStatuses[0], id)
	}
}
