package volumes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/utils/ptr"
)

// fakeClaims serves claims and volumes from maps, and the node's labels.
type fakeClaims struct {
	reads  int
	pvcs   map[string]*corev1.PersistentVolumeClaim
	pvs    map[string]*corev1.PersistentVolume
	labels map[string]string
}

func (f *fakeClaims) Claim(_ context.Context, ns, name string) (*corev1.PersistentVolumeClaim, error) {
	f.reads++
	if c := f.pvcs[ns+"/"+name]; c != nil {
		return c.DeepCopy(), nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "persistentvolumeclaims"}, name)
}

func (f *fakeClaims) Volume(_ context.Context, name string) (*corev1.PersistentVolume, error) {
	if v := f.pvs[name]; v != nil {
		return v.DeepCopy(), nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "persistentvolumes"}, name)
}

func (f *fakeClaims) NodeLabels(context.Context) (map[string]string, error) { return f.labels, nil }

// PatchClaimStatus applies a strategic merge patch to the stored claim's status, refusing
// a stale resourceVersion as the API server does.
func (f *fakeClaims) PatchClaimStatus(_ context.Context, ns, name string, patch []byte) (*corev1.PersistentVolumeClaim, error) {
	c := f.pvcs[ns+"/"+name]
	if c == nil {
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "persistentvolumeclaims"}, name)
	}
	var meta struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(patch, &meta); err != nil {
		return nil, err
	}
	if meta.Metadata.ResourceVersion != c.ResourceVersion {
		return nil, apierrors.NewConflict(schema.GroupResource{Resource: "persistentvolumeclaims"}, name, errors.New("stale resourceVersion"))
	}
	old, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	merged, err := strategicpatch.StrategicMergePatch(old, patch, corev1.PersistentVolumeClaim{})
	if err != nil {
		return nil, err
	}
	out := &corev1.PersistentVolumeClaim{}
	if err := json.Unmarshal(merged, out); err != nil {
		return nil, err
	}
	out.ResourceVersion = c.ResourceVersion + "1"
	f.pvcs[ns+"/"+name] = out
	return out.DeepCopy(), nil
}

// bind adds a claim bound to a volume with src, and returns the volume.
func (f *fakeClaims) bind(claim, pv string, src corev1.PersistentVolumeSource, modes ...corev1.PersistentVolumeAccessMode) *corev1.PersistentVolume {
	c := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: claim, Namespace: "default", UID: types.UID("claim-" + claim)},
		Spec:       corev1.PersistentVolumeClaimSpec{VolumeName: pv, AccessModes: modes},
		Status:     corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound},
	}
	v := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: pv},
		Spec: corev1.PersistentVolumeSpec{PersistentVolumeSource: src, AccessModes: modes,
			ClaimRef: &corev1.ObjectReference{Namespace: "default", Name: claim, UID: c.UID}},
	}
	f.pvcs["default/"+claim], f.pvs[pv] = c, v
	return v
}

func newClaimsManager(t *testing.T) (*Manager, *fakeClaims) {
	t.Helper()
	m, _ := newTestManager(t, &fakePayloads{})
	f := &fakeClaims{pvcs: map[string]*corev1.PersistentVolumeClaim{}, pvs: map[string]*corev1.PersistentVolume{}, labels: map[string]string{"kubernetes.io/hostname": "node-1"}}
	m.claims = f
	return m, f
}

func claimPod(uid, claim string, readOnly bool) *corev1.Pod {
	return testPod(uid, []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim, ReadOnly: readOnly}}}},
		[]corev1.VolumeMount{{Name: "data", MountPath: "/data"}})
}

// blockClaimPod is a pod whose container has claim's volume as the device /dev/xvda.
func blockClaimPod(uid, claim string, readOnly bool) *corev1.Pod {
	pod := testPod(uid, []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim, ReadOnly: readOnly}}}}, nil)
	pod.Spec.Containers[0].VolumeDevices = []corev1.VolumeDevice{{Name: "data", DevicePath: "/dev/xvda"}}
	return pod
}

