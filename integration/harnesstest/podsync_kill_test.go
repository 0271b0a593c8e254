package harnesstest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	podsyncv1 "github.com/unitlet/unitlet/proto/unitlet/podsync/v1"
	"github.com/unitlet/unitlet/shared/bus"
)

// TestPodsyncKillPod is unitlet-eviction's call: the pod's containers stop and it ends
// Failed with the given reason.
func TestPodsyncKillPod(t *testing.T) {
	t.Parallel()
	p := createPod(t, busyboxPod("to-evict", "while true; do sleep 1; done"))
	waitPod(t, time.Minute, "default/to-evict", "running", func(_ *podsyncv1.Pod, st corev1.PodStatus) bool { return st.Phase == corev1.PodRunning })
	conn, err := bus.Dial(stack.NodeSocketDir(podsyncNode), "podsync")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	grace := int64(1)
	_, err = podsyncv1.NewPodSyncServiceClient(conn).KillPod(context.Background(), &podsyncv1.KillPodRequest{
		Uid: string(p.UID), Reason: "Evicted", Message: "The node was low on resource: memory.", GracePeriodSeconds: &grace,
	})
	if err != nil {
		t.Fatalf("KillPod: %v", err)
	}
	_, st := waitPod(t, 30*time.Second, "default/to-evict", "Failed with reason Evicted and terminated", func(p *podsyncv1.Pod, st corev1.PodStatus) bool {
		return st.Phase == corev1.PodFailed && p.Terminated
	})
	if st.Reason != "Evicted" || !strings.Contains(st.Message, "low on resource") {
		t.Errorf("status reason %q message %q, want Evicted with the message given", st.Reason, st.Message)
	}
	for _, c := range runtimeContainers(context.Background(), t, string(p.UID)) {
		if c.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
			t.Errorf("container %s still running after KillPod", c.Id)
		}
	}
	if _, err := podsyncv1.NewPodSyncServiceClient(conn).KillPod(context.Background(), &podsyncv1.KillPodRequest{Uid: "no-such-pod", Reason: "Evicted"}); err == nil || !strings.Contains(err.Error(), "no such pod") {
		t.Errorf("KillPod of an unknown pod: %v, want NotFound", err)
	}
}

// TestPodsyncBadPodSpec: a pod whose image is missing with pull policy Never waits with the
// kubelet's reason and events; a pod next to it runs. The events reach the API server.
func TestPodsyncBadPodSpec(t *testing.T) {
	t.Parallel()
	bad := busyboxPod("missing-image", "true")
	bad.Spec.Containers[0].Image = "unitlet.local/does-not-exist:1"
	created := createPod(t, bad)
	good := createPod(t, busyboxPod("next-to-bad", "while true; do sleep 1; done"))
	_, st := waitPod(t, time.Minute, "default/missing-image", "waiting ErrImageNeverPull", func(_ *podsyncv1.Pod, st corev1.PodStatus) bool {
		cs := st.ContainerStatuses
		return len(cs) == 1 && cs[0].State.Waiting != nil && cs[0].State.Waiting.Reason == "ErrImageNeverPull"
	})
	if st.Phase != corev1.PodPending || !strings.Contains(st.ContainerStatuses[0].State.Waiting.Message, "does-not-exist") {
		t.Errorf("status %+v, want Pending with a message naming the image", st)
	}
	waitPod(t, time.Minute, "default/next-to-bad", "running", func(_ *podsyncv1.Pod, st corev1.PodStatus) bool { return st.Phase == corev1.PodRunning })

	c := admin(t)
	reasons := func(uid string) map[string]string {
		evs, err := c.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("involvedObject.uid", uid).String()})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, e := range evs.Items {
			out[e.Reason] = e.Message
		}
		return out
	}
	stack.WaitFor(t, 30*time.Second, "the kubelet's events for both pods in the API", func(context.Context) (bool, string) {
		b, g := reasons(string(created.UID)), reasons(string(good.UID))
		_, never := b["ErrImageNeverPull"]
		_, started := g["Started"]
		_, noEviction := g["AdmittedWithoutEvictionCheck"]
		return never && started && noEviction, fmt.Sprintf("missing-image: %v\nnext-to-bad: %v", b, g)
	})
}
