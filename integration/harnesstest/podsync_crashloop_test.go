package harnesstest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestCrashLoopBackOffFollowsMaxContainerRestartPeriod sets
// crashLoopBackOff.maxContainerRestartPeriod to 2s with a drop-in on node-1 (podsync
// restarts to apply it): a container that keeps failing is restarted every 2 s or so, not
// at 10, 20, 40 s; with the drop-in gone podsync is back at the kubelet's default.
func TestCrashLoopBackOffFollowsMaxContainerRestartPeriod(t *testing.T) {
	// Serial: changes the node configuration (config drop-in) and restarts podsync.
	waitNodeReady(t, 90*time.Second)
	const dropIn = "/etc/unitlet/config.d/90-crashloop-test.conf"
	invocation := func() string {
		return strings.TrimSpace(stack.InNode(t, podsyncNode, "systemctl", "show", "-p", "InvocationID", "--value", "unitlet-podsync"))
	}
	restarted := func(before string) {
		t.Helper()
		stack.WaitFor(t, time.Minute, "unitlet-podsync restarted with the configuration", func(context.Context) (bool, string) {
			now := invocation()
			return now != before && stack.Exec(podsyncNode, []string{"systemctl", "is-active", "--quiet", "unitlet-podsync"}).Run() == nil, "invocation " + now
		})
		waitNodeReady(t, 90*time.Second)
	}
	before := invocation()
	stack.InNode(t, podsyncNode, "sh", "-c", "printf 'apiVersion: kubelet.config.k8s.io/v1beta1\\nkind: KubeletConfiguration\\ncrashLoopBackOff:\\n  maxContainerRestartPeriod: 2s\\n' > "+dropIn+".tmp && chmod 0600 "+dropIn+".tmp && mv "+dropIn+".tmp "+dropIn)
	t.Cleanup(func() {
		before := invocation()
		_ = stack.Exec(podsyncNode, []string{"rm", "-f", dropIn}).Run()
		restarted(before)
	})
	restarted(before)

	createPod(t, busyboxPod("crashloop-cap", "exit 1"))
	start := time.Now()
	// At the kubelet's default backoff (10, 20, 40 s) the fourth restart comes after 70 s.
	stack.WaitFor(t, 30*time.Second, "crashloop-cap restarted 4 times (2 s apart, not 10, 20, 40 s)", func(ctx context.Context) (bool, string) {
		p, err := admin(t).CoreV1().Pods("default").Get(ctx, "crashloop-cap", metav1.GetOptions{})
		if err != nil || len(p.Status.ContainerStatuses) == 0 {
			return false, fmt.Sprint(err)
		}
		n := p.Status.ContainerStatuses[0].RestartCount
		return n >= 4, fmt.Sprintf("%d restarts after %s", n, time.Since(start).Round(time.Second))
	})
}
