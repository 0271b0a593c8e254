package harnesstest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/unitlet/unitlet/integration/harness"
)

// createRuntimeClass makes a RuntimeClass for handler, removed when the test ends.
func createRuntimeClass(t *testing.T, name, handler string, overhead corev1.ResourceList) {
	t.Helper()
	rc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Handler: handler}
	if overhead != nil {
		rc.Overhead = &nodev1.Overhead{PodFixed: overhead}
	}
	classes := admin(t).NodeV1().RuntimeClasses()
	createObject(t, classes.Create, rc, classes.Delete, name)
}

// podSandbox is the pod's one sandbox in the runtime, by the kubelet's labels.
func podSandbox(ctx context.Context, t *testing.T, uid string) *runtimeapi.PodSandboxStatus {
	t.Helper()
	rt := criClient(t)
	sbs, err := rt.Runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"io.kubernetes.pod.uid": uid}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(sbs.Items) != 1 {
		t.Fatalf("the runtime has %d sandboxes of pod %s, want 1", len(sbs.Items), uid)
	}
	st, err := rt.Runtime.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: sbs.Items[0].Id})
	if err != nil {
		t.Fatal(err)
	}
	return st.Status
}

// TestRuntimeClassHandlerAndOverhead: a pod naming a RuntimeClass runs its sandbox on the
// class's handler (the stack containerd's second runc, whose state root is its own), and
// the class's overhead, which the API server's RuntimeClass admission copies into
// spec.overhead, is added to the pod cgroup's limits and shares.
func TestRuntimeClassHandlerAndOverhead(t *testing.T) {
	t.Parallel()
	waitNodeReady(t, 90*time.Second)
	createRuntimeClass(t, "rc-test", harness.TestRuntimeHandler, resources("cpu", "100m", "memory", "32Mi"))
	p := qosPod("rc-pod", corev1.ResourceRequirements{
		Requests: resources("cpu", "200m", "memory", "64Mi"), Limits: resources("cpu", "200m", "memory", "64Mi")})
	p.Spec.RuntimeClassName = ptr.To("rc-test")
	created := createPod(t, p)
	if got := created.Spec.Overhead; got.Cpu().MilliValue() != 100 || got.Memory().Value() != 32<<20 {
		t.Fatalf("spec.overhead of the created pod = %v, want the RuntimeClass's (the API server's RuntimeClass admission)", got)
	}
	pod := apiPodRunningReady(t, "rc-pod", 2*time.Minute)

	ctx := context.Background()
	sb := podSandbox(ctx, t, string(pod.UID))
	if sb.RuntimeHandler != harness.TestRuntimeHandler {
		t.Errorf("the sandbox's runtime handler (CRI PodSandboxStatus) = %q, want %q", sb.RuntimeHandler, harness.TestRuntimeHandler)
	}
	state := filepath.Join(stack.TestRuntimeRoot(), "k8s.io", sb.Id)
	if _, err := os.Stat(state); err != nil {
		t.Errorf("the sandbox's runc state is not under the %s handler's root: %v", harness.TestRuntimeHandler, err)
	}

	// The pod cgroup: the container's 200m and 64Mi plus the overhead's 100m and 32Mi.
	if got := readCgroupInt(t, filepath.Join(podCgroupDir("memory", pod), "memory.limit_in_bytes")); got != 96<<20 {
		t.Errorf("memory.limit_in_bytes = %d, want %d (64Mi + 32Mi overhead)", got, 96<<20)
	}
	if got := readCgroupInt(t, filepath.Join(podCgroupDir("cpu", pod), "cpu.shares")); got != 307 {
		t.Errorf("cpu.shares = %d, want 307 (300m)", got)
	}
	if got := readCgroupInt(t, filepath.Join(podCgroupDir("cpu", pod), "cpu.cfs_quota_us")); got != 30000 {
		t.Errorf("cpu.cfs_quota_us = %d, want 30000 (300m)", got)
	}
}

