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
	"k8s.io/utils/ptr"

	"github.com/unitlet/unitlet/integration/harness"
)

// apiPodUntil waits until the API server's copy of the pod satisfies cond (the status
// unitlet-status wrote) and returns it.
func apiPodUntil(t *testing.T, name, what string, within time.Duration, cond func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	stack.WaitFor(t, within, name+": "+what, func(ctx context.Context) (bool, string) {
		p, err := admin(t).CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		pod = p
		b, _ := json.Marshal(p.Status)
		return cond(p), string(b)
	})
	return pod
}

// noContainers fails the test when the runtime has containers of the pod.
func noContainers(t *testing.T, pod *corev1.Pod, what string) {
	t.Helper()
	if ctrs := runtimeContainers(context.Background(), t, string(pod.UID)); len(ctrs) != 0 {
		t.Errorf("containers %v created for %s", ctrs, what)
	}
}

// runsAndSays waits until the pod is Running and Ready in the API and checks what a
// command prints in it.
func runsAndSays(t *testing.T, pod, want string, cmd ...string) {
	t.Helper()
	apiPodRunningReady(t, pod, 2*time.Minute)
	if out := strings.TrimSpace(mustInPod(t, pod, cmd...)); out != want {
		t.Errorf("%s: %v printed %q, want %q", pod, cmd, out, want)
	}
}

func terminated(p *corev1.Pod, container string) *corev1.ContainerStateTerminated {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == container {
			return cs.State.Terminated
		}
	}
	return nil
}

// TestPodSpecTerminationMessages: FallbackToLogsOnError takes the last 80 lines of the log
// of a failed container; a message file is read from its end (the last 4 KiB), and the
// pod's 12 KiB are shared by its four containers (3 KiB each), in the API server's status.
func TestPodSpecTerminationMessages(t *testing.T) {
	t.Parallel()
	waitNodeReady(t, 90*time.Second)
	p := busyboxPod("termmsg", "")
	p.Spec.RestartPolicy = corev1.RestartPolicyNever
	base := p.Spec.Containers[0]
	container := func(name, script string) corev1.Container {
		c := base
		c.Name, c.Command = name, []string{"sh", "-c", script}
		return c
	}
	// 1000 'A' then 4000 'B': the file's last 4 KiB are 96 'A' and 4000 'B', cut to the
	// pod's share of 3072 bytes.
	repeat := func(n int, s string) string {
		return fmt.Sprintf("i=0; while [ $i -lt %d ]; do printf %s; i=$((i+1)); done", n, s)
	}
	logs := container("logs", `i=0; while [ $i -lt 100 ]; do echo "line $i"; i=$((i+1)); done; exit 3`)
	logs.TerminationMessagePolicy = corev1.TerminationMessageFallbackToLogsOnError
	p.Spec.Containers = []corev1.Container{
		logs,
		container("file", "{ "+repeat(1000, "A")+"; "+repeat(4000, "B")+"; } > /dev/termination-log"),
		container("two", "true"),
		container("three", "true"),
	}
	createPod(t, p)
	got := apiPodUntil(t, "termmsg", "Failed with every container terminated", 2*time.Minute, func(p *corev1.Pod) bool {
		for _, c := range []string{"logs", "file", "two", "three"} {
			if terminated(p, c) == nil {
				return false
			}
		}
		return p.Status.Phase == corev1.PodFailed
	})
	var want strings.Builder
	for i := 20; i < 100; i++ {
		fmt.Fprintf(&want, "line %d\n", i)
	}
	if msg := terminated(got, "logs").Message; msg != want.String() {
		t.Errorf("logs: message %q, want the last 80 lines, %q", msg, want.String())
	}
	if msg, want := terminated(got, "file").Message, strings.Repeat("A", 96)+strings.Repeat("B", 2976); msg != want {
		t.Errorf("file: message of %d bytes starting %q, want the file's last 4096 bytes cut to 3072 (96 A, 2976 B)", len(msg), msg[:min(len(msg), 100)])
	}
}

// TestPodSpecRunAsNonRoot: runAsNonRoot without runAsUser refuses an image that runs as
// root with the kubelet's waiting reason, message and event, and runs one whose user is
// a non-zero uid.
func TestPodSpecRunAsNonRoot(t *testing.T) {
	t.Parallel()
	waitNodeReady(t, 90*time.Second)
	refused := busyboxPod("nonroot-refused", "sleep 3600")
	refused.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true)}
	created := createPod(t, refused)
	runs := busyboxPod("nonroot-runs", "sleep 3600")
	runs.Spec.Containers[0].Image = harness.NonRootImage
	runs.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{RunAsNonRoot: ptr.To(true)}
	createPod(t, runs)

	wantMsg := fmt.Sprintf("container has runAsNonRoot and image will run as root (pod: %q, container: main)", "nonroot-refused_default("+string(created.UID)+")")
	apiPodUntil(t, "nonroot-refused", "waiting in CreateContainerConfigError", 2*time.Minute, func(p *corev1.Pod) bool {
		for _, cs := range p.Status.ContainerStatuses {
			if w := cs.State.Waiting; w != nil && w.Reason == "CreateContainerConfigError" {
				if w.Message != wantMsg {
					t.Errorf("waiting message %q, want %q", w.Message, wantMsg)
				}
				return true
			}
		}
		return false
	})
	stack.WaitFor(t, time.Minute, "a Failed event with the message", func(ctx context.Context) (bool, string) {
		evs := podEvents(ctx, t, "nonroot-refused")
		return strings.Contains(evs, "Failed: Error: "+wantMsg), evs
	})
	noContainers(t, created, "a root image under runAsNonRoot")
	runsAndSays(t, "nonroot-runs", "65534", "id", "-u")
}

