package harnesstest

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/unitlet/unitlet/integration/harness"
)

// TestVolumesStatefulSetOnLocalPath: a StatefulSet of 3 replicas with volumeClaimTemplates
// on the stack's local-path-provisioner (WaitForFirstConsumer: the scheduler picks the
// node, the provisioner's helper pod makes the directory there, on unitlet, and the claim
// is bound to a hostPath PV with the node's affinity). Each pod writes its name once; the
// pods deleted and made again by the StatefulSet controller find their own data; the
// StatefulSet deleted and its claims deleted, the provisioner's teardown helper pods
// remove the volumes and no directory is left.
func TestVolumesStatefulSetOnLocalPath(t *testing.T) {
	t.Parallel()
	waitNodeReady(t, 90*time.Second)
	waitDefaultServiceAccount(t, "default")
	c := admin(t)
	ctx := context.Background()
	const name, replicas = "sts-data", 3
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: appsv1.StatefulSetSpec{
			Replicas:            ptr.To[int32](replicas),
			ServiceName:         name,
			PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector:            &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
				Spec: corev1.PodSpec{
					AutomountServiceAccountToken:  ptr.To(false),
					TerminationGracePeriodSeconds: ptr.To[int64](1),
					Containers: []corev1.Container{{
						Name: "main", Image: "unitlet.local/busybox:1", ImagePullPolicy: corev1.PullNever,
						Command:      []string{"sh", "-c", "[ -f /data/id ] || hostname >/data/id; while true; do sleep 1; done"},
						VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
					}},
				},
			},
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{
				ObjectMeta: metav1.ObjectMeta{Name: "data"},
				Spec: corev1.PersistentVolumeClaimSpec{
					StorageClassName: ptr.To(harness.LocalPathStorageClass),
					AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("64Mi")}},
				},
			}},
		},
	}
	if _, err := c.AppsV1().StatefulSets("default").Create(ctx, sts, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.AppsV1().StatefulSets("default").Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	claims := make([]string, replicas)
	for i := range claims {
		claims[i] = fmt.Sprintf("data-%s-%d", name, i)
		claim := claims[i]
		t.Cleanup(func() {
			_ = c.CoreV1().PersistentVolumeClaims("default").Delete(context.Background(), claim, metav1.DeleteOptions{})
		})
	}

	// Every replica Running on its own provisioned volume, its name in it.
	uids := runningReplicas(t, name, replicas, nil)
	for pod := range uids {
		if out := strings.TrimSpace(mustInPod(t, pod, "cat", "/data/id")); out != pod {
			t.Errorf("%s: /data/id = %q, want its own name", pod, out)
		}
	}
	pvs := map[string]*corev1.PersistentVolume{}
	for _, claim := range claims {
		pvc, err := c.CoreV1().PersistentVolumeClaims("default").Get(ctx, claim, metav1.GetOptions{})
		if err != nil || pvc.Status.Phase != corev1.ClaimBound {
			t.Fatalf("claim %s: %v, want Bound", claim, err)
		}
		pv, err := c.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if pv.Spec.HostPath == nil || !strings.HasPrefix(pv.Spec.HostPath.Path, stack.LocalPathDir()) {
			t.Fatalf("claim %s's volume %s: %+v, want a hostPath under %s", claim, pv.Name, pv.Spec.PersistentVolumeSource, stack.LocalPathDir())
		}
		pvs[claim] = pv
	}

	// Pods deleted: the controller makes them again, and each finds its data.
	for pod := range uids {
		if err := c.CoreV1().Pods("default").Delete(ctx, pod, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	runningReplicas(t, name, replicas, uids)
	for pod := range uids {
		if out := strings.TrimSpace(mustInPod(t, pod, "cat", "/data/id")); out != pod {
			t.Errorf("%s made again: /data/id = %q, want the name its first pod wrote", pod, out)
		}
	}

	// The StatefulSet and its claims deleted: the volumes go with their directories.
	if err := c.AppsV1().StatefulSets("default").Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	stack.WaitFor(t, 2*time.Minute, "the StatefulSet's pods gone", func(ctx context.Context) (bool, string) {
		l, err := c.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
		if err != nil {
			return false, err.Error()
		}
		return len(l.Items) == 0, fmt.Sprintf("%d left", len(l.Items))
	})
	for _, claim := range claims {
		if err := c.CoreV1().PersistentVolumeClaims("default").Delete(ctx, claim, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	stack.WaitFor(t, 3*time.Minute, "the claims' volumes deleted and their directories removed", func(ctx context.Context) (bool, string) {
		var left []string
		for claim, pv := range pvs {
			if _, err := c.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{}); err == nil {
				left = append(left, claim+"'s PV "+pv.Name)
			}
			if _, err := os.Stat(pv.Spec.HostPath.Path); err == nil {
				left = append(left, pv.Spec.HostPath.Path)
			}
		}
		sort.Strings(left)
		return len(left) == 0, strings.Join(left, ", ")
	})
}

// runningReplicas waits for the StatefulSet's replicas to be Running and Ready, each a pod
// other than the one in before (by name, its UID), and returns them by name with their UIDs.
func runningReplicas(t *testing.T, sts string, replicas int, before map[string]string) map[string]string {
	t.Helper()
	got := map[string]string{}
	stack.WaitFor(t, 3*time.Minute, fmt.Sprintf("%d replicas of %s Running and Ready", replicas, sts), func(ctx context.Context) (bool, string) {
		l, err := admin(t).CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=" + sts})
		if err != nil {
			return false, err.Error()
		}
		clear(got)
		var state []string
		for _, p := range l.Items {
			ready := p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil && before[p.Name] != string(p.UID)
			for _, cond := range p.Status.Conditions {
				ready = ready && (cond.Type != corev1.PodReady || cond.Status == corev1.ConditionTrue)
			}
			if ready {
				got[p.Name] = string(p.UID)
			}
			state = append(state, fmt.Sprintf("%s %s on %q", p.Name, p.Status.Phase, p.Spec.NodeName))
		}
		sort.Strings(state)
		return len(got) == replicas, strings.Join(state, ", ")
	})
	return got
}