// A CSI claim of volumeMode Block: the container gets the pod's link as a device,
// read-only for a read-only claim, never measured; the release takes the link down
// through the driver, and the pod's directories go.
func TestBlockClaimIsADevice(t *testing.T) {
	m, f := newClaimsManager(t)
	m.csi = &fakeCSI{}
	block := corev1.PersistentVolumeBlock
	f.bind("dev", "pv-dev", corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: "d.test", VolumeHandle: "h"}}).Spec.VolumeMode = &block
	for _, ro := range []bool{false, true} {
		uid := fmt.Sprintf("uid-b-%v", ro)
		cms, err := m.Prepare(context.Background(), blockClaimPod(uid, "dev", ro))
		if err != nil {
			t.Fatal(err)
		}
		link := filepath.Join(m.podsDir, uid, "volumeDevices", "kubernetes.io~csi", "pv-dev")
		if len(cms) != 1 || len(cms[0].Mounts) != 0 || len(cms[0].Devices) != 1 {
			t.Fatalf("readOnly %v: %v, want one device and no mount", ro, cms)
		}
		if d := cms[0].Devices[0]; d.HostPath != link || d.ContainerPath != "/dev/xvda" || d.ReadOnly != ro || d.Volume != "data" {
			t.Errorf("readOnly %v: device %+v, want %s at /dev/xvda read-only %v", ro, d, link, ro)
		}
		m.Measure()
		for _, v := range m.List() {
			if v.MeasureTime != nil {
				t.Errorf("block volume %s measured: %+v", v.Name, v)
			}
		}
		if err := m.Release(context.Background(), types.UID(uid)); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Lstat(filepath.Join(m.podsDir, uid, "volumeDevices")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("readOnly %v: after release, volumeDevices: %v, want it gone", ro, err)
		}
	}
}

func onNode(labels map[string]string) *corev1.VolumeNodeAffinity {
	var reqs []corev1.NodeSelectorRequirement
	for k, v := range labels {
		reqs = append(reqs, corev1.NodeSelectorRequirement{Key: k, Operator: corev1.NodeSelectorOpIn, Values: []string{v}})
	}
	return &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: reqs}}}}
}

// The kubelet's refusals, each naming the claim, and the pod waits (ErrPrepare).
func TestClaimsThatCannotBeMountedSayWhy(t *testing.T) {
	m, f := newClaimsManager(t)
	host := t.TempDir()
	f.pvcs["default/pending"] = &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "pending", Namespace: "default"},
		Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimPending}}
	f.bind("nfs", "pv-nfs", corev1.PersistentVolumeSource{NFS: &corev1.NFSVolumeSource{Server: "s", Path: "/"}})
	other := f.bind("stolen", "pv-stolen", corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: host}})
	other.Spec.ClaimRef.UID = "someone-else"
	f.bind("lost", "pv-lost", corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: host}})
	f.pvcs["default/lost"].Status.Phase = corev1.ClaimLost
	f.bind("elsewhere", "pv-elsewhere", corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: host}}).Spec.ClaimRef.Namespace = "other"
	f.bind("going", "pv-going", corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: host}})
	now := metav1.Now()
	f.pvcs["default/going"].DeletionTimestamp = &now
	block := corev1.PersistentVolumeBlock
	f.bind("block", "pv-block", corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: "/dev/null"}}).Spec.VolumeMode = &block
	f.bind("gid", "pv-gid", corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: host}}).Annotations = map[string]string{pvGIDAnnotation: "1234"}
	far := f.bind("far", "pv-far", corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: host}})
	far.Spec.NodeAffinity = onNode(map[string]string{"kubernetes.io/hostname": "node-2"})
	f.bind("farhost", "pv-farhost", corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: host}}).Spec.NodeAffinity = onNode(map[string]string{"kubernetes.io/hostname": "node-2"})
	f.bind("opts", "pv-opts", corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: host}}).Spec.MountOptions = []string{"noatime"}

	for claim, want := range map[string]string{
		"missing":   `error processing PVC default/missing: failed to fetch PVC from API server: persistentvolumeclaims "missing" not found`,
		"pending":   "error processing PVC default/pending: PVC is not bound",
		"nfs":       "PersistentVolume pv-nfs has a nfs source: unitlet-volumes mounts hostPath, local and csi persistent volumes",
		"stolen":    "error processing PVC default/stolen: found PV object pv-stolen but its pv.Spec.ClaimRef.UID someone-else does not point to claim.UID claim-stolen",
		"going":     "error processing PVC default/going: PVC is being deleted",
		"lost":      "error processing PVC default/lost: PVC is not bound: it is Lost, its PersistentVolume pv-lost is gone",
		"elsewhere": "error processing PVC default/elsewhere: found PV object pv-elsewhere but it is bound to claim other/elsewhere, not to this one",
		"block":     "volume data has volumeMode Block, but is specified in volumeMounts",
		"gid":       "PersistentVolume pv-gid has the annotation pv.beta.kubernetes.io/gid",
		"far":       "MountVolume.NodeAffinity check failed for PersistentVolume pv-far: no matching NodeSelectorTerms",
		"opts":      "PersistentVolume pv-opts sets mountOptions [noatime]",
	} {
		_, err := m.Prepare(context.Background(), claimPod("uid-"+claim, claim, false))
		var pe *ErrPrepare
		if !errors.As(err, &pe) || pe.Volume != "data" || !strings.Contains(err.Error(), want) {
			t.Errorf("claim %s: %v, want an ErrPrepare of volume data saying %q", claim, err, want)
		}
	}

	// volumeMode Block: used as a device, a char device or a hostPath PV is refused, and a
	// Filesystem volume cannot be a device.
	f.bind("fsdev", "pv-fsdev", corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: host}})
	f.bind("hostblock", "pv-hostblock", corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: host}}).Spec.VolumeMode = &block
	for claim, want := range map[string]string{
		"block":     "local PersistentVolume pv-block has volumeMode Block, but /dev/null is not a block device",
		"hostblock": "PersistentVolume pv-hostblock has volumeMode Block and a hostPath source: unitlet-volumes maps local and csi block volumes",
		"fsdev":     "volume data has volumeMode Filesystem, but is specified in volumeDevices",
	} {
		_, err := m.Prepare(context.Background(), blockClaimPod("uid-dev-"+claim, claim, false))
		var pe *ErrPrepare
		if !errors.As(err, &pe) || pe.Volume != "data" || !strings.Contains(err.Error(), want) {
			t.Errorf("claim %s as a device: %v, want an ErrPrepare of volume data saying %q", claim, err, want)
		}
	}

	m.claims = nil
	if _, err := m.Prepare(context.Background(), claimPod("uid-standalone", "nfs", false)); err == nil || !strings.Contains(err.Error(), "this node runs standalone") {
		t.Errorf("standalone: %v, want the claim refused for want of the API server", err)
	}
}

