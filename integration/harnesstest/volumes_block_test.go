package harnesstest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/unitlet/unitlet/integration/csidriver"
)

// TestVolumesBlock: claims of volumeMode Block handed to containers as devices
// (volumeDevices), on node-1.
//
//   - A CSI PV of the harness driver's staging mode (a loop device over an image): staged
//     once with a block capability at the kubelet's volumeDevices/staging/<pv>, published
//     per pod as a device file at volumeDevices/publish/<pv>/<pod uid>. The first pod
//     writes a marker to its /dev/xvda, exits, and reads it back when restarted; a
//     second pod, whose claim is read-only, reads it and cannot write the device. Both
//     deleted: unpublished each, unstaged after the last; no link, mount, loop device or
//     directory is left.
//   - A local PV on a block device (a loop device the test makes): the pod's write to its
//     /dev/xvdb is on the host's device; deleted, the pod's link goes and the device
//     stays.
func TestVolumesBlock(t *testing.T) {
	t.Parallel()
	waitNodeReady(t, 90*time.Second)
	c := admin(t)
	ctx := context.Background()
	root := stack.NodeRootDir(podsyncNode)
	state := t.TempDir()

	const driver = "blk.csi.unitlet.test"
	d, err := csidriver.Start(csidriver.Options{
		Name: driver, RegistrationDir: filepath.Join(root, "plugins_registry"),
		Endpoint: filepath.Join(root, "plugins", driver, "csi.sock"),
		NodeID:   "unitlet-" + podsyncNode, StateDir: filepath.Join(state, driver), Stage: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	createObject(t, c.StorageV1().CSIDrivers().Create, &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: driver},
		Spec: storagev1.CSIDriverSpec{AttachRequired: ptr.To(false)}}, c.StorageV1().CSIDrivers().Delete, driver)

	// The local PV's device: a loop device over an image of the test's.
	img := filepath.Join(state, "local.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 8<<20); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("losetup", "--find", "--show", img).CombinedOutput()
	if err != nil {
		t.Fatalf("losetup %s: %v: %s", img, err, out)
	}
	loop := strings.TrimSpace(string(out))
	t.Cleanup(func() { _ = exec.Command("losetup", "-d", loop).Run() })

	pvs, pvcs := c.CoreV1().PersistentVolumes(), c.CoreV1().PersistentVolumeClaims("default")
	blockClaim := func(name string, src corev1.PersistentVolumeSource, affinity *corev1.VolumeNodeAffinity) {
		t.Helper()
		createObject(t, pvs.Create, &corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PersistentVolumeSpec{
				PersistentVolumeSource: src, NodeAffinity: affinity, VolumeMode: ptr.To(corev1.PersistentVolumeBlock),
				AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Capacity:         corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("8Mi")},
				StorageClassName: "", PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			},
		}, pvs.Delete, name)
		createObject(t, pvcs.Create, &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PersistentVolumeClaimSpec{
				StorageClassName: ptr.To(""), VolumeName: name, VolumeMode: ptr.To(corev1.PersistentVolumeBlock),
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("8Mi")}},
			},
		}, pvcs.Delete, name)
	}
	blockClaim("blk-csi", corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: driver, VolumeHandle: "vol-blk"}}, nil)
	blockClaim("blk-local", corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: loop}}, &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: []string{podsyncNode}}}}}}})
	devicePod := func(name, claim, dev string, readOnly bool, script string) *corev1.Pod {
		p := busyboxPod(name, script)
		p.Spec.Volumes = []corev1.Volume{{Name: "disk", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim, ReadOnly: readOnly}}}}
		p.Spec.Containers[0].VolumeDevices = []corev1.VolumeDevice{{Name: "disk", DevicePath: dev}}
		return p
	}
	const marker = "unitlet-block-marker"
	readMarker := fmt.Sprintf("dd if=%%s bs=%d count=1 2>/dev/null", len(marker))

	// The CSI block volume: written, the container restarted, read back.
	a := createPod(t, devicePod("blk-a", "blk-csi", "/dev/xvda", false, fmt.Sprintf(
		`if [ "$(%s)" = %s ]; then while true; do sleep 1; done; fi; printf %s | dd of=/dev/xvda conv=fsync 2>&1; exit 1`,
		fmt.Sprintf(readMarker, "/dev/xvda"), marker, marker)))
	stack.WaitFor(t, 2*time.Minute, "blk-a running again after its container's restart, its marker on the device", func(ctx context.Context) (bool, string) {
		p, err := c.CoreV1().Pods("default").Get(ctx, "blk-a", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		cs := p.Status.ContainerStatuses
		return len(cs) == 1 && cs[0].Ready && cs[0].RestartCount >= 1, fmt.Sprintf("%s %+v", p.Status.Phase, cs)
	})
	b := createPod(t, devicePod("blk-b", "blk-csi", "/dev/xvda", true, "while true; do sleep 1; done"))
	apiPodRunningReady(t, "blk-b", 2*time.Minute)
	if got := strings.TrimSpace(mustInPod(t, "blk-b", "sh", "-c", fmt.Sprintf(readMarker, "/dev/xvda"))); got != marker {
		t.Errorf("blk-b reads %q from the shared block volume, want blk-a's marker", got)
	}
	if out, err := inPod(t, "blk-b", "sh", "-c", "printf x | dd of=/dev/xvda 2>&1"); err == nil {
		t.Errorf("blk-b, whose claim is read-only, wrote its device: %s", out)
	}
	blockDir := filepath.Join(root, "plugins", "kubernetes.io", "csi", "volumeDevices")
	staging := filepath.Join(blockDir, "staging", "blk-csi")
	var got []string
	for _, call := range d.Calls() {
		if call.VolumeID != "vol-blk" {
			continue
		}
		got = append(got, call.Method)
		switch call.Method {
		case "NodeStageVolume":
			if call.Staging != staging || call.Capability.GetBlock() == nil {
				t.Errorf("NodeStageVolume at %q with %v, want %s with a block capability", call.Staging, call.Capability, staging)
			}
		case "NodePublishVolume":
			if dir := filepath.Join(blockDir, "publish", "blk-csi"); filepath.Dir(call.Target) != dir || call.Staging != staging || call.Capability.GetBlock() == nil {
				t.Errorf("NodePublishVolume to %q from %q with %v, want a pod's file in %s from %s, a block capability", call.Target, call.Staging, call.Capability, dir, staging)
			}
		}
	}
	if !slices.Equal(got, []string{"NodeStageVolume", "NodePublishVolume", "NodePublishVolume"}) {
		t.Errorf("the driver's calls for vol-blk: %v, want one stage and a publish per pod", got)
	}
	link := func(p *corev1.Pod, plugin, pv string) string {
		return filepath.Join(root, "pods", string(p.UID), "volumeDevices", plugin, pv)
	}
	if to, err := os.Readlink(link(a, "kubernetes.io~csi", "blk-csi")); err != nil || to != filepath.Join(blockDir, "publish", "blk-csi", string(a.UID)) {
		t.Errorf("blk-a's link to its device: %q %v", to, err)
	}

	// The local block device.
	local := createPod(t, devicePod("blk-local", "blk-local", "/dev/xvdb", false, fmt.Sprintf("printf %s | dd of=/dev/xvdb conv=fsync; while true; do sleep 1; done", marker)))
	apiPodRunningReady(t, "blk-local", 2*time.Minute)
	stack.WaitFor(t, 30*time.Second, "the marker on the host's device "+loop, func(context.Context) (bool, string) {
		f, err := os.Open(loop)
		if err != nil {
			return false, err.Error()
		}
		defer f.Close()
		buf := make([]byte, len(marker))
		_, err = f.Read(buf)
		return err == nil && string(buf) == marker, fmt.Sprintf("%q %v", buf, err)
	})
	if to, err := os.Readlink(link(local, "kubernetes.io~local-volume", "blk-local")); err != nil || to != loop {
		t.Errorf("blk-local's link to its device: %q %v, want %s", to, err, loop)
	}

	for _, p := range []*corev1.Pod{a, b, local} {
		if err := c.CoreV1().Pods("default").Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []*corev1.Pod{a, b, local} {
		dir := filepath.Join(root, "pods", string(p.UID), "volumeDevices")
		stack.WaitFor(t, time.Minute, p.Name+"'s block volume released", func(context.Context) (bool, string) {
			_, err := os.Lstat(dir)
			return errors.Is(err, os.ErrNotExist), dir + ": " + errString(err)
		})
	}
	stack.WaitFor(t, 30*time.Second, "vol-blk unstaged and its directories gone", func(context.Context) (bool, string) {
		for _, p := range []string{staging, filepath.Join(blockDir, "publish", "blk-csi"), filepath.Join(blockDir, "blk-csi")} {
			if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
				return false, p + ": " + errString(err)
			}
		}
		return true, ""
	})
	got = nil
	for _, call := range d.Calls() {
		if call.VolumeID == "vol-blk" {
			got = append(got, call.Method)
		}
	}
	if !slices.Equal(got, []string{"NodeStageVolume", "NodePublishVolume", "NodePublishVolume", "NodeUnpublishVolume", "NodeUnpublishVolume", "NodeUnstageVolume"}) {
		t.Errorf("the driver's calls for vol-blk: %v, want an unpublish per pod and one unstage after", got)
	}
	if mt := mountTable(t); strings.Contains(mt, "volumeDevices") {
		t.Errorf("block volume mounts left on the host:\n%s", grepLines(mt, "volumeDevices"))
	}
	if out, err := exec.Command("losetup", "-j", filepath.Join(state, driver, "vol-blk.img")).CombinedOutput(); err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("loop devices left on vol-blk's image: %s %v", out, err)
	}
	if _, err := os.Stat(loop); err != nil {
		t.Errorf("the local PV's device %s after its pod: %v, want it kept", loop, err)
	}
}
