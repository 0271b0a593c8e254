package harnesstest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/unitlet/unitlet/integration/harness"
	podsyncv1 "github.com/unitlet/unitlet/proto/unitlet/podsync/v1"
	"github.com/unitlet/unitlet/shared/bus"
)

// podsyncNode is the stack's node running unitlet-podsync and unitlet-status (in the default
// stack, an nspawn machine running them under systemd).
const podsyncNode = "node-1"

// registerNode waits until unitlet-status has registered podsyncNode: without the Node
// the controller-manager deletes pods bound to the node and mirror pods have no owner.
func registerNode(t testing.TB) {
	t.Helper()
	c := admin(t)
	deadline := time.Now().Add(90 * time.Second)
	for {
		_, err := c.CoreV1().Nodes().Get(context.Background(), podsyncNode, metav1.GetOptions{})
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("unitlet-status has not registered node %s: %v\n%s", podsyncNode, err, stack.Logs(30))
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// podsyncPods lists the pods unitlet-podsync reports, by namespace/name.
func podsyncPods(ctx context.Context, t *testing.T) map[string]*podsyncv1.Pod {
	t.Helper()
	conn, err := bus.Dial(stack.NodeSocketDir(podsyncNode), "podsync")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	stream, err := podsyncv1.NewPodSyncServiceClient(conn).ListPodsStream(ctx, &podsyncv1.ListPodsStreamRequest{})
	if err != nil {
		t.Fatalf("ListPodsStream: %v", err)
	}
	out := map[string]*podsyncv1.Pod{}
	for {
		part, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("ListPodsStream: %v", err)
		}
		for _, p := range part.GetPods() {
			out[p.Namespace+"/"+p.Name] = p
		}
	}
}

func statusOf(p *podsyncv1.Pod) corev1.PodStatus {
	var st corev1.PodStatus
	_ = json.Unmarshal(p.GetStatus(), &st)
	return st
}

// waitPod waits until podsync reports the pod and cond holds for its status.
func waitPod(t *testing.T, within time.Duration, key, what string, cond func(p *podsyncv1.Pod, st corev1.PodStatus) bool) (*podsyncv1.Pod, corev1.PodStatus) {
	t.Helper()
	var last *podsyncv1.Pod
	stack.WaitFor(t, within, key+": "+what, func(ctx context.Context) (bool, string) {
		last = podsyncPods(ctx, t)[key]
		if last == nil {
			return false, "podsync does not report the pod"
		}
		st := statusOf(last)
		b, _ := json.MarshalIndent(st, "", "  ")
		return cond(last, st), string(b)
	})
	return last, statusOf(last)
}

// criClient is a CRI client of the stack's containerd, closed when the test ends.
func criClient(t *testing.T) *harness.CRIClient {
	t.Helper()
	rt, err := stack.CRI()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close() })
	return rt
}

// runtimeContainers are the CRI containers of a pod, by the kubelet's labels.
func runtimeContainers(ctx context.Context, t *testing.T, uid string) []*runtimeapi.Container {
	t.Helper()
	resp, err := criClient(t).Runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{LabelSelector: map[string]string{"io.kubernetes.pod.uid": uid}}})
	if err != nil {
		t.Fatal(err)
	}
	return resp.Containers
}

func busyboxPod(name string, script string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeName:                      podsyncNode,
			AutomountServiceAccountToken:  ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To[int64](2),
			Containers: []corev1.Container{{
				Name: "main", Image: "unitlet.local/busybox:1", ImagePullPolicy: corev1.PullNever,
				Command: []string{"sh", "-c", script},
			}},
		},
	}
}

// waitDefaultServiceAccount waits for namespace ns's default service account: admission
// refuses a pod of a namespace whose account the controller-manager has not made yet (on
// a fresh stack, a moment after the API server).
func waitDefaultServiceAccount(t *testing.T, ns string) {
	t.Helper()
	stack.WaitFor(t, time.Minute, "service account "+ns+"/default", func(ctx context.Context) (bool, string) {
		_, err := admin(t).CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	})
}

func createPod(t *testing.T, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	registerNode(t)
	c := admin(t)
	waitDefaultServiceAccount(t, p.Namespace)
	created, err := c.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod %s: %v", p.Name, err)
	}
	t.Cleanup(func() {
		_ = c.CoreV1().Pods(p.Namespace).Delete(context.Background(), p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	})
	return created
}

