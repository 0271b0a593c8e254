package harnesstest

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestReadinessGateFollowsTheConditionOthersSet: a pod with a readiness gate is Ready only
// while the condition another controller writes into its status is True. That write is a
// change of the pod's status alone, which podsync otherwise leaves unsynced; for a gated
// pod it must sync again and recompute Ready (the kubelet reconciles such pods' readiness).
func TestReadinessGateFollowsTheConditionOthersSet(t *testing.T) {
	t.Parallel()
	const gate = "example.com/load-balancer-ready"
	p := busyboxPod("gated", "sleep 3600")
	p.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: gate}}
	createPod(t, p)
	c := admin(t)
	ready := func(want corev1.ConditionStatus, what string) {
		t.Helper()
		stack.WaitFor(t, 60*time.Second, what, func(ctx context.Context) (bool, string) {
			pod, err := c.CoreV1().Pods("default").Get(ctx, "gated", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			b, _ := json.Marshal(pod.Status.Conditions)
			return pod.Status.Phase == corev1.PodRunning && conditionIs(pod.Status, corev1.ContainersReady, corev1.ConditionTrue) &&
				conditionIs(pod.Status, corev1.PodReady, want), string(b)
		})
	}
	ready(corev1.ConditionFalse, "gated Running, its containers ready, the pod not Ready (no gate condition yet)")

	setGate := func(status corev1.ConditionStatus) {
		t.Helper()
		patch := fmt.Sprintf(`{"status":{"conditions":[{"type":%q,"status":%q,"lastTransitionTime":%q}]}}`, gate, status, time.Now().UTC().Format(time.RFC3339))
		if _, err := c.CoreV1().Pods("default").Patch(context.Background(), "gated", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status"); err != nil {
			t.Fatalf("set the gate's condition %s: %v", status, err)
		}
	}
	start := time.Now()
	setGate(corev1.ConditionTrue)
	ready(corev1.ConditionTrue, "gated Ready once its gate's condition is True")
	t.Logf("Ready %.2f s after the gate's condition was set True", time.Since(start).Seconds())
	setGate(corev1.ConditionFalse)
	ready(corev1.ConditionFalse, "gated not Ready once its gate's condition is False")
}
