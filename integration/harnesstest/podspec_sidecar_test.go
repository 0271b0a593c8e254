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
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"
)

// waitAPIPod waits until the pod in the API server (what kubectl shows) satisfies cond.
func waitAPIPod(t *testing.T, within time.Duration, name, what string, cond func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	var last *corev1.Pod
	stack.WaitFor(t, within, name+": "+what, func(ctx context.Context) (bool, string) {
		p, err := admin(t).CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		last = p
		b, _ := json.MarshalIndent(p.Status, "", "  ")
		return cond(p), string(b)
	})
	return last
}

func sidecar(name, script string) corev1.Container {
	return corev1.Container{
		Name: name, Image: "unitlet.local/busybox:1", ImagePullPolicy: corev1.PullNever,
		Command: []string{"sh", "-c", script}, RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
	}
}

func findStatus(list []corev1.ContainerStatus, name string) corev1.ContainerStatus {
	for _, cs := range list {
		if cs.Name == name {
			return cs
		}
	}
	return corev1.ContainerStatus{}
}

// criTimes are the CRI start and finish times (ns) of each container of the pod, by name.
func criTimes(ctx context.Context, t *testing.T, uid types.UID) map[string][2]int64 {
	t.Helper()
	rt, err := stack.CRI()
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	out := map[string][2]int64{}
	for _, c := range runtimeContainers(ctx, t, string(uid)) {
		s, err := rt.Runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: c.Id})
		if err != nil {
			t.Fatal(err)
		}
		out[c.Metadata.Name] = [2]int64{s.Status.StartedAt, s.Status.FinishedAt}
	}
	return out
}

// TestSidecarStartupGatesTheAppAndCompletesStopped: a native sidecar whose startupProbe
// passes after 4 s holds the app container back until then; it is reported in
// initContainerStatuses, started and ready; the pod (restartPolicy Never) completes
// Succeeded once the app exits, with the sidecar stopped after it.
func TestSidecarStartupGatesTheAppAndCompletesStopped(t *testing.T) {
	t.Parallel()
	p := busyboxPod("sidecar-gate", "sleep 6")
	p.Spec.RestartPolicy = corev1.RestartPolicyNever
	sc := sidecar("proxy", "sleep 4; touch /tmp/up; trap 'exit 0' TERM; while true; do sleep 1; done")
	sc.StartupProbe = &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"test", "-f", "/tmp/up"}}},
		PeriodSeconds: 1, FailureThreshold: 30,
	}
	p.Spec.InitContainers = []corev1.Container{sc}
	created := createPod(t, p)

	running := waitAPIPod(t, time.Minute, "sidecar-gate", "Running with the sidecar started", func(p *corev1.Pod) bool {
		cs := findStatus(p.Status.InitContainerStatuses, "proxy")
		return p.Status.Phase == corev1.PodRunning && cs.State.Running != nil && cs.Started != nil && *cs.Started && cs.Ready
	})
	if len(running.Status.InitContainerStatuses) != 1 || len(running.Status.ContainerStatuses) != 1 {
		t.Errorf("statuses: init %d, app %d; want the sidecar among the init containers", len(running.Status.InitContainerStatuses), len(running.Status.ContainerStatuses))
	}
	done := waitAPIPod(t, time.Minute, "sidecar-gate", "Succeeded", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded })
	if cs := findStatus(done.Status.InitContainerStatuses, "proxy"); cs.State.Terminated == nil || cs.RestartCount != 0 {
		t.Errorf("the sidecar after the pod completed: %+v, want terminated, never restarted", cs)
	}
	times := criTimes(context.Background(), t, created.UID)
	proxy, main := times["proxy"], times["main"]
	if gap := time.Duration(main[0] - proxy[0]); gap < 3500*time.Millisecond {
		t.Errorf("the app started %s after the sidecar; its startupProbe passes only after 4 s", gap)
	}
	if proxy[1] < main[1] {
		t.Errorf("the sidecar finished %s before the app", time.Duration(main[1]-proxy[1]))
	}
	t.Logf("app started %s after the sidecar; sidecar stopped %s after the app", time.Duration(main[0]-proxy[0]).Round(time.Millisecond), time.Duration(proxy[1]-main[1]).Round(time.Millisecond))
}

