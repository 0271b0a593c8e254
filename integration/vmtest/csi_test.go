package vmtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/unitlet/unitlet/integration"
	"github.com/unitlet/unitlet/integration/harness"
)

// TestCSIVolumeUnderTheShippedUnit: the harness's CSI test driver (its directory mode),
// copied into the guest and started there as a node plugin with node-driver-registrar would
// be, registers with unitlet-volumes under its shipped unit through
// /var/lib/unitlet/plugins_registry: the vm node's CSINode lists it. A pod with fsGroup and
// fsGroupChangePolicy OnRootMismatch on a claim bound to a CSI PV of it runs: the volume is
// published at the kubelet's path under /var/lib/unitlet/pods (a mount in the guest, given
// to the fsGroup by the CSIDriver's fsGroupPolicy File), what the pod writes is in the
// driver's directory. The pod deleted, the volume is unpublished and its directory gone;
// unitlet-volumes was never restarted.
func TestCSIVolumeUnderTheShippedUnit(t *testing.T) {
	n := vmNode(t)
	node := n.Name
	c := admin(t)
	ctx := context.Background()
	const (
		driver = "vm.csi.unitlet.test"
		bin    = "/var/tmp/unitlet-test-csi-driver"
		state  = "/var/lib/unitlet-test/csi"
	)
	install := stack.Exec(node, []string{"sh", "-c", "cat > " + bin + ".tmp && chmod 0755 " + bin + ".tmp && mv " + bin + ".tmp " + bin})
	install.Stdin = strings.NewReader(string(buildCSIDriver(t)))
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("install the CSI test driver in %s: %v\n%s", node, err, out)
	}
	restartsBefore := stack.UnitProps(t, node, "unitlet-volumes.service", "NRestarts")["NRestarts"]
	stack.InNode(t, node, "sh", "-c", fmt.Sprintf("rm -rf %[1]s && mkdir -p %[1]s && setsid %[2]s -name %[3]s -registration-dir /var/lib/unitlet/plugins_registry "+
		"-endpoint /var/lib/unitlet/plugins/%[3]s/csi.sock -node-id unitlet-%[4]s -state-dir %[1]s/volumes -call-log %[1]s/calls.jsonl >%[1]s/driver.log 2>&1 </dev/null &",
		state, bin, driver, node))
	t.Cleanup(func() {
		_ = stack.Exec(node, []string{"sh", "-c", "pkill -TERM -f " + bin + "; sleep 1; rm -rf " + bin + " " + state}).Run()
	})
	createObj := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	_, err := c.StorageV1().CSIDrivers().Create(ctx, &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: driver},
		Spec: storagev1.CSIDriverSpec{AttachRequired: ptr.To(false), FSGroupPolicy: ptr.To(storagev1.FileFSGroupPolicy)}}, metav1.CreateOptions{})
	createObj(err)
	t.Cleanup(func() { _ = c.StorageV1().CSIDrivers().Delete(context.Background(), driver, metav1.DeleteOptions{}) })
	stack.WaitFor(t, time.Minute, "the driver in the vm node's CSINode", func(ctx context.Context) (bool, string) {
		cn, err := c.StorageV1().CSINodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, d := range cn.Spec.Drivers {
			if d.Name == driver && d.NodeID == "unitlet-"+node {
				return true, ""
			}
		}
		log, _ := stack.Exec(node, []string{"cat", state + "/driver.log"}).CombinedOutput()
		return false, fmt.Sprintf("drivers %+v; driver log: %s", cn.Spec.Drivers, log)
	})

	size := corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}
	rwo := []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "vm-csi-pv"}, Spec: corev1.PersistentVolumeSpec{
		PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: driver, VolumeHandle: "vm-vol"}},
		AccessModes:            rwo, Capacity: size, PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
	}}
	_, err = c.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{})
	createObj(err)
	t.Cleanup(func() {
		_ = c.CoreV1().PersistentVolumes().Delete(context.Background(), pv.Name, metav1.DeleteOptions{})
	})
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "vm-csi-pvc", Namespace: "default"}, Spec: corev1.PersistentVolumeClaimSpec{
		StorageClassName: ptr.To(""), VolumeName: pv.Name, AccessModes: rwo, Resources: corev1.VolumeResourceRequirements{Requests: size},
	}}
	_, err = c.CoreV1().PersistentVolumeClaims("default").Create(ctx, pvc, metav1.CreateOptions{})
	createObj(err)
	t.Cleanup(func() {
		_ = c.CoreV1().PersistentVolumeClaims("default").Delete(context.Background(), pvc.Name, metav1.DeleteOptions{})
	})

	fsGroup, user := int64(2000), int64(1000)
	onRootMismatch := corev1.FSGroupChangeOnRootMismatch
	pod := runVMPod(t, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "vm-csi", Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeName: node, TerminationGracePeriodSeconds: ptr.To[int64](1), AutomountServiceAccountToken: ptr.To(false),
			SecurityContext: &corev1.PodSecurityContext{FSGroup: &fsGroup, RunAsUser: &user, FSGroupChangePolicy: &onRootMismatch},
			Containers: []corev1.Container{{
				Name: "c", Image: harness.BusyboxImage, ImagePullPolicy: corev1.PullNever,
				Command:      []string{"sh", "-c", "echo from-the-pod > /data/f && exec sleep 100000"},
				VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
			}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: pvc.Name}}}},
		},
	})
	dir := "/var/lib/unitlet/pods/" + string(pod.UID) + "/volumes/kubernetes.io~csi/" + pv.Name
	stack.WaitFor(t, time.Minute, "the pod's file in the driver's directory", func(context.Context) (bool, string) {
		out, err := stack.Exec(node, []string{"cat", state + "/volumes/vm-vol/f"}).CombinedOutput()
		return err == nil && strings.TrimSpace(string(out)) == "from-the-pod", string(out)
	})
	if out := stack.InNode(t, node, "sh", "-c", "findmnt -n -o TARGET "+dir+"/mount && stat -c '%g' "+dir+"/mount"); !strings.Contains(out, dir+"/mount") || !strings.HasSuffix(strings.TrimSpace(out), "2000") {
		t.Errorf("the published volume in the guest (mount point, group): %q, want mounted at %s/mount with group 2000", out, dir)
	}

	if err := c.CoreV1().Pods("default").Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	stack.WaitFor(t, 2*time.Minute, "the pod's CSI volume unpublished and its directory gone", func(context.Context) (bool, string) {
		out, err := stack.Exec(node, []string{"sh", "-c", "test -e " + dir + " && echo present || echo gone"}).CombinedOutput()
		return err == nil && strings.TrimSpace(string(out)) == "gone", string(out)
	})
	calls := stack.InNode(t, node, "cat", state+"/calls.jsonl")
	for _, want := range []string{`"Method":"NodePublishVolume","VolumeID":"vm-vol"`, `"Method":"NodeUnpublishVolume","VolumeID":"vm-vol"`} {
		if !strings.Contains(calls, want) {
			t.Errorf("the driver's calls lack %s:\n%s", want, calls)
		}
	}
	if got := stack.UnitProps(t, node, "unitlet-volumes.service", "NRestarts")["NRestarts"]; got != restartsBefore {
		t.Errorf("unitlet-volumes restarted during the test: NRestarts %s, was %s", got, restartsBefore)
	}
}

// buildCSIDriver builds the CSI test driver's command, static, for the guest.
func buildCSIDriver(t *testing.T) []byte {
	t.Helper()
	repo, err := integration.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "unitlet-test-csi-driver")
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, "./integration/csidriver/cmd/unitlet-test-csi-driver")
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the CSI test driver: %v\n%s", err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