// TestRuntimeClassMissingOrUnknownHandler: a pod whose RuntimeClass is gone by the time it
// reaches the node, and one whose class names a handler the runtime does not have, stay
// Pending with their containers ContainerCreating and a FailedCreatePodSandBox event
// carrying the cause, as with the kubelet; once the class exists again the pod runs.
func TestRuntimeClassMissingOrUnknownHandler(t *testing.T) {
	t.Parallel()
	waitNodeReady(t, 90*time.Second)
	c := admin(t)
	ctx := context.Background()

	// The API server refuses a pod naming a class that does not exist, so the class goes
	// after the pod is created and before it is bound: another scheduler's pod, bound by
	// hand.
	createRuntimeClass(t, "rc-gone", harness.TestRuntimeHandler, nil)
	gone := busyboxPod("rc-gone-pod", "sleep 3600")
	gone.Spec.NodeName, gone.Spec.SchedulerName = "", "unitlet-test-nobody"
	gone.Spec.RuntimeClassName = ptr.To("rc-gone")
	gone = createPod(t, gone)
	if err := c.NodeV1().RuntimeClasses().Delete(ctx, "rc-gone", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// Until the deletion reaches podsync's cache the pod would run; a moment is plenty.
	time.Sleep(2 * time.Second)
	if err := c.CoreV1().Pods("default").Bind(ctx, &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: gone.Name, UID: gone.UID},
		Target:     corev1.ObjectReference{Kind: "Node", Name: podsyncNode},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("bind %s: %v", gone.Name, err)
	}

	createRuntimeClass(t, "rc-nohandler", "no-such-handler", nil)
	nohandler := busyboxPod("rc-nohandler-pod", "sleep 3600")
	nohandler.Spec.RuntimeClassName = ptr.To("rc-nohandler")
	createPod(t, nohandler)

	// The event's message ends with the runtime's error, whose wording is containerd's:
	// 1.6 says "failed to get sandbox runtime: no runtime for ...", 2.x "unable to get OCI
	// runtime for sandbox <id>: no runtime for ...".
	for _, tc := range []struct{ pod, event, runtimeError string }{
		{"rc-gone-pod", `FailedCreatePodSandBox: Failed to create pod sandbox: runtimeclass.node.k8s.io "rc-gone" not found`, ""},
		{"rc-nohandler-pod", `FailedCreatePodSandBox: Failed to create pod sandbox: rpc error: code = Unknown desc = `, `no runtime for "no-such-handler" is configured`},
	} {
		line := regexp.MustCompile("(?m)^" + regexp.QuoteMeta(tc.event) + "(.*: )?" + regexp.QuoteMeta(tc.runtimeError) + "$")
		stack.WaitFor(t, time.Minute, tc.pod+"'s event "+tc.event+tc.runtimeError, func(ctx context.Context) (bool, string) {
			evs := podEvents(ctx, t, tc.pod)
			return line.MatchString(evs), evs
		})
		stack.WaitFor(t, 30*time.Second, tc.pod+" Pending, ContainerCreating", func(ctx context.Context) (bool, string) {
			p, err := c.CoreV1().Pods("default").Get(ctx, tc.pod, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			b, _ := json.Marshal(p.Status)
			cs := p.Status.ContainerStatuses
			return p.Status.Phase == corev1.PodPending && len(cs) == 1 && cs[0].State.Waiting != nil &&
				cs[0].State.Waiting.Reason == "ContainerCreating", string(b)
		})
	}

	// The class made again: the sandbox is retried (the kubelet's 10 s backoff) and the
	// pod runs on its handler.
	createRuntimeClass(t, "rc-gone", harness.TestRuntimeHandler, nil)
	pod := apiPodRunningReady(t, "rc-gone-pod", time.Minute)
	if sb := podSandbox(ctx, t, string(pod.UID)); sb.RuntimeHandler != harness.TestRuntimeHandler {
		t.Errorf("the sandbox's runtime handler = %q, want %q", sb.RuntimeHandler, harness.TestRuntimeHandler)
	}
}

// TestHostUsersFalse: a pod with hostUsers: false runs in its own user namespace where
// the runtime supports them (containerd 2.x with runc 1.4, the containerd2 stack): its
// /proc/self/uid_map maps 0 to a block of 65536 host IDs from 65536 up, not the identity,
// and it reads and writes its volumes (idmapped mounts). Where the runtime does not
// (containerd 1.6 reports no handlers), the pod ends Failed, UnsupportedPodSpec, the
// message naming the field and the runtime as CRI Version gives it, instead of running in
// the host's user namespace.
func TestHostUsersFalse(t *testing.T) {
	t.Parallel()
	waitNodeReady(t, 90*time.Second)
	ctx := context.Background()
	rt := criClient(t).Runtime
	v, err := rt.Version(ctx, &runtimeapi.VersionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	st, err := rt.Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	supported := false
	for _, h := range st.GetRuntimeHandlers() {
		if h.GetName() == "" {
			supported = h.GetFeatures().GetUserNamespaces()
		}
	}
	if containerd2 := stack.Stack().Runtime.Version == harness.Containerd2; supported != containerd2 {
		t.Fatalf("the runtime (%s %s) reports user namespace support %t: want it on the containerd 2.x stack only", v.RuntimeName, v.RuntimeVersion, supported)
	}
	p := busyboxPod("userns-pod", "echo written-in-the-userns > /data/f; id -u > /data/id; exec sleep 3600")
	p.Spec.HostUsers = ptr.To(false)
	p.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
	createPod(t, p)
	if !supported {
		want := "Pod was rejected: Failed to admit pod: spec.hostUsers: user namespaces (the container runtime, " + v.RuntimeName + " " + v.RuntimeVersion +
			", reports no support for them) are not supported by this node (unitlet)"
		stack.WaitFor(t, time.Minute, "userns-pod Failed, UnsupportedPodSpec, in the API", func(ctx context.Context) (bool, string) {
			got, err := admin(t).CoreV1().Pods("default").Get(ctx, "userns-pod", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			st := got.Status
			return st.Phase == corev1.PodFailed && st.Reason == "UnsupportedPodSpec" && st.Message == want,
				fmt.Sprintf("phase %s reason %q message %q", st.Phase, st.Reason, st.Message)
		})
		return
	}
	apiPodRunningReady(t, "userns-pod", time.Minute)
	fields := strings.Fields(mustInPod(t, "userns-pod", "cat", "/proc/self/uid_map"))
	if len(fields) != 3 || fields[0] != "0" || fields[1] == "0" || fields[2] != "65536" {
		t.Errorf("uid_map %v: want 0 mapped to a block of 65536 host IDs", fields)
	} else if host, _ := strconv.Atoi(fields[1]); host < 65536 || host%65536 != 0 {
		t.Errorf("uid_map %v: want a block at a multiple of 65536 from 65536 up", fields)
	}
	if out := mustInPod(t, "userns-pod", "sh", "-c", "cat /data/f /data/id; touch /data/g && echo touched"); out != "written-in-the-userns\n0\ntouched\n" {
		t.Errorf("the emptyDir from inside the user namespace: %q", out)
	}
}
