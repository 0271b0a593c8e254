package harnesstest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	podsyncv1 "github.com/unitlet/unitlet/proto/unitlet/podsync/v1"
)

// Labels and taints these tests put on podsyncNode in the API, and take off again.
const (
	testZoneLabel = "unitlet.test/zone"
	testTaintKey  = "unitlet.test/evict"
)

// changeNode changes podsyncNode in the API server (retrying on conflicts with
// unitlet-status's writes).
func changeNode(t *testing.T, change func(n *corev1.Node)) {
	t.Helper()
	nodes := admin(t).CoreV1().Nodes()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := nodes.Get(context.Background(), podsyncNode, metav1.GetOptions{})
		if err != nil {
			return err
		}
		change(n)
		_, err = nodes.Update(context.Background(), n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("update node %s: %v", podsyncNode, err)
	}
}

// labelNode sets a label on podsyncNode in the API until the test ends.
func labelNode(t *testing.T, key, value string) {
	t.Helper()
	changeNode(t, func(n *corev1.Node) {
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		n.Labels[key] = value
	})
	t.Cleanup(func() { changeNode(t, func(n *corev1.Node) { delete(n.Labels, key) }) })
}

// taintNode adds a taint to podsyncNode in the API until the test ends.
func taintNode(t *testing.T, taint corev1.Taint) {
	t.Helper()
	changeNode(t, func(n *corev1.Node) { n.Spec.Taints = append(n.Spec.Taints, taint) })
	t.Cleanup(func() {
		changeNode(t, func(n *corev1.Node) {
			n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(x corev1.Taint) bool { return x.Key == taint.Key })
		})
	})
}

// scheduledPod is a busybox pod the scheduler places (no spec.nodeName).
func scheduledPod(name string) *corev1.Pod {
	p := busyboxPod(name, "sleep 3600")
	p.Spec.NodeName = ""
	return p
}

