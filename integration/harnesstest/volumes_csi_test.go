package harnesstest

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/unitlet/unitlet/integration/csidriver"
)

// TestVolumesCSI: PVCs bound to static CSI PVs and inline csi volumes, mounted through the
// harness's CSI test driver on node-1 as the kubelet's CSI plugin mounts them.
//
//   - A staging driver (STAGE_UNSTAGE_VOLUME; each volume an ext4 image on a loop
//     device): two pods on one claim. The volume is staged once, at the kubelet's
//     global mount path, and published once per pod at its kubernetes.io~csi/<pv>/mount
//     directory, with the pod's identity in the volume context (podInfoOnMount) and the
//     pod's fsGroup applied (fsGroupPolicy File). The first pod's file survives its
//     container's restart and the second pod reads it. The first pod deleted: unpublished
//     only; the second deleted: unpublished, then unstaged. No mount, loop device or
//     directory is left.
//   - The staging driver's NodeGetVolumeStats: the claim's kubelet_volume_stats_* on
//     /metrics are the volume's (its ext4 image), its condition abnormal as the driver
//     says, with a VolumeConditionAbnormal event on the pod.
//   - A driver without staging, whose CSIDriver asks for tokens and republishing: published
//     (a directory bind-mounted) with the pod's service account token for its audience,
//     published again at the resync, and unpublished; the
//     pod's write is in the driver's directory. Expanded online, the test as the external
//     resizer (the PV grown, the claim's status NodeResizePending): unitlet-volumes calls
//     NodeExpandVolume, and the claim's status has the new capacity and no resize status,
//     with a FileSystemResizeSuccessful event. (The staging mode cannot grow a mounted
//     ext4 here: online resize2fs needs CAP_SYS_RESOURCE, which these machines lack.)
//   - An inline csi volume on that driver (its CSIDriver lists the Ephemeral mode):
//     published under the kubelet's handle, with ephemeral=true; on the staging driver
//     (Persistent only), refused with a FailedMount naming the mode.
//   - A driver whose CSIDriver needs attaching, the test as its external attacher: the
//     controller-manager's attach/detach controller makes the VolumeAttachment; the
//     volume is in the Node's volumesInUse while the pod waits, with a FailedMount saying
//     it is not attached yet; attached, the pod runs, published with the attachment's
//     metadata as its publish context; the pod deleted, the volume leaves volumesInUse and
//     the controller detaches it (deletes the VolumeAttachment).
//
// The driver's exact calls for each volume are checked.
func TestVolumesCSI(t *testing.T) {
	t.Parallel()
	waitNodeReady(t, 90*time.Second)
	c := admin(t)
	ctx := context.Background()
	root := stack.NodeRootDir(podsyncNode)
	state := t.TempDir()

	// Names short enough for their sockets under the stack's root dir (108-byte addresses).
	start := func(name string, stage bool) *csidriver.Driver {
		t.Helper()
		d, err := csidriver.Start(csidriver.Options{
			Name: name, RegistrationDir: filepath.Join(root, "plugins_registry"),
			Endpoint: filepath.Join(root, "plugins", name, "csi.sock"),
			NodeID:   "unitlet-" + podsyncNode, StateDir: filepath.Join(state, name), Stage: stage,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(d.Stop)
		return d
	}
	stg, dir, att := start("stg.csi.unitlet.test", true), start("dir.csi.unitlet.test", false), start("att.csi.unitlet.test", false)
	csiDriver := func(name string, attach bool, policy storagev1.FSGroupPolicy, edit func(*storagev1.CSIDriverSpec), modes ...storagev1.VolumeLifecycleMode) {
		spec := storagev1.CSIDriverSpec{AttachRequired: ptr.To(attach), PodInfoOnMount: ptr.To(true), FSGroupPolicy: ptr.To(policy), VolumeLifecycleModes: modes}
		if edit != nil {
			edit(&spec)
		}
		createObject(t, c.StorageV1().CSIDrivers().Create, &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}, c.StorageV1().CSIDrivers().Delete, name)
	}
	csiDriver("stg.csi.unitlet.test", false, storagev1.FileFSGroupPolicy, nil)
	// The directory driver asks for the pods' service account tokens and to be published
	// again at every resync, as secrets-store or cert-manager's CSI drivers do.
	csiDriver("dir.csi.unitlet.test", false, storagev1.NoneFSGroupPolicy, func(s *storagev1.CSIDriverSpec) {
		s.TokenRequests = []storagev1.TokenRequest{{Audience: "unitlet-csi-test", ExpirationSeconds: ptr.To[int64](600)}}
		s.RequiresRepublish = ptr.To(true)
	}, storagev1.VolumeLifecyclePersistent, storagev1.VolumeLifecycleEphemeral)
	csiDriver("att.csi.unitlet.test", true, storagev1.NoneFSGroupPolicy, nil)
	stack.WaitFor(t, 30*time.Second, "the drivers in the node's CSINode", func(ctx context.Context) (bool, string) {
		cn, err := c.StorageV1().CSINodes().Get(ctx, podsyncNode, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		n := 0
		for _, d := range cn.Spec.Drivers {
			if strings.HasSuffix(d.Name, ".csi.unitlet.test") && d.Name != "reg.csi.unitlet.test" {
				n++
			}
		}
		return n == 3, fmt.Sprintf("%+v", cn.Spec.Drivers)
	})

	pvs, pvcs := c.CoreV1().PersistentVolumes(), c.CoreV1().PersistentVolumeClaims("default")
	csiClaim := func(name, driver, handle, fsType string) {
		t.Helper()
		createObject(t, pvs.Create, &corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PersistentVolumeSpec{
				PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: driver, VolumeHandle: handle, FSType: fsType}},
				AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("32Mi")},
				StorageClassName:       "", PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			},
		}, pvs.Delete, name)
		createObject(t, pvcs.Create, &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PersistentVolumeClaimSpec{
				StorageClassName: ptr.To(""), VolumeName: name,
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("32Mi")}},
			},
		}, pvcs.Delete, name)
	}
	csiClaim("csi-stg", "stg.csi.unitlet.test", "vol-stg", "ext4")
	csiClaim("csi-dir", "dir.csi.unitlet.test", "vol-dir", "")
	csiClaim("csi-att", "att.csi.unitlet.test", "vol-att", "")
	claimPod := func(name, claim, script string, fsGroup *int64) *corev1.Pod {
		p := busyboxPod(name, script)
		p.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}}
		p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
		if fsGroup != nil {
			p.Spec.SecurityContext = &corev1.PodSecurityContext{FSGroup: fsGroup}
		}
		return p
	}

	// The staging driver says the volume is failing, from the start: its stats carry it.
	stg.SetCondition("vol-stg", "the test says the disk is failing")
	// The staging driver: the first pod writes, exits, and finds its file when restarted.
	a := createPod(t, claimPod("csi-stg-a", "csi-stg", "if [ -f /data/a ]; then while true; do sleep 1; done; fi; echo from-a >/data/a; exit 1", ptr.To[int64](2345)))
	stack.WaitFor(t, 2*time.Minute, "csi-stg-a running again after its container's restart", func(ctx context.Context) (bool, string) {
		p, err := c.CoreV1().Pods("default").Get(ctx, "csi-stg-a", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		cs := p.Status.ContainerStatuses
		return len(cs) == 1 && cs[0].Ready && cs[0].RestartCount >= 1, fmt.Sprintf("%s %+v", p.Status.Phase, cs)
	})
	b := createPod(t, claimPod("csi-stg-b", "csi-stg", "cat /data/a; while true; do sleep 1; done", nil))
	apiPodRunningReady(t, "csi-stg-b", 2*time.Minute)
	if out := strings.TrimSpace(mustInPod(t, "csi-stg-b", "cat", "/data/a")); out != "from-a" {
		t.Errorf("csi-stg-b reads %q from the shared CSI volume, want csi-stg-a's from-a", out)
	}
	staging := filepath.Join(root, "plugins", "kubernetes.io", "csi", "stg.csi.unitlet.test", fmt.Sprintf("%x", sha256.Sum256([]byte("vol-stg"))), "globalmount")
	targetOf := func(p *corev1.Pod, pv string) string {
		return filepath.Join(root, "pods", string(p.UID), "volumes", "kubernetes.io~csi", pv, "mount")
	}
	// wantCalls compares a volume's calls, its republishes (a NodePublishVolume to a
	// target published before) left out.
	wantCalls := func(d *csidriver.Driver, handle string, want ...string) {
		t.Helper()
		var got []string
		published := map[string]bool{}
		for _, call := range d.Calls() {
			if call.VolumeID != handle {
				continue
			}
			if call.Method == "NodePublishVolume" {
				if published[call.Target] {
					continue
				}
				published[call.Target] = true
			}
			got = append(got, call.Method)
		}
		if !slices.Equal(got, want) {
			t.Errorf("the driver's calls for %s: %v, want %v", handle, d.VolumeCalls(handle), want)
		}
	}
	wantCalls(stg, "vol-stg", "NodeStageVolume", "NodePublishVolume", "NodePublishVolume")
	for _, call := range stg.Calls() {
		switch call.Method {
		case "NodeStageVolume":
			if call.Staging != staging || call.Capability.GetMount().GetFsType() != "ext4" {
				t.Errorf("NodeStageVolume at %q with %v, want %s with fsType ext4", call.Staging, call.Capability, staging)
			}
		case "NodePublishVolume":
			pod := call.VolumeContext["csi.storage.k8s.io/pod.name"]
			want := map[string]string{"csi-stg-a": targetOf(a, "csi-stg"), "csi-stg-b": targetOf(b, "csi-stg")}[pod]
			if call.Target != want || call.Staging != staging || call.VolumeContext["csi.storage.k8s.io/pod.namespace"] != "default" {
				t.Errorf("NodePublishVolume to %q from %q with context %v, want a pod's target %q from %s with its identity", call.Target, call.Staging, call.VolumeContext, want, staging)
			}
		}
	}
	var st syscall.Stat_t
	if err := syscall.Stat(targetOf(a, "csi-stg"), &st); err != nil || st.Gid != 2345 {
		t.Errorf("the published volume's group %d (%v), want csi-stg-a's fsGroup 2345 (fsGroupPolicy File)", st.Gid, err)
	}

	// The driver's NodeGetVolumeStats: the claim's kubelet_volume_stats_* on /metrics (the
	// ext4 image's size, not the host's disk), its health abnormal, and a
	// VolumeConditionAbnormal event on the pod.
	stack.WaitFor(t, 90*time.Second, "kubelet_volume_stats_* of claim csi-stg from the driver", func(ctx context.Context) (bool, string) {
		fams, err := scrapeNode(ctx, t, "metrics")
		if err != nil {
			return false, err.Error()
		}
		capacity := byLabel(fams["kubelet_volume_stats_capacity_bytes"], "persistentvolumeclaim")["csi-stg"]
		abnormal, ok := byLabel(fams["kubelet_volume_stats_health_status_abnormal"], "persistentvolumeclaim")["csi-stg"]
		used := byLabel(fams["kubelet_volume_stats_used_bytes"], "persistentvolumeclaim")["csi-stg"]
		return capacity > 16<<20 && capacity <= 32<<20 && used > 0 && ok && abnormal == 1, fmt.Sprintf("capacity %v, used %v, abnormal %v (%v)", capacity, used, abnormal, ok)
	})
	stack.WaitFor(t, time.Minute, "csi-stg-a: a VolumeConditionAbnormal event", func(ctx context.Context) (bool, string) {
		evs := podEvents(ctx, t, "csi-stg-a")
		return strings.Contains(evs, "VolumeConditionAbnormal") && strings.Contains(evs, "Volume data: the test says the disk is failing"), evs
	})

	// The driver without staging.
	dirPod := createPod(t, claimPod("csi-dir", "csi-dir", "echo from-dir >/data/f; while true; do sleep 1; done", ptr.To[int64](2345)))
	apiPodRunningReady(t, "csi-dir", 2*time.Minute)
	if got, err := os.ReadFile(filepath.Join(state, "dir.csi.unitlet.test", "vol-dir", "f")); err != nil || strings.TrimSpace(string(got)) != "from-dir" {
		t.Errorf("the pod's write in the driver's directory: %q %v", got, err)
	}
	wantCalls(dir, "vol-dir", "NodePublishVolume")

	// Expanded online, the test as the external resizer after its ControllerExpandVolume:
	// the PV grown to 64Mi, the claim's status saying node expansion is pending. Within a
	// sync period unitlet-volumes has the driver expand it on the node (NodeExpandVolume)
	// and records it in the claim's status.
	pvDir, err := pvs.Get(ctx, "csi-dir", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pvDir.Spec.Capacity = corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("64Mi")}
	if _, err := pvs.Update(ctx, pvDir, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	claimDir, err := pvcs.Get(ctx, "csi-dir", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	claimDir.Status.AllocatedResourceStatuses = map[corev1.ResourceName]corev1.ClaimResourceStatus{corev1.ResourceStorage: corev1.PersistentVolumeClaimNodeResizePending}
	claimDir.Status.AllocatedResources = corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("64Mi")}
	claimDir.Status.Conditions = []corev1.PersistentVolumeClaimCondition{{Type: corev1.PersistentVolumeClaimFileSystemResizePending, Status: corev1.ConditionTrue}}
	if _, err := pvcs.UpdateStatus(ctx, claimDir, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	stack.WaitFor(t, 2*time.Minute, "claim csi-dir expanded on the node", func(ctx context.Context) (bool, string) {
		got, err := pvcs.Get(ctx, "csi-dir", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		capacity := got.Status.Capacity[corev1.ResourceStorage]
		return capacity.Cmp(resource.MustParse("64Mi")) == 0 && got.Status.AllocatedResourceStatuses == nil && len(got.Status.Conditions) == 0,
			fmt.Sprintf("capacity %s, resize status %v, conditions %v", capacity.String(), got.Status.AllocatedResourceStatuses, got.Status.Conditions)
	})
	stack.WaitFor(t, time.Minute, "a FileSystemResizeSuccessful event", func(ctx context.Context) (bool, string) {
		evs := podEvents(ctx, t, "csi-dir")
		return strings.Contains(evs, "FileSystemResizeSuccessful"), evs
	})

	wantCalls(dir, "vol-dir", "NodePublishVolume", "NodeExpandVolume")
	// Republished at the resync that expanded it, each time with the pod's token for the
	// CSIDriver's audience.
	publishes := 0
	for _, call := range dir.Calls() {
		if call.Method != "NodePublishVolume" || call.VolumeID != "vol-dir" {
			continue
		}
		publishes++
		var tokens map[string]struct {
			Token               string `json:"token"`
			ExpirationTimestamp string `json:"expirationTimestamp"`
		}
		if err := json.Unmarshal([]byte(call.VolumeContext["csi.storage.k8s.io/serviceAccount.tokens"]), &tokens); err != nil ||
			strings.Count(tokens["unitlet-csi-test"].Token, ".") != 2 || tokens["unitlet-csi-test"].ExpirationTimestamp == "" {
			t.Errorf("the tokens in NodePublishVolume's volume context: %v %v, want a JWT for audience unitlet-csi-test", tokens, err)
		}
	}
	if publishes < 2 {
		t.Errorf("vol-dir published %d times by now, want it republished at the resync (requiresRepublish)", publishes)
	}

	// Inline: published under the kubelet's handle for the pod's volume, with the pod's
	// identity and ephemeral=true; refused by a driver without the Ephemeral mode.
	inlinePod := func(name, driver string) *corev1.Pod {
		p := busyboxPod(name, "echo inline >/data/f; while true; do sleep 1; done")
		p.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: driver, VolumeAttributes: map[string]string{"size": "1"}}}}}
		p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
		return p
	}
	inline := createPod(t, inlinePod("csi-inline", "dir.csi.unitlet.test"))
	createPod(t, inlinePod("csi-inline-refused", "stg.csi.unitlet.test"))
	apiPodRunningReady(t, "csi-inline", 2*time.Minute)
	inlineHandle := fmt.Sprintf("csi-%x", sha256.Sum256([]byte(string(inline.UID)+"data")))
	if got, err := os.ReadFile(filepath.Join(state, "dir.csi.unitlet.test", inlineHandle, "f")); err != nil || strings.TrimSpace(string(got)) != "inline" {
		t.Errorf("the inline volume's write in the driver's directory for handle %s: %q %v", inlineHandle, got, err)
	}
	wantCalls(dir, inlineHandle, "NodePublishVolume")
	for _, call := range dir.Calls() {
		if call.VolumeID == inlineHandle && (call.VolumeContext["csi.storage.k8s.io/ephemeral"] != "true" || call.VolumeContext["size"] != "1" || call.Target != targetOf(inline, "data")) {
			t.Errorf("the inline volume's publish: target %s, context %v; want %s, its attributes and ephemeral=true", call.Target, call.VolumeContext, targetOf(inline, "data"))
		}
	}
	stack.WaitFor(t, time.Minute, "csi-inline-refused: a FailedMount event naming the lifecycle mode", func(ctx context.Context) (bool, string) {
		evs := podEvents(ctx, t, "csi-inline-refused")
		return strings.Contains(evs, "FailedMount") && strings.Contains(evs, `does not support the volume lifecycle mode "Ephemeral"`), evs
	})

	// Attached by the test, as an external attacher would.
	attPod := createPod(t, claimPod("csi-att", "csi-att", "while true; do sleep 1; done", nil))
	attachment := fmt.Sprintf("csi-%x", sha256.Sum256([]byte("vol-att"+"att.csi.unitlet.test"+podsyncNode)))
	const unique = "kubernetes.io/csi/att.csi.unitlet.test^vol-att"
	inUse := func(ctx context.Context) (bool, string) {
		n, err := c.CoreV1().Nodes().Get(ctx, podsyncNode, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return slices.Contains(n.Status.VolumesInUse, unique), fmt.Sprint(n.Status.VolumesInUse)
	}
	stack.WaitFor(t, time.Minute, unique+" in the Node's volumesInUse while the pod waits", inUse)
	stack.WaitFor(t, time.Minute, "csi-att: a FailedMount event saying it is not attached yet", func(ctx context.Context) (bool, string) {
		evs := podEvents(ctx, t, "csi-att")
		return strings.Contains(evs, "FailedMount") && strings.Contains(evs, "is not attached yet"), evs
	})
	vas := c.StorageV1().VolumeAttachments()
	stack.WaitFor(t, time.Minute, "the attach/detach controller's VolumeAttachment "+attachment, func(ctx context.Context) (bool, string) {
		va, err := vas.Get(ctx, attachment, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		va.Status.Attached, va.Status.AttachmentMetadata = true, map[string]string{"devicePath": "/dev/unitlet-test"}
		_, err = vas.UpdateStatus(ctx, va, metav1.UpdateOptions{})
		return err == nil, errString(err)
	})
	apiPodRunningReady(t, "csi-att", 2*time.Minute)
	for _, call := range att.Calls() {
		if call.Method == "NodePublishVolume" && call.PublishContext["devicePath"] != "/dev/unitlet-test" {
			t.Errorf("NodePublishVolume's publish context %v, want the VolumeAttachment's metadata", call.PublishContext)
		}
	}
	wantCalls(att, "vol-att", "NodePublishVolume")

	// Deleted one by one: the volume unstaged after its last pod only.
	gone := func(pod string, p *corev1.Pod, pv string) {
		t.Helper()
		if err := c.CoreV1().Pods("default").Delete(ctx, pod, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		dir := filepath.Dir(targetOf(p, pv))
		stack.WaitFor(t, time.Minute, pod+"'s CSI volume torn down", func(context.Context) (bool, string) {
			_, err := os.Stat(dir)
			return errors.Is(err, os.ErrNotExist), dir + ": " + errString(err)
		})
	}
	gone("csi-stg-a", a, "csi-stg")
	wantCalls(stg, "vol-stg", "NodeStageVolume", "NodePublishVolume", "NodePublishVolume", "NodeUnpublishVolume")
	gone("csi-stg-b", b, "csi-stg")
	stack.WaitFor(t, 30*time.Second, "vol-stg unstaged", func(context.Context) (bool, string) {
		_, err := os.Stat(filepath.Dir(staging))
		return errors.Is(err, os.ErrNotExist), errString(err)
	})
	wantCalls(stg, "vol-stg", "NodeStageVolume", "NodePublishVolume", "NodePublishVolume", "NodeUnpublishVolume", "NodeUnpublishVolume", "NodeUnstageVolume")
	gone("csi-dir", dirPod, "csi-dir")
	gone("csi-inline", inline, "data")
	wantCalls(dir, inlineHandle, "NodePublishVolume", "NodeUnpublishVolume")
	wantCalls(dir, "vol-dir", "NodePublishVolume", "NodeExpandVolume", "NodeUnpublishVolume")
	gone("csi-att", attPod, "csi-att")
	wantCalls(att, "vol-att", "NodePublishVolume", "NodeUnpublishVolume")
	stack.WaitFor(t, time.Minute, unique+" out of volumesInUse, and detached", func(ctx context.Context) (bool, string) {
		if used, list := inUse(ctx); used {
			return false, "volumesInUse " + list
		}
		_, err := vas.Get(ctx, attachment, metav1.GetOptions{})
		return apierrors.IsNotFound(err), "VolumeAttachment: " + errString(err)
	})
	if mt := mountTable(t); strings.Contains(mt, "kubernetes.io~csi") || strings.Contains(mt, staging) {
		t.Errorf("CSI mounts left on the host:\n%s", grepLines(mt, "csi"))
	}
	if out, err := exec.Command("losetup", "-j", filepath.Join(state, "stg.csi.unitlet.test", "vol-stg.img")).CombinedOutput(); err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("loop devices left on vol-stg's image: %s %v", out, err)
	}
}

// grepLines are the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