// A claim bound to a hostPath volume: the container gets the volume's path, read-only when
// the pod's claim says so.
func TestClaimOnAHostPathVolume(t *testing.T) {
	m, f := newClaimsManager(t)
	host := t.TempDir()
	f.bind("data", "pv-host", corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: host}})
	for _, ro := range []bool{false, true} {
		cms, err := m.Prepare(context.Background(), claimPod(fmt.Sprintf("uid-h-%v", ro), "data", ro))
		if err != nil {
			t.Fatal(err)
		}
		got := mountsOf(t, cms, "main")["/data"]
		if got == nil || got.HostPath != host || got.ReadOnly != ro {
			t.Errorf("readOnly %v: mount %+v, want %s read-only %v", ro, got, host, ro)
		}
	}
	// Prepared again (each reconcile period): the claim is not read again.
	reads := f.reads
	if _, err := m.Prepare(context.Background(), claimPod("uid-h-false", "data", false)); err != nil {
		t.Fatal(err)
	}
	if f.reads != reads {
		t.Errorf("a second prepare read the API %d times, want none", f.reads-reads)
	}
}

// A local volume's directory is bind-mounted at the pod's volume directory (the kubelet's
// layout), the pod's fsGroup given to it, read-only for a read-only claim; a release
// unmounts it and keeps its files.
func TestClaimOnALocalVolume(t *testing.T) {
	requireRootForMounts(t)
	m, f := newClaimsManager(t)
	disk := t.TempDir()
	if err := os.WriteFile(filepath.Join(disk, "kept"), []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	pv := f.bind("data", "pv-local", corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: disk}}, corev1.ReadWriteOnce)
	pv.Spec.NodeAffinity = onNode(map[string]string{"kubernetes.io/hostname": "node-1"})

	pod := claimPod("uid-l", "data", false)
	gid := int64(4321)
	pod.Spec.SecurityContext = &corev1.PodSecurityContext{FSGroup: &gid}
	cms, err := m.Prepare(context.Background(), pod)
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(m.podsDir, "uid-l", "volumes", "kubernetes.io~local-volume", "pv-local")
	got := mountsOf(t, cms, "main")["/data"]
	if got == nil || got.HostPath != want || got.ReadOnly {
		t.Fatalf("mount %+v, want %s read-write", got, want)
	}
	if b, err := os.ReadFile(filepath.Join(want, "kept")); err != nil || string(b) != "data" {
		t.Fatalf("the volume's file through the pod's mount: %q %v", b, err)
	}
	if err := os.WriteFile(filepath.Join(want, "new"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat(disk, &st); err != nil || st.Gid != uint32(gid) {
		t.Errorf("the local volume's group %d (%v), want the pod's fsGroup %d", st.Gid, err, gid)
	}
	// Its usage is its file system's (statfs), as the kubelet's local plugin reports it.
	m.Measure()
	for _, v := range m.List() {
		if v.PodUid == "uid-l" && (v.Plugin != pluginLocal || v.MeasureTime == nil || v.UsedBytes <= 0 || v.Path != want) {
			t.Errorf("the local volume in List: %+v, want its file system's usage at %s", v, want)
		}
	}
	// Prepared again (the reconcile loop does each period): mounted once.
	if _, err := m.Prepare(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	if n := len(mountsAt(t, want)); n != 1 {
		t.Errorf("%d mounts at %s after a second prepare, want 1", n, want)
	}

	ro := claimPod("uid-ro", "data", true)
	cms, err = m.Prepare(context.Background(), ro)
	if err != nil {
		t.Fatal(err)
	}
	roDir := mountsOf(t, cms, "main")["/data"].HostPath
	if err := os.WriteFile(filepath.Join(roDir, "denied"), []byte("x"), 0o644); err == nil {
		t.Errorf("a read-only claim's mount took a write")
	}

	for _, uid := range []types.UID{"uid-l", "uid-ro"} {
		if err := m.Release(context.Background(), uid); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(want); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the pod's volume directory after release: %v, want it gone", err)
	}
	for _, name := range []string{"kept", "new"} {
		if _, err := os.Stat(filepath.Join(disk, name)); err != nil {
			t.Errorf("the local volume's %s after release: %v, want it kept", name, err)
		}
	}
}

// A ReadWriteOncePod claim serves one pod on the node at a time.
func TestReadWriteOncePodClaimServesOnePod(t *testing.T) {
	m, f := newClaimsManager(t)
	f.bind("once", "pv-once", corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: t.TempDir()}}, corev1.ReadWriteOncePod)
	if _, err := m.Prepare(context.Background(), claimPod("uid-a", "once", false)); err != nil {
		t.Fatal(err)
	}
	_, err := m.Prepare(context.Background(), claimPod("uid-b", "once", false))
	if err == nil || !strings.Contains(err.Error(), "ReadWriteOncePod access mode and pod default/pod-uid-a on this node uses it") {
		t.Fatalf("second pod: %v, want it refused naming the first", err)
	}
	if err := m.Release(context.Background(), "uid-a"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Prepare(context.Background(), claimPod("uid-b", "once", false)); err != nil {
		t.Errorf("second pod after the first released: %v", err)
	}
}

func requireRootForMounts(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatalf("this test bind-mounts and must run as root; running as euid %d", os.Geteuid())
	}
}

// mountsAt are the mount table's entries at dir.
func mountsAt(t *testing.T, dir string) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == dir {
			out = append(out, line)
		}
	}
	return out
}

// A generic ephemeral volume is the claim <pod>-<volume>, which must be the pod's own.
func TestGenericEphemeralVolumeIsThePodsOwnClaim(t *testing.T) {
	m, f := newClaimsManager(t)
	host := t.TempDir()
	f.bind("pod-uid-e-scratch", "pv-e", corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: host}})
	pod := testPod("uid-e", []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{}}}},
		[]corev1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}})
	_, err := m.Prepare(context.Background(), pod)
	if err == nil || !strings.Contains(err.Error(), "PVC default/pod-uid-e-scratch was not created for pod default/pod-uid-e (pod is not owner)") {
		t.Fatalf("a claim the pod does not own: %v, want it refused", err)
	}
	f.pvcs["default/pod-uid-e-scratch"].OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID, Controller: ptr.To(true)}}
	cms, err := m.Prepare(context.Background(), pod)
	if err != nil {
		t.Fatal(err)
	}
	if got := mountsOf(t, cms, "main")["/scratch"]; got == nil || got.HostPath != host {
		t.Errorf("mount %+v, want the claim's volume %s", got, host)
	}
}