// TestSidecarRestartsUnderNeverAndStopsAfterTheApp: a sidecar that exits is restarted
// even with restartPolicy Never (the app is not); on deletion the app, which takes 3 s to
// stop, stops first and the sidecars after it, the later one first.
func TestSidecarRestartsUnderNeverAndStopsAfterTheApp(t *testing.T) {
	t.Parallel()
	p := busyboxPod("sidecar-order", "trap 'sleep 3; exit 0' TERM; while true; do sleep 1; done")
	p.Spec.RestartPolicy = corev1.RestartPolicyNever
	p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](20)
	p.Spec.InitContainers = []corev1.Container{
		sidecar("first", "trap 'exit 0' TERM; while true; do sleep 1; done"),
		sidecar("flaky", "sleep 2; exit 1"), // restarted with the crash-loop backoff
	}
	created := createPod(t, p)
	restarted := waitAPIPod(t, 90*time.Second, "sidecar-order", "the flaky sidecar restarted", func(p *corev1.Pod) bool {
		return findStatus(p.Status.InitContainerStatuses, "flaky").RestartCount >= 1
	})
	if cs := findStatus(restarted.Status.ContainerStatuses, "main"); cs.RestartCount != 0 || restarted.Status.Phase != corev1.PodRunning {
		t.Errorf("phase %s, app restarts %d; want Running and the app untouched", restarted.Status.Phase, cs.RestartCount)
	}
	start := time.Now()
	if err := admin(t).CoreV1().Pods("default").Delete(context.Background(), "sidecar-order", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	stopped := map[string]time.Duration{}
	stack.WaitFor(t, 40*time.Second, "main and first stopped", func(ctx context.Context) (bool, string) {
		listed := map[string]bool{}
		for _, c := range runtimeContainers(ctx, t, string(created.UID)) {
			listed[c.Metadata.Name] = listed[c.Metadata.Name] || c.State == runtimeapi.ContainerState_CONTAINER_RUNNING
		}
		// Stopped: no running instance (a removed container counts as stopped too).
		for _, name := range []string{"main", "first"} {
			if _, seen := stopped[name]; !seen && !listed[name] {
				stopped[name] = time.Since(start)
			}
		}
		_, a := stopped["main"]
		_, b := stopped["first"]
		return a && b, fmt.Sprint(stopped)
	})
	t.Logf("stopped after the delete: %v", stopped)
	if stopped["first"] < stopped["main"] {
		t.Errorf("the sidecar stopped %s after the delete, before the app (%s)", stopped["first"], stopped["main"])
	}
	if stopped["main"] < 2500*time.Millisecond {
		t.Errorf("the app stopped %s after the delete; it takes 3 s on SIGTERM", stopped["main"])
	}
}