// TestPodSpecSysctls: an unsafe sysctl the node does not allow rejects the pod at
// admission (Failed, SysctlForbidden, the kubelet's message); a safe one is set in the
// pod's network namespace.
func TestPodSpecSysctls(t *testing.T) {
	t.Parallel()
	waitNodeReady(t, 90*time.Second)
	unsafe := busyboxPod("sysctl-unsafe", "sleep 3600")
	unsafe.Spec.SecurityContext = &corev1.PodSecurityContext{Sysctls: []corev1.Sysctl{{Name: "net.core.somaxconn", Value: "1024"}}}
	created := createPod(t, unsafe)
	safe := busyboxPod("sysctl-safe", "sleep 3600")
	safe.Spec.SecurityContext = &corev1.PodSecurityContext{Sysctls: []corev1.Sysctl{{Name: "net.ipv4.ip_unprivileged_port_start", Value: "80"}}}
	createPod(t, safe)

	got := apiPodUntil(t, "sysctl-unsafe", "Failed", 2*time.Minute, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
	if want := `Pod was rejected: forbidden sysctl: "net.core.somaxconn" not allowlisted`; got.Status.Reason != "SysctlForbidden" || got.Status.Message != want {
		t.Errorf("status %s %q, want SysctlForbidden %q", got.Status.Reason, got.Status.Message, want)
	}
	noContainers(t, created, "a pod rejected at admission")
	runsAndSays(t, "sysctl-safe", "80", "cat", "/proc/sys/net/ipv4/ip_unprivileged_port_start")
}

// TestPodSpecFSGroup: with fsGroup 2000 and runAsUser 1000 an emptyDir is the group's and
// set-group-ID, so files a non-root and a root container create in it, directly or
// through a subPath, belong to the group; a configMap volume is the group's too.
func TestPodSpecFSGroup(t *testing.T) {
	t.Parallel()
	waitNodeReady(t, 90*time.Second)
	c := admin(t)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "fsgroup-cm", Namespace: "default"}, Data: map[string]string{"k": "v"}}
	createObject(t, c.CoreV1().ConfigMaps("default").Create, cm, c.CoreV1().ConfigMaps("default").Delete, cm.Name)
	p := busyboxPod("fsgroup", "sleep 3600")
	p.Spec.SecurityContext = &corev1.PodSecurityContext{FSGroup: ptr.To[int64](2000), RunAsUser: ptr.To[int64](1000)}
	p.Spec.Volumes = []corev1.Volume{
		{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: "cm", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: cm.Name}}}},
	}
	mounts := []corev1.VolumeMount{
		{Name: "scratch", MountPath: "/scratch"},
		{Name: "scratch", MountPath: "/sub", SubPath: "nested/dir"},
		{Name: "cm", MountPath: "/cm"},
	}
	p.Spec.Containers[0].VolumeMounts = mounts
	root := p.Spec.Containers[0]
	root.Name, root.SecurityContext = "root", &corev1.SecurityContext{RunAsUser: ptr.To[int64](0)}
	p.Spec.Containers = append(p.Spec.Containers, root)
	createPod(t, p)
	apiPodRunningReady(t, "fsgroup", 2*time.Minute)

	ctx := context.Background()
	for _, container := range []string{"main", "root"} {
		script := strings.Join([]string{
			"id -u",
			"touch /scratch/by-" + container + " /sub/by-" + container,
			"stat -c '%n %g' /scratch/by-" + container + " /sub/by-" + container + " /cm /cm/k",
			"stat -c '%n %g %a' /scratch /sub",
		}, " && ")
		out, err := kubectl(ctx, t, "exec", "fsgroup", "-c", container, "--", "sh", "-c", script)
		if err != nil {
			t.Fatalf("%s: %v\n%s", container, err, out)
		}
		uid := "1000"
		if container == "root" {
			uid = "0"
		}
		for _, want := range []string{
			uid + "\n",
			"/scratch/by-" + container + " 2000\n", "/sub/by-" + container + " 2000\n",
			"/cm 2000\n", "/cm/k 2000\n",
			"/scratch 2000 2777\n", "/sub 2000 2777\n",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("%s: no %q in\n%s", container, want, out)
			}
		}
	}
}