// rejectedWith waits until the API shows the pod Failed by admission with the kubelet's
// reason and message, and checks that no container of it was created.
func rejectedWith(t *testing.T, created *corev1.Pod, reason, message string) {
	t.Helper()
	got := apiPodUntil(t, created.Name, "Failed by admission", 2*time.Minute, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
	if want := "Pod was rejected: " + message; got.Status.Reason != reason || got.Status.Message != want {
		t.Errorf("%s: status %s %q, want %s %q", created.Name, got.Status.Reason, got.Status.Message, reason, want)
	}
	noContainers(t, created, "a pod rejected at admission")
}

// containerOf waits until podsync runs the pod and gives its one container's ID.
func containerOf(t *testing.T, name string) string {
	t.Helper()
	_, st := waitPod(t, 2*time.Minute, "default/"+name, "running", func(_ *podsyncv1.Pod, st corev1.PodStatus) bool {
		return st.Phase == corev1.PodRunning && len(st.ContainerStatuses) == 1 && st.ContainerStatuses[0].ContainerID != ""
	})
	return st.ContainerStatuses[0].ContainerID
}

// stillRuns checks that podsync runs the pod's same container, never restarted.
func stillRuns(t *testing.T, name, id, after string) {
	t.Helper()
	_, st := waitPod(t, time.Second, "default/"+name, "reported", func(*podsyncv1.Pod, corev1.PodStatus) bool { return true })
	cs := st.ContainerStatuses
	if st.Phase != corev1.PodRunning || len(cs) != 1 || cs[0].ContainerID != id || cs[0].RestartCount != 0 || cs[0].State.Running == nil {
		t.Errorf("%s after %s: phase %s %+v, want container %s running, never restarted", name, after, st.Phase, cs, id)
	}
}

// TestNodeAdmissionUsesTheAPIsNodeLabels: a label added to the Node in the API lets pods
// selecting it run (nodeSelector, required node affinity), after a podsync restart too;
// a pod sent to the node selecting a label it lacks is rejected as the kubelet does.
func TestNodeAdmissionUsesTheAPIsNodeLabels(t *testing.T) {
	// Serial: labels the Node; SIGKILLs unitlet-podsync.
	waitNodeReady(t, 90*time.Second)
	labelNode(t, testZoneLabel, "a")

	bySelector := scheduledPod("zone-selector")
	bySelector.Spec.NodeSelector = map[string]string{testZoneLabel: "a"}
	createPod(t, bySelector)
	byAffinity := scheduledPod("zone-affinity")
	byAffinity.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: testZoneLabel, Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}},
		}}},
	}}
	createPod(t, byAffinity)
	selectorID, affinityID := containerOf(t, bySelector.Name), containerOf(t, byAffinity.Name)

	// Sent straight to the node, past the scheduler: admission turns it away.
	elsewhere := busyboxPod("zone-elsewhere", "sleep 3600")
	elsewhere.Spec.NodeSelector = map[string]string{testZoneLabel: "b"}
	rejectedWith(t, createPod(t, elsewhere), "NodeAffinity", "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector")
	// The log names the view of the node it was judged against.
	stack.WaitFor(t, 10*time.Second, "podsync's log of the rejection against the API's Node", func(ctx context.Context) (bool, string) {
		out, err := stack.Exec(podsyncNode, []string{"journalctl", "-u", "unitlet-podsync", "-o", "cat", "--no-pager"}).CombinedOutput()
		for _, l := range strings.Split(string(out), "\n") {
			if strings.Contains(l, "pod rejected by admission") && strings.Contains(l, elsewhere.Name) {
				return strings.Contains(l, "node=api") || strings.Contains(l, `"node":"api"`), l
			}
		}
		return false, fmt.Sprintf("no rejection of %s in the log (%v)", elsewhere.Name, err)
	})

	// Restarted, podsync readmits its pods against the API's Node, not its local view
	// (which has no such label), so it keeps them: a rejected pod would be Failed.
	killPodsync(t)
	waitPod(t, time.Minute, "default/"+bySelector.Name, "reported again after the restart", func(_ *podsyncv1.Pod, st corev1.PodStatus) bool {
		return st.Phase == corev1.PodRunning
	})
	waitPod(t, time.Minute, "default/"+byAffinity.Name, "reported again after the restart", func(_ *podsyncv1.Pod, st corev1.PodStatus) bool {
		return st.Phase == corev1.PodRunning
	})
	stillRuns(t, bySelector.Name, selectorID, "podsync's restart")
	stillRuns(t, byAffinity.Name, affinityID, "podsync's restart")
}

// TestNodeAdmissionNoExecuteTaints: a NoExecute taint added in the API makes the
// controller-manager's taint eviction controller delete the pods that do not tolerate it,
// and podsync stops their containers; a pod that tolerates it keeps running; a pod sent to
// the tainted node without the toleration is rejected as the kubelet does.
func TestNodeAdmissionNoExecuteTaints(t *testing.T) {
	// Serial: taints the Node NoExecute; SIGSTOPs the controller-manager.
	waitNodeReady(t, 90*time.Second)
	evicted := createPod(t, busyboxPod("taint-evicted", "sleep 3600"))
	tolerant := busyboxPod("taint-tolerant", "sleep 3600")
	tolerant.Spec.Tolerations = []corev1.Toleration{{Key: testTaintKey, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}}
	createPod(t, tolerant)
	evictedID, tolerantID := containerOf(t, evicted.Name), containerOf(t, tolerant.Name)

	taintNode(t, corev1.Taint{Key: testTaintKey, Value: "yes", Effect: corev1.TaintEffectNoExecute})
	stack.WaitFor(t, 2*time.Minute, evicted.Name+" deleted by the taint eviction controller", func(ctx context.Context) (bool, string) {
		p, err := admin(t).CoreV1().Pods("default").Get(ctx, evicted.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, ""
		}
		if err != nil {
			return false, err.Error()
		}
		return false, fmt.Sprintf("phase %s, deletionTimestamp %v", p.Status.Phase, p.DeletionTimestamp)
	})
	stack.WaitFor(t, time.Minute, evicted.Name+" forgotten by podsync", func(ctx context.Context) (bool, string) {
		_, ok := podsyncPods(ctx, t)["default/"+evicted.Name]
		return !ok, "podsync still reports it"
	})
	for _, c := range runtimeContainers(context.Background(), t, string(evicted.UID)) {
		if c.State == runtimeapi.ContainerState_CONTAINER_RUNNING || c.State == runtimeapi.ContainerState_CONTAINER_CREATED {
			t.Errorf("evicted pod's container %s (was %s) is %s, want it stopped", c.Id, evictedID, c.State)
		}
	}
	stillRuns(t, tolerant.Name, tolerantID, "the NoExecute taint")

	// Sent straight to the tainted node without the toleration. The controller-manager is
	// paused meanwhile, or its taint eviction controller could delete the pod before
	// podsync sees it, and a pod being deleted is not admitted at all.
	cm := stackPID(t, "kube-controller-manager")
	if err := syscall.Kill(cm, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = syscall.Kill(cm, syscall.SIGCONT) }()
	rejectedWith(t, createPod(t, busyboxPod("taint-rejected", "sleep 3600")),
		"TaintToleration", "Predicate TaintToleration failed: node(s) had taints that the pod didn't tolerate")
}

