package harnesstest

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"
)

// TestPodSpecRecursiveReadOnly: a read-only volumeMount's recursiveReadOnly, as the
// kubelet applies it, on a hostPath volume with a tmpfs mounted inside it. Where the
// runtime's default handler supports recursive read-only mounts (its CRI Status says so),
// Enabled makes the submount read-only too and IfPossible does the same; where it does
// not (containerd 1.6), Enabled keeps the container waiting in CreateContainerConfigError
// with the kubelet's message and IfPossible runs it with a plain read-only mount, whose
// submount stays writable. The container status's volumeMounts say which.
func TestPodSpecRecursiveReadOnly(t *testing.T) {
	t.Parallel()
	waitNodeReady(t, 90*time.Second)
	st, err := criClient(t).Runtime.Status(context.Background(), &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	supported := false
	for _, h := range st.GetRuntimeHandlers() {
		if h.GetName() == "" {
			supported = h.GetFeatures().GetRecursiveReadOnlyMounts()
		}
	}
	t.Logf("the runtime's default handler supports recursive read-only mounts: %t", supported)
	host := t.TempDir()
	sub := host + "/sub"
	if err := unix.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", sub, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(sub, unix.MNT_DETACH) })

	pod := func(name string, mode corev1.RecursiveReadOnlyMode) *corev1.Pod {
		p := busyboxPod(name, "while true; do sleep 1; done")
		p.Spec.Volumes = []corev1.Volume{{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: host}}}}
		p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "host", MountPath: "/v", ReadOnly: true, RecursiveReadOnly: ptr.To(mode)}}
		return p
	}
	createPod(t, pod("rro-enabled", corev1.RecursiveReadOnlyEnabled))
	createPod(t, pod("rro-ifpossible", corev1.RecursiveReadOnlyIfPossible))
	mountStatus := func(p *corev1.Pod) string {
		for _, cs := range p.Status.ContainerStatuses {
			for _, vm := range cs.VolumeMounts {
				if vm.Name == "host" && vm.RecursiveReadOnly != nil {
					return string(*vm.RecursiveReadOnly)
				}
			}
		}
		return ""
	}
	writable := func(pod string) bool {
		_, err := inPod(t, pod, "touch", "/v/sub/x")
		return err == nil
	}
	want := string(corev1.RecursiveReadOnlyDisabled)
	if supported {
		want = string(corev1.RecursiveReadOnlyEnabled)
	}
	p := apiPodRunningReady(t, "rro-ifpossible", time.Minute)
	if got := mountStatus(p); got != want {
		t.Errorf("rro-ifpossible's volumeMounts status says %q, want %q (runtime support %t)", got, want, supported)
	}
	if w := writable("rro-ifpossible"); w == supported {
		t.Errorf("rro-ifpossible: its submount writable %t, want %t (runtime support %t)", w, !supported, supported)
	}
	if !supported {
		apiPodUntil(t, "rro-enabled", "waiting in CreateContainerConfigError with the kubelet's message", time.Minute, func(p *corev1.Pod) bool {
			for _, cs := range p.Status.ContainerStatuses {
				if w := cs.State.Waiting; w != nil && w.Reason == "CreateContainerConfigError" && strings.Contains(w.Message, `volume "host" requested recursive read-only mode, but it is not supported by the runtime`) {
					return true
				}
			}
			return false
		})
		return
	}
	p = apiPodRunningReady(t, "rro-enabled", time.Minute)
	if got := mountStatus(p); got != want || writable("rro-enabled") {
		t.Errorf("rro-enabled: volumeMounts status %q (want %q); its submount must not be writable", got, want)
	}
}

