package vmtest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestLimitedSwapUnderTheShippedUnits: memorySwap.swapBehavior LimitedSwap, as the kubelet
// applies it on cgroup v2. With a swap file on in the guest and a drop-in turning
// failSwapOn off and LimitedSwap on (podsync restarts for it), a Burstable container with
// a memory request of 64Mi and a limit of 128Mi gets memory.swap.max = its request's share
// of the node's memory, of the node's swap; a Guaranteed container beside it none. A
// resize of the Burstable container's memory request is Infeasible.
func TestLimitedSwapUnderTheShippedUnits(t *testing.T) {
	node := vmNode(t).Name
	const (
		swapFile = "/var/lib/unitlet-test-swap"
		dropIn   = "/etc/unitlet/config.d/90-limited-swap-test.conf"
	)
	stack.InNode(t, node, "sh", "-c", "fallocate -l 64M "+swapFile+" && chmod 600 "+swapFile+" && mkswap "+swapFile+" >/dev/null && swapon "+swapFile)
	start := waitGeneration(t, node, 0)
	stack.InNode(t, node, "sh", "-c", fmt.Sprintf(`cat > %[1]s.tmp <<'EOF'
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failSwapOn: false
memorySwap:
  swapBehavior: LimitedSwap
EOF
chmod 0600 %[1]s.tmp && mv %[1]s.tmp %[1]s`, dropIn))
	gen := start
	t.Cleanup(func() {
		// Swap off before failSwapOn is back, or unitlet-config refuses the configuration.
		_ = stack.Exec(node, []string{"sh", "-c", "swapoff " + swapFile + "; rm -f " + swapFile + " " + dropIn}).Run()
		waitGeneration(t, node, gen)
	})
	gen = waitGeneration(t, node, start)
	if out := stack.InNode(t, node, "journalctl", "-u", "unitlet-podsync", "--since", "-5min", "-o", "cat", "--grep", "LimitedSwap"); !strings.Contains(out, "Burstable containers may swap") {
		t.Errorf("unitlet-podsync does not say it applies LimitedSwap:\n%s", out)
	}

	p := vmPod("vm-limited-swap", map[string]string{"burstable": "exec sleep 100000", "guaranteed": "exec sleep 100000"})
	for i := range p.Spec.Containers {
		c := &p.Spec.Containers[i]
		switch c.Name {
		case "burstable":
			c.Resources = corev1.ResourceRequirements{Requests: rl("memory", "64Mi"), Limits: rl("memory", "128Mi")}
		case "guaranteed":
			c.Resources = corev1.ResourceRequirements{Requests: rl("memory", "32Mi", "cpu", "100m"), Limits: rl("memory", "32Mi", "cpu", "100m")}
		}
	}
	running := runVMPod(t, p)

	meminfo := map[string]int64{}
	for _, line := range strings.Split(stack.InNode(t, node, "cat", "/proc/meminfo"), "\n") {
		if f := strings.Fields(line); len(f) >= 2 {
			v, _ := strconv.ParseInt(f[1], 10, 64)
			meminfo[strings.TrimSuffix(f[0], ":")] = v << 10
		}
	}
	request := resource.MustParse("64Mi")
	want := int64(float64(request.Value()) / float64(meminfo["MemTotal"]) * float64(meminfo["SwapTotal"]))
	for _, cs := range running.Status.ContainerStatuses {
		id := strings.TrimPrefix(cs.ContainerID, "containerd://")
		got := stack.InNode(t, node, "cat", podSlice(running)+"/cri-containerd-"+id+".scope/memory.swap.max")
		switch cs.Name {
		case "burstable":
			// The kernel keeps whole pages of it.
			if got != strconv.FormatInt(want&^4095, 10) || want == 0 {
				t.Errorf("burstable: memory.swap.max %s, want %d in whole pages (64Mi of MemTotal %d, of SwapTotal %d)", got, want, meminfo["MemTotal"], meminfo["SwapTotal"])
			}
		case "guaranteed":
			if got != "0" {
				t.Errorf("guaranteed (memory request = limit): memory.swap.max %s, want 0", got)
			}
		}
	}
	t.Logf("LimitedSwap: the Burstable container may swap %d bytes (64Mi of %d, of %d swap)", want, meminfo["MemTotal"], meminfo["SwapTotal"])

	// Its memory request cannot change in place: Infeasible, the kubelet's message.
	c := admin(t)
	if _, err := c.CoreV1().Pods(p.Namespace).Patch(context.Background(), p.Name, types.StrategicMergePatchType,
		[]byte(`{"spec":{"containers":[{"name":"burstable","resources":{"requests":{"memory":"96Mi"}}}]}}`), metav1.PatchOptions{}, "resize"); err != nil {
		t.Fatal(err)
	}
	stack.WaitFor(t, 2*time.Minute, "the resize Infeasible", func(ctx context.Context) (bool, string) {
		cur, err := c.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, cond := range cur.Status.Conditions {
			if cond.Type == corev1.PodResizePending {
				return cond.Reason == corev1.PodReasonInfeasible && cond.Message == "In-place resize of containers with swap is not supported.", cond.Reason + ": " + cond.Message
			}
		}
		return false, fmt.Sprintf("no PodResizePending condition: %v", cur.Status.Conditions)
	})
	if err := admin(t).CoreV1().Pods(p.Namespace).Delete(context.Background(), p.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}