func TestPodsyncRunsAPIPod(t *testing.T) {
	t.Parallel()
	p := createPod(t, busyboxPod("api-pod", "echo hello from $HOSTNAME; sleep 3600"))
	_, st := waitPod(t, time.Minute, "default/api-pod", "Running and ready", func(_ *podsyncv1.Pod, st corev1.PodStatus) bool {
		return st.Phase == corev1.PodRunning && len(st.ContainerStatuses) == 1 && st.ContainerStatuses[0].Ready
	})
	if _, subnet, err := net.ParseCIDR(stack.Stack().Runtime.PodSubnet); err != nil || !subnet.Contains(net.ParseIP(st.PodIP)) {
		t.Errorf("pod IP %q, want one from the bridge network %s (%v)", st.PodIP, stack.Stack().Runtime.PodSubnet, err)
	}
	ctx := context.Background()
	ctrs := runtimeContainers(ctx, t, string(p.UID))
	if len(ctrs) != 1 {
		t.Fatalf("CRI has %d containers of the pod, want 1", len(ctrs))
	}
	l := ctrs[0].Labels
	if l["io.kubernetes.pod.name"] != "api-pod" || l["io.kubernetes.pod.namespace"] != "default" || l["io.kubernetes.container.name"] != "main" {
		t.Errorf("CRI labels %v: want the kubelet's pod and container labels", l)
	}
	// The log at the kubelet's path: <podLogsDir>/<ns>_<name>_<uid>/<container>/<restart>.log.
	logFile := filepath.Join(stack.Dir(), "nodes", podsyncNode, "pod-logs", "default_api-pod_"+string(p.UID), "main", "0.log")
	stack.WaitFor(t, 10*time.Second, "the container's output in "+logFile, func(context.Context) (bool, string) {
		b, err := os.ReadFile(logFile)
		return strings.Contains(string(b), "hello from api-pod"), fmt.Sprintf("%q %v", b, err)
	})
	// unitletctl shows it.
	out, err := stack.Exec(podsyncNode, []string{"unitletctl", "pods"}).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "api-pod") || !strings.Contains(string(out), "Running") {
		t.Errorf("unitletctl pods: %v\n%s", err, out)
	}
}