// stackPID is the pid of one of the stack's control plane processes.
func stackPID(t *testing.T, name string) int {
	t.Helper()
	var names []string
	for _, c := range stack.Status() {
		if c.Name == name && c.PID != 0 {
			return c.PID
		}
		names = append(names, c.Name)
	}
	t.Fatalf("no %s in the stack (%s)", name, strings.Join(names, ", "))
	return 0
}

// TestNodeAdmissionKeepsTheLastNodeWhileTheAPIServerIsDown: with the API server
// unreachable, podsync admits a static pod selecting a label of the Node in the API
// against the last Node it saw, not its local view, which lacks the label.
func TestNodeAdmissionKeepsTheLastNodeWhileTheAPIServerIsDown(t *testing.T) {
	// Serial: labels the Node; SIGSTOPs the API server.
	waitNodeReady(t, 90*time.Second)
	labelNode(t, testZoneLabel, "a")
	// podsync has seen the label once a pod selecting it runs. Sent straight to the node, a
	// pod can reach podsync before the Node's update does, and be rejected for good, as the
	// kubelet rejects it: then another pod, until one runs.
	for attempt := 1; ; attempt++ {
		seen := busyboxPod(fmt.Sprintf("zone-seen-%d", attempt), "sleep 3600")
		seen.Spec.NodeSelector = map[string]string{testZoneLabel: "a"}
		createPod(t, seen)
		_, st := waitPod(t, 2*time.Minute, "default/"+seen.Name, "running or rejected", func(_ *podsyncv1.Pod, st corev1.PodStatus) bool {
			return st.Phase == corev1.PodFailed || (st.Phase == corev1.PodRunning && len(st.ContainerStatuses) == 1 && st.ContainerStatuses[0].ContainerID != "")
		})
		if st.Phase == corev1.PodRunning {
			break
		}
		if st.Reason != "NodeAffinity" || attempt == 5 {
			t.Fatalf("%s: %s %s: %s, want it running (attempt %d)", seen.Name, st.Phase, st.Reason, st.Message, attempt)
		}
		t.Logf("%s rejected before podsync saw the Node's new label (%s); another", seen.Name, st.Message)
		time.Sleep(time.Second)
	}

	// Stopped, not killed: its connections hang as they do when the server is unreachable.
	api := stackPID(t, "kube-apiserver")
	if err := syscall.Kill(api, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = syscall.Kill(api, syscall.SIGCONT) }()
	manifest := filepath.Join(stack.NodeManifestDir(podsyncNode), "zone-static.yaml")
	if err := os.WriteFile(manifest, []byte(`apiVersion: v1
kind: Pod
metadata:
  name: zone-static
spec:
  nodeSelector: {"`+testZoneLabel+`": a}
  terminationGracePeriodSeconds: 2
  containers:
  - name: main
    image: unitlet.local/busybox:1
    imagePullPolicy: Never
    command: [sleep, "3600"]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(manifest) })
	containerOf(t, "zone-static-"+podsyncNode)
}