// TestProbeDetails: a liveness kill takes the probe's terminationGracePeriodSeconds (2 s,
// against the pod's 60) with the kubelet's events; readiness is probed the moment the
// startup probe passes (its own period is 60 s); an HTTP redirect to another host is a
// success with a ProbeWarning event.
func TestProbeDetails(t *testing.T) {
	t.Parallel()
	t.Run("liveness kill with the probe's grace period", func(t *testing.T) {
		p := busyboxPod("probe-grace", "trap '' TERM; while true; do sleep 1; done")
		p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](60)
		p.Spec.Containers[0].LivenessProbe = &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"test", "-f", "/tmp/missing"}}},
			PeriodSeconds: 1, FailureThreshold: 1, InitialDelaySeconds: 1, TimeoutSeconds: 1,
			TerminationGracePeriodSeconds: ptr.To[int64](2),
		}
		createPod(t, p)
		restarted := waitAPIPod(t, 2*time.Minute, "probe-grace", "restarted", func(p *corev1.Pod) bool {
			return findStatus(p.Status.ContainerStatuses, "main").RestartCount >= 1
		})
		// The kill itself: from the Killing event to the killed instance's end, which
		// ignores SIGTERM, so it ends when the grace runs out (2 s; 60 s if the pod's were
		// used). Both are API timestamps, whole seconds, and load on the machine delays
		// neither by much, where the time from creation to the restart varies with it.
		term := findStatus(restarted.Status.ContainerStatuses, "main").LastTerminationState.Terminated
		evList, err := admin(t).CoreV1().Events("default").List(context.Background(), metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("involvedObject.name", "probe-grace").String()})
		if err != nil {
			t.Fatal(err)
		}
		var killing time.Time
		for _, e := range evList.Items {
			at := e.FirstTimestamp.Time
			if at.IsZero() {
				at = e.EventTime.Time
			}
			if e.Reason == "Killing" && (killing.IsZero() || at.Before(killing)) {
				killing = at
			}
		}
		switch {
		case term == nil:
			t.Errorf("restarted, but no last termination state: %+v", restarted.Status.ContainerStatuses)
		case killing.IsZero():
			t.Errorf("no Killing event")
		default:
			if took := term.FinishedAt.Sub(killing); took > 15*time.Second {
				t.Errorf("the killed instance ended %s after the Killing event; the liveness kill's grace is 2 s, not the pod's 60 s", took)
			} else {
				t.Logf("the killed instance ended %s after the Killing event", took)
			}
		}
		evs := podEvents(context.Background(), t, "probe-grace")
		for _, want := range []string{"Unhealthy: Liveness probe failed: ", "Killing: Container main failed liveness probe, will be restarted"} {
			if !strings.Contains(evs, want) {
				t.Errorf("events lack %q:\n%s", want, evs)
			}
		}
	})
	t.Run("readiness right after startup", func(t *testing.T) {
		p := testServerPod("probe-ready-fast")
		c := &p.Spec.Containers[0]
		c.StartupProbe = httpProbe(1, 30)
		c.ReadinessProbe = httpProbe(60, 3)
		created := createPod(t, p)
		ready := waitAPIPod(t, 30*time.Second, "probe-ready-fast", "Ready", func(p *corev1.Pod) bool {
			return conditionIs(p.Status, corev1.PodReady, corev1.ConditionTrue)
		})
		var readyAt time.Time
		for _, cond := range ready.Status.Conditions {
			if cond.Type == corev1.PodReady {
				readyAt = cond.LastTransitionTime.Time
			}
		}
		if d := readyAt.Sub(created.CreationTimestamp.Time); d > 20*time.Second {
			t.Errorf("Ready %s after creation; readiness must be probed once startup passed, not a period (60 s) later", d)
		}
	})
	t.Run("redirect to another host", func(t *testing.T) {
		p := testServerPod("probe-redirect")
		p.Spec.Containers[0].ReadinessProbe = &corev1.Probe{
			ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Path: "/redirect?to=http://192.0.2.1:8080/elsewhere", Port: intstr.FromString("http"),
			}},
			PeriodSeconds: 1, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 3,
		}
		createPod(t, p)
		waitAPIPod(t, 30*time.Second, "probe-redirect", "Ready", func(p *corev1.Pod) bool {
			return conditionIs(p.Status, corev1.PodReady, corev1.ConditionTrue)
		})
		stack.WaitFor(t, 20*time.Second, "a ProbeWarning event", func(ctx context.Context) (bool, string) {
			evs := podEvents(ctx, t, "probe-redirect")
			return strings.Contains(evs, "ProbeWarning: Readiness probe warning: Probe terminated redirects, Response body: "), evs
		})
	})
	t.Run("no liveness while the pod terminates", func(t *testing.T) {
		p := busyboxPod("probe-terminating", "touch /tmp/alive; while true; do sleep 1; done")
		p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](20)
		c := &p.Spec.Containers[0]
		c.LivenessProbe = &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"test", "-f", "/tmp/alive"}}},
			PeriodSeconds: 1, FailureThreshold: 1, InitialDelaySeconds: 2, TimeoutSeconds: 1,
		}
		// The preStop hook makes the liveness probe fail, then keeps the pod terminating.
		c.Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"sh", "-c", "rm /tmp/alive; sleep 6"}}}}
		createPod(t, p)
		waitAPIPod(t, time.Minute, "probe-terminating", "Running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
		time.Sleep(3 * time.Second) // past the initial delay: liveness passes
		if err := admin(t).CoreV1().Pods("default").Delete(context.Background(), "probe-terminating", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(8 * time.Second) // through the preStop hook
		if evs := podEvents(context.Background(), t, "probe-terminating"); strings.Contains(evs, "Liveness probe failed") {
			t.Errorf("the liveness probe ran on while the pod terminated:\n%s", evs)
		}
	})
}

// TestActiveDeadlineSeconds: set on a running pod (the API allows setting it), the pod
// ends Failed with the kubelet's DeadlineExceeded reason, message and event.
func TestActiveDeadlineSeconds(t *testing.T) {
	t.Parallel()
	createPod(t, busyboxPod("deadline", "sleep 3600"))
	waitAPIPod(t, time.Minute, "deadline", "Running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	patch := []byte(`{"spec":{"activeDeadlineSeconds":5}}`)
	if _, err := admin(t).CoreV1().Pods("default").Patch(context.Background(), "deadline", types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	failed := waitAPIPod(t, time.Minute, "deadline", "Failed", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
	if failed.Status.Reason != "DeadlineExceeded" || failed.Status.Message != "Pod was active on the node longer than the specified deadline" {
		t.Errorf("reason %q message %q, want the kubelet's DeadlineExceeded", failed.Status.Reason, failed.Status.Message)
	}
	if cs := findStatus(failed.Status.ContainerStatuses, "main"); cs.State.Terminated == nil {
		t.Errorf("container %+v, want terminated", cs.State)
	}
	if evs := podEvents(context.Background(), t, "deadline"); !strings.Contains(evs, "DeadlineExceeded: Pod was active on the node longer than the specified deadline") {
		t.Errorf("no DeadlineExceeded event:\n%s", evs)
	}
}