// TestStatusRuntimeFeaturesAndStrictSupplementalGroups: the Node's status.runtimeHandlers
// and status.features are the runtime's, as CRI Status reports them (containerd 1.6: no
// handlers, no supplementalGroupsPolicy; 2.x: both), and a pod with
// supplementalGroupsPolicy Strict is admitted only where the runtime honours it: there it
// runs with its own groups only, and its container status's user says so; elsewhere it is
// rejected with the kubelet's reason and message.
func TestStatusRuntimeFeaturesAndStrictSupplementalGroups(t *testing.T) {
	t.Parallel()
	waitNodeReady(t, 90*time.Second)
	st, err := criClient(t).Runtime.Status(context.Background(), &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	strict := st.GetFeatures().GetSupplementalGroupsPolicy()
	want := map[string]string{}
	for _, h := range st.GetRuntimeHandlers() {
		want[h.GetName()] = fmt.Sprintf("rro=%t userns=%t", h.GetFeatures().GetRecursiveReadOnlyMounts(), h.GetFeatures().GetUserNamespaces())
	}
	t.Logf("the runtime: supplementalGroupsPolicy %t, handlers %v", strict, want)
	c := admin(t)
	stack.WaitFor(t, time.Minute, "the Node's runtimeHandlers and features as the runtime's", func(ctx context.Context) (bool, string) {
		n, err := c.CoreV1().Nodes().Get(ctx, podsyncNode, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		got := map[string]string{}
		for _, h := range n.Status.RuntimeHandlers {
			got[h.Name] = fmt.Sprintf("rro=%t userns=%t", ptr.Deref(h.Features.RecursiveReadOnlyMounts, false), ptr.Deref(h.Features.UserNamespaces, false))
		}
		f := n.Status.Features
		ok := f != nil && ptr.Deref(f.SupplementalGroupsPolicy, !strict) == strict && maps.Equal(got, want)
		return ok, fmt.Sprintf("features %+v, handlers %v", f, got)
	})

	p := busyboxPod("sgp-strict", "id -G; while true; do sleep 1; done")
	p.Spec.SecurityContext = &corev1.PodSecurityContext{
		RunAsUser: ptr.To[int64](1000), RunAsGroup: ptr.To[int64](3000), SupplementalGroups: []int64{4242},
		SupplementalGroupsPolicy: ptr.To(corev1.SupplementalGroupsPolicyStrict),
	}
	createPod(t, p)
	if !strict {
		apiPodUntil(t, "sgp-strict", "Failed, SupplementalGroupsPolicyNotSupported", time.Minute, func(p *corev1.Pod) bool {
			return p.Status.Phase == corev1.PodFailed && p.Status.Reason == "SupplementalGroupsPolicyNotSupported" &&
				p.Status.Message == "Pod was rejected: SupplementalGroupsPolicy=Strict is not supported in this node"
		})
		return
	}
	got := apiPodRunningReady(t, "sgp-strict", time.Minute)
	if out := strings.Fields(mustInPod(t, "sgp-strict", "id", "-G")); !slices.Equal(out, []string{"3000", "4242"}) {
		t.Errorf("the Strict pod's groups %v, want its own 3000 4242 only", out)
	}
	if u := got.Status.ContainerStatuses[0].User; u == nil || u.Linux == nil || u.Linux.UID != 1000 || u.Linux.GID != 3000 || !slices.Equal(u.Linux.SupplementalGroups, []int64{3000, 4242}) {
		t.Errorf("the container status's user %+v, want uid 1000 gid 3000 groups [3000 4242]", u)
	}
}

// TestPodSpecNoSwap: containers are kept from swapping, the kubelet's NoSwap, where the
// kernel controls swap: a container limited to 64Mi has memory.swap.max 0 (cgroup v2) or
// a memory+swap limit of 64Mi (v1); and the Node's nodeInfo.swap is the host's SwapTotal
// (none on a host without swap, as the kubelet: the API refuses a capacity of 0).
func TestPodSpecNoSwap(t *testing.T) {
	t.Parallel()
	waitNodeReady(t, 90*time.Second)
	p := busyboxPod("noswap", "while true; do sleep 1; done")
	p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")}
	createPod(t, p)
	apiPodRunningReady(t, "noswap", time.Minute)
	out := strings.TrimSpace(mustInPod(t, "noswap", "sh", "-c", "cat /sys/fs/cgroup/memory.swap.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.memsw.limit_in_bytes"))
	if out != "0" && out != "67108864" {
		t.Errorf("the container's swap limit %q, want memory.swap.max 0 (v2) or memory.memsw.limit_in_bytes 67108864 (v1)", out)
	}
	meminfo, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	var swapKB int64
	for _, l := range strings.Split(string(meminfo), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "SwapTotal:" {
			swapKB, _ = strconv.ParseInt(f[1], 10, 64)
		}
	}
	n, err := admin(t).CoreV1().Nodes().Get(context.Background(), podsyncNode, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	switch s := n.Status.NodeInfo.Swap; {
	case swapKB == 0 && s != nil:
		t.Errorf("the Node's nodeInfo.swap %+v on a host without swap, want none (as the kubelet)", s)
	case swapKB > 0 && (s == nil || s.Capacity == nil || *s.Capacity != swapKB<<10):
		t.Errorf("the Node's nodeInfo.swap %+v, want capacity %d (the host's SwapTotal)", s, swapKB<<10)
	}
}
