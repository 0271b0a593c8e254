package harnesstest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// TestVolumesPersistentVolumeClaims: persistentVolumeClaim volumes on the real control
// plane (its PV binder, the Node authorizer's pod → claim → volume graph) and the node's
// unitlet-volumes.
//
//   - A pod bound to the node whose claim has no volume yet waits, Pending, with the
//     kubelet's FailedMount "PVC is not bound"; a local PV made for it then (node affinity
//     on the node's hostname) is bound by the controller-manager and the pod runs: what it
//     writes is in the local directory on the host, bind-mounted at the pod's
//     kubernetes.io~local-volume directory.
//   - A pod the scheduler places, its claim read-only and bound to a hostPath PV, runs and
//     cannot write there.
//   - A generic ephemeral volume: the claim the ephemeral-volume controller makes from the
//     template, bound to a hostPath PV reserved for it; the pod's write reaches the host.
//   - A claim bound to an nfs PV: FailedMount names the source unitlet does not mount.
//   - The local pod deleted: its bind mount and volume directory go, its files stay.
func TestVolumesPersistentVolumeClaims(t *testing.T) {
	t.Parallel()
	waitNodeReady(t, 90*time.Second)
	c := admin(t)
	ctx := context.Background()
	pvs, pvcs := c.CoreV1().PersistentVolumes(), c.CoreV1().PersistentVolumeClaims("default")

	claim := func(name, volume string) {
		t.Helper()
		createObject(t, pvcs.Create, &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PersistentVolumeClaimSpec{
				StorageClassName: ptr.To(""), VolumeName: volume,
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
			},
		}, pvcs.Delete, name)
	}
	volume := func(name string, src corev1.PersistentVolumeSource, affinity *corev1.VolumeNodeAffinity) {
		t.Helper()
		createObject(t, pvs.Create, &corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PersistentVolumeSpec{
				PersistentVolumeSource: src, NodeAffinity: affinity, StorageClassName: "",
				AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
				PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			},
		}, pvs.Delete, name)
	}
	claimPod := func(name, claimName string, readOnly bool) *corev1.Pod {
		p := busyboxPod(name, "while true; do sleep 1; done")
		p.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claimName, ReadOnly: readOnly}}}}
		p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
		return p
	}
	failedMount := func(pod, want string) {
		t.Helper()
		stack.WaitFor(t, time.Minute, pod+": a FailedMount event saying "+want, func(ctx context.Context) (bool, string) {
			evs := podEvents(ctx, t, pod)
			return strings.Contains(evs, "FailedMount") && strings.Contains(evs, want), evs
		})
	}

	// A claim with no volume yet: the pod waits, as the kubelet's does.
	claim("pvc-local", "")
	created := createPod(t, claimPod("pvc-local", "pvc-local", false))
	failedMount("pvc-local", "error processing PVC default/pvc-local: PVC is not bound")
	if p, err := c.CoreV1().Pods("default").Get(ctx, "pvc-local", metav1.GetOptions{}); err != nil || p.Status.Phase != corev1.PodPending {
		t.Fatalf("pvc-local while its claim is unbound: %v, want Pending", err)
	}
	disk := t.TempDir()
	if err := os.WriteFile(filepath.Join(disk, "kept"), []byte("before"), 0o644); err != nil {
		t.Fatal(err)
	}
	volume("pv-unitlet-local", corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: disk}}, &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: []string{podsyncNode}}}}}}})
	apiPodRunningReady(t, "pvc-local", 2*time.Minute)
	if out := strings.TrimSpace(mustInPod(t, "pvc-local", "cat", "/data/kept")); out != "before" {
		t.Errorf("/data/kept in the pod: %q, want the local volume's file", out)
	}
	mustInPod(t, "pvc-local", "sh", "-c", "echo written >/data/by-pod")
	if b, err := os.ReadFile(filepath.Join(disk, "by-pod")); err != nil || strings.TrimSpace(string(b)) != "written" {
		t.Errorf("the pod's write in the local directory: %q %v", b, err)
	}
	podVolume := filepath.Join(stack.NodeRootDir(podsyncNode), "pods", string(created.UID), "volumes", "kubernetes.io~local-volume", "pv-unitlet-local")
	if n := strings.Count(mountTable(t), " "+podVolume+" "); n != 1 {
		t.Errorf("%d mounts at %s, want the local volume bind-mounted once", n, podVolume)
	}

	// Placed by the scheduler, read-only, on a hostPath PV.
	hostDir := t.TempDir()
	volume("pv-unitlet-host", corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: hostDir}}, nil)
	claim("pvc-host", "pv-unitlet-host")
	scheduled := claimPod("pvc-host", "pvc-host", true)
	scheduled.Spec.NodeName = ""
	createPod(t, scheduled)
	apiPodRunningReady(t, "pvc-host", 2*time.Minute)
	if out, err := inPod(t, "pvc-host", "sh", "-c", "echo x >/data/denied"); err == nil || !strings.Contains(out, "Read-only file system") {
		t.Errorf("writing into a read-only claim's volume: %v\n%s", err, out)
	}

	// A generic ephemeral volume: the ephemeral-volume controller's claim, owned by the pod,
	// bound by the binder to a volume reserved for it.
	ephDir := t.TempDir()
	createObject(t, pvs.Create, &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pv-unitlet-eph"},
		Spec: corev1.PersistentVolumeSpec{
			PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: ephDir}},
			AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			ClaimRef:               &corev1.ObjectReference{Namespace: "default", Name: "pvc-eph-scratch"},
		},
	}, pvs.Delete, "pv-unitlet-eph")
	eph := busyboxPod("pvc-eph", "echo here >/scratch/eph; while true; do sleep 1; done")
	eph.Spec.Volumes = []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{
		VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: ptr.To(""), AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		}},
	}}}}
	eph.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}}
	createPod(t, eph)
	apiPodRunningReady(t, "pvc-eph", 2*time.Minute)
	if b, err := os.ReadFile(filepath.Join(ephDir, "eph")); err != nil || strings.TrimSpace(string(b)) != "here" {
		t.Errorf("the ephemeral volume's file on the host: %q %v", b, err)
	}

	// A source unitlet-volumes does not mount.
	volume("pv-unitlet-nfs", corev1.PersistentVolumeSource{NFS: &corev1.NFSVolumeSource{Server: "nfs.invalid", Path: "/export"}}, nil)
	claim("pvc-nfs", "pv-unitlet-nfs")
	createPod(t, claimPod("pvc-nfs", "pvc-nfs", false))
	failedMount("pvc-nfs", "PersistentVolume pv-unitlet-nfs has a nfs source")

	// Deleted: unmounted, the pod's directory gone, the volume's files kept.
	if err := c.CoreV1().Pods("default").Delete(ctx, "pvc-local", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	stack.WaitFor(t, time.Minute, "the local volume unmounted from the deleted pod", func(ctx context.Context) (bool, string) {
		if strings.Contains(mountTable(t), " "+podVolume+" ") {
			return false, "still mounted"
		}
		_, err := os.Stat(podVolume)
		return errors.Is(err, os.ErrNotExist), "its directory: " + errString(err)
	})
	for _, name := range []string{"kept", "by-pod"} {
		if _, err := os.Stat(filepath.Join(disk, name)); err != nil {
			t.Errorf("the local volume's %s after the pod went: %v, want it kept", name, err)
		}
	}
}

// mountTable is the host's mount table (/proc/self/mountinfo).
func mountTable(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func errString(err error) string {
	if err == nil {
		return "exists"
	}
	return err.Error()
}