func TestPodsyncStaticPodAndMirrorPod(t *testing.T) {
	t.Parallel()
	registerNode(t)
	manifest := filepath.Join(stack.NodeManifestDir(podsyncNode), "static-web.yaml")
	bad := filepath.Join(stack.NodeManifestDir(podsyncNode), "broken.yaml")
	if err := os.WriteFile(manifest, []byte(`apiVersion: v1
kind: Pod
metadata:
  name: static-web
spec:
  containers:
  - name: server
    image: unitlet.local/testserver:1
    imagePullPolicy: Never
    command: [/bin/testserver, serve]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	// A broken manifest next to it is skipped; the good one still runs.
	if err := os.WriteFile(bad, []byte("apiVersion: v1\nkind: Pod\nmetadata: {name: broken}\nspec:\n  containers: [{name: x}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(bad)
	key := "default/static-web-" + podsyncNode
	_, st := waitPod(t, time.Minute, key, "Running", func(_ *podsyncv1.Pod, st corev1.PodStatus) bool {
		return st.Phase == corev1.PodRunning && len(st.ContainerStatuses) == 1 && st.ContainerStatuses[0].Ready
	})
	_ = st
	if _, ok := podsyncPods(context.Background(), t)["default/broken-"+podsyncNode]; ok {
		t.Errorf("podsync runs the broken manifest")
	}
	c := admin(t)
	var mirror *corev1.Pod
	stack.WaitFor(t, 30*time.Second, "the mirror pod of "+key, func(ctx context.Context) (bool, string) {
		m, err := c.CoreV1().Pods("default").Get(ctx, "static-web-"+podsyncNode, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		mirror = m
		_, ok := m.Annotations["kubernetes.io/config.mirror"]
		return ok, fmt.Sprintf("annotations %v", m.Annotations)
	})
	if len(mirror.OwnerReferences) != 1 || mirror.OwnerReferences[0].Kind != "Node" || mirror.OwnerReferences[0].Name != podsyncNode {
		t.Errorf("mirror pod owners %v, want the Node %s", mirror.OwnerReferences, podsyncNode)
	}
	uid := podsyncPods(context.Background(), t)[key].GetUid()

	// Removing the manifest stops the pod and deletes the mirror pod.
	if err := os.Remove(manifest); err != nil {
		t.Fatal(err)
	}
	stack.WaitFor(t, 30*time.Second, "the static pod's containers removed and its mirror pod deleted", func(ctx context.Context) (bool, string) {
		ctrs := runtimeContainers(ctx, t, uid)
		_, err := c.CoreV1().Pods("default").Get(ctx, "static-web-"+podsyncNode, metav1.GetOptions{})
		return len(ctrs) == 0 && apierrors.IsNotFound(err), fmt.Sprintf("%d containers; mirror pod: %v", len(ctrs), err)
	})
}

func TestPodsyncRestartPolicies(t *testing.T) {
	t.Parallel()
	never := busyboxPod("never-fails", "echo bye; exit 3")
	never.Spec.RestartPolicy = corev1.RestartPolicyNever
	createPod(t, never)
	onFailure := busyboxPod("onfailure-succeeds", "exit 0")
	onFailure.Spec.RestartPolicy = corev1.RestartPolicyOnFailure
	createPod(t, onFailure)
	always := busyboxPod("always-crashes", "exit 1")
	createPod(t, always)

	_, st := waitPod(t, time.Minute, "default/never-fails", "Failed", func(_ *podsyncv1.Pod, st corev1.PodStatus) bool { return st.Phase == corev1.PodFailed })
	if term := st.ContainerStatuses[0].State.Terminated; term == nil || term.ExitCode != 3 || st.ContainerStatuses[0].RestartCount != 0 {
		t.Errorf("restartPolicy Never: container status %+v, want terminated with exit code 3 and no restart", st.ContainerStatuses[0])
	}
	waitPod(t, time.Minute, "default/onfailure-succeeds", "Succeeded", func(_ *podsyncv1.Pod, st corev1.PodStatus) bool { return st.Phase == corev1.PodSucceeded })

	// Always: restarted with the kubelet's backoff: at once, then after 10 s, then 20 s.
	_, st = waitPod(t, 90*time.Second, "default/always-crashes", "two restarts and CrashLoopBackOff", func(_ *podsyncv1.Pod, st corev1.PodStatus) bool {
		cs := st.ContainerStatuses
		return len(cs) == 1 && cs[0].RestartCount >= 2 && cs[0].State.Waiting != nil && cs[0].State.Waiting.Reason == "CrashLoopBackOff"
	})
	cs := st.ContainerStatuses[0]
	if cs.LastTerminationState.Terminated == nil || cs.LastTerminationState.Terminated.ExitCode != 1 {
		t.Errorf("lastState %+v, want terminated with exit code 1", cs.LastTerminationState)
	}
	uid := podsyncPods(context.Background(), t)["default/always-crashes"].GetUid()
	insts := runtimeContainers(context.Background(), t, uid)
	t.Logf("restart count %d, %d instances kept by the runtime", cs.RestartCount, len(insts))
	if len(insts) > 2 {
		t.Errorf("the runtime keeps %d instances of a crashing container; podsync keeps the running one and the last dead one", len(insts))
	}
}

func TestPodsyncInitContainersRunInOrder(t *testing.T) {
	t.Parallel()
	p := busyboxPod("with-inits", "sleep 3600")
	p.Spec.InitContainers = []corev1.Container{
		{Name: "first", Image: "unitlet.local/busybox:1", ImagePullPolicy: corev1.PullNever, Command: []string{"sh", "-c", "sleep 1"}},
		{Name: "second", Image: "unitlet.local/busybox:1", ImagePullPolicy: corev1.PullNever, Command: []string{"sh", "-c", "sleep 1"}},
	}
	created := createPod(t, p)
	waitPod(t, time.Minute, "default/with-inits", "Running", func(_ *podsyncv1.Pod, st corev1.PodStatus) bool { return st.Phase == corev1.PodRunning })
	rt, err := stack.CRI()
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	times := map[string][2]int64{}
	for _, c := range runtimeContainers(context.Background(), t, string(created.UID)) {
		s, err := rt.Runtime.ContainerStatus(context.Background(), &runtimeapi.ContainerStatusRequest{ContainerId: c.Id})
		if err != nil {
			t.Fatal(err)
		}
		times[c.Metadata.Name] = [2]int64{s.Status.StartedAt, s.Status.FinishedAt}
	}
	if !(times["first"][1] <= times["second"][0] && times["second"][1] <= times["main"][0]) || times["main"][0] == 0 {
		t.Errorf("containers did not run in order first, second, main: %v", times)
	}
}

func TestPodsyncGracefulDeletion(t *testing.T) {
	// Serial: asserts the deletion's timing.
	// The container ignores SIGTERM, so it runs until the grace period ends.
	p := busyboxPod("graceful", "trap '' TERM; while true; do sleep 1; done")
	p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](6)
	created := createPod(t, p)
	waitPod(t, time.Minute, "default/graceful", "Running", func(_ *podsyncv1.Pod, st corev1.PodStatus) bool { return st.Phase == corev1.PodRunning })
	start := time.Now()
	if err := admin(t).CoreV1().Pods("default").Delete(context.Background(), "graceful", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	stack.WaitFor(t, 30*time.Second, "the container stopped", func(ctx context.Context) (bool, string) {
		for _, c := range runtimeContainers(ctx, t, string(created.UID)) {
			if c.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
				return false, "still running after " + time.Since(start).Round(time.Second).String()
			}
		}
		return true, ""
	})
	took := time.Since(start)
	t.Logf("stopped %s after the delete (grace period 6 s)", took.Round(100*time.Millisecond))
	if took < 5*time.Second || took > 15*time.Second {
		t.Errorf("the container stopped %s after the delete; the grace period is 6 s", took)
	}
	// Terminated, unitlet-status deletes the API object (grace 0, UID precondition) at
	// once: within 5 s of the stop (no sync period, no second grace), which a busy machine
	// running the other suites beside this one stretches by a second or two.
	stopped := time.Now()
	stack.WaitFor(t, 15*time.Second, "the API object deleted", func(ctx context.Context) (bool, string) {
		_, err := admin(t).CoreV1().Pods("default").Get(ctx, "graceful", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	t.Logf("the API object went %s after the stop", time.Since(stopped).Round(100*time.Millisecond))
	if took := time.Since(stopped); took > 5*time.Second {
		t.Errorf("the API object went %s after the container stopped, want within 5 s", took)
	}
}

// TestPodsyncMetrics scrapes podsync's metrics socket (the stack's unix: opt-in) for the
// kubelet's metric names.
func TestPodsyncMetrics(t *testing.T) {
	t.Parallel()
	createPod(t, busyboxPod("metrics-pod", "while true; do sleep 1; done"))
	waitPod(t, time.Minute, "default/metrics-pod", "running", func(_ *podsyncv1.Pod, st corev1.PodStatus) bool { return st.Phase == corev1.PodRunning })
	var body string
	stack.WaitFor(t, 10*time.Second, "podsync's metrics", func(ctx context.Context) (bool, string) {
		code, b, err := stack.ServicePage(ctx, podsyncNode, "podsync", "/metrics")
		if err != nil {
			return false, err.Error()
		}
		body = b
		return code == http.StatusOK && strings.Contains(body, "kubelet_pod_start_duration_seconds_count"), fmt.Sprintf("%d %s", code, body)
	})
	for _, want := range []string{
		"kubelet_running_pods ", "kubelet_running_containers{container_state=\"running\"}",
		"kubelet_pod_start_sli_duration_seconds_count", "kubelet_pod_worker_duration_seconds_count",
		"kubelet_pleg_relist_duration_seconds_count", "unitlet_podsync_pod_workers ",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	// Made by podsync under its shipped unit: only root may connect.
	sock := filepath.Join(stack.NodeSocketDir(podsyncNode), "podsync-metrics.sock")
	if fi, err := os.Stat(sock); err != nil || fi.Mode()&fs.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Errorf("podsync's metrics socket %s: %v %v, want a socket, mode 0600", sock, fi, err)
	}
}

// TestPodsyncCrashLoopBackoffTiming follows a crashing container's starts: the first
// restart comes at once, then after 10 s, then after 20 s (the kubelet's backoff).
func TestPodsyncCrashLoopBackoffTiming(t *testing.T) {
	// Serial: asserts backoff timing within a few seconds.
	createPod(t, busyboxPod("backoff-timing", "exit 1"))
	starts := map[int32]time.Time{}
	deadline := time.Now().Add(90 * time.Second)
	for starts[0].IsZero() || starts[1].IsZero() || starts[2].IsZero() || starts[3].IsZero() {
		if time.Now().After(deadline) {
			t.Fatalf("starts seen within 90 s: %v", starts)
		}
		if p := podsyncPods(context.Background(), t)["default/backoff-timing"]; p != nil {
			if cs := statusOf(p).ContainerStatuses; len(cs) == 1 {
				c := cs[0]
				last := c.LastTerminationState.Terminated
				switch {
				case c.State.Running != nil || c.State.Terminated != nil:
					if c.State.Running != nil {
						starts[c.RestartCount] = c.State.Running.StartedAt.Time
					} else {
						starts[c.RestartCount] = c.State.Terminated.StartedAt.Time
					}
					// lastState is the instance before this one.
					if last != nil && c.RestartCount > 0 {
						starts[c.RestartCount-1] = last.StartedAt.Time
					}
				case last != nil:
					// Waiting in backoff: lastState is the newest instance.
					starts[c.RestartCount] = last.StartedAt.Time
				}
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	gap := func(i int32) time.Duration { return starts[i].Sub(starts[i-1]) }
	t.Logf("gaps between starts: %s, %s, %s", gap(1), gap(2), gap(3))
	// Status times have second precision.
	if gap(1) > 3*time.Second {
		t.Errorf("first restart after %s, want at once", gap(1))
	}
	if gap(2) < 9*time.Second || gap(2) > 14*time.Second {
		t.Errorf("second restart after %s, want 10 s of backoff", gap(2))
	}
	if gap(3) < 19*time.Second || gap(3) > 25*time.Second {
		t.Errorf("third restart after %s, want 20 s of backoff", gap(3))
	}
}

// deleteNow deletes with grace 0: the API object goes at once.
func deleteNow() metav1.DeleteOptions {
	return metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}
}
