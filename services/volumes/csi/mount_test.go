package csi

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// fakeNode is a driver's Node service that records its calls; a publish makes the target
// directory, an unpublish removes it (no mounts: the harness test has the real ones).
type fakeNode struct {
	csipb.UnimplementedNodeServer
	stage bool
	// stats: the driver has GET_VOLUME_STATS and VOLUME_CONDITION.
	stats bool
	mu    sync.Mutex
	calls []string
	// publishContext is the last publish's.
	publishContext map[string]string
	// volumeContext is the last publish's.
	volumeContext map[string]string
}

func (f *fakeNode) record(s string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, s)
}

func (f *fakeNode) take() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.calls
	f.calls = nil
	return out
}

func (f *fakeNode) NodeGetCapabilities(context.Context, *csipb.NodeGetCapabilitiesRequest) (*csipb.NodeGetCapabilitiesResponse, error) {
	res := &csipb.NodeGetCapabilitiesResponse{}
	add := func(t csipb.NodeServiceCapability_RPC_Type) {
		res.Capabilities = append(res.Capabilities, &csipb.NodeServiceCapability{Type: &csipb.NodeServiceCapability_Rpc{Rpc: &csipb.NodeServiceCapability_RPC{Type: t}}})
	}
	if f.stage {
		add(csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME)
	}
	if f.stats {
		add(csipb.NodeServiceCapability_RPC_GET_VOLUME_STATS)
		add(csipb.NodeServiceCapability_RPC_VOLUME_CONDITION)
	}
	return res, nil
}

func (f *fakeNode) NodeStageVolume(_ context.Context, r *csipb.NodeStageVolumeRequest) (*csipb.NodeStageVolumeResponse, error) {
	if r.GetVolumeCapability().GetBlock() != nil {
		f.record("stage-block " + r.GetVolumeId())
		return &csipb.NodeStageVolumeResponse{}, nil
	}
	f.record("stage " + r.GetVolumeId())
	return &csipb.NodeStageVolumeResponse{}, nil
}

func (f *fakeNode) NodeUnstageVolume(_ context.Context, r *csipb.NodeUnstageVolumeRequest) (*csipb.NodeUnstageVolumeResponse, error) {
	f.record("unstage " + r.GetVolumeId())
	return &csipb.NodeUnstageVolumeResponse{}, nil
}

func (f *fakeNode) NodePublishVolume(_ context.Context, r *csipb.NodePublishVolumeRequest) (*csipb.NodePublishVolumeResponse, error) {
	if r.GetVolumeCapability().GetBlock() != nil {
		// A block volume: the device file the driver makes, named by the pod's UID.
		f.record("publish-block " + r.GetVolumeId() + " " + filepath.Base(r.GetTargetPath()))
		return &csipb.NodePublishVolumeResponse{}, os.WriteFile(r.GetTargetPath(), nil, 0o600)
	}
	f.record("publish " + r.GetVolumeId() + " " + filepath.Base(filepath.Dir(filepath.Dir(filepath.Dir(filepath.Dir(r.GetTargetPath()))))))
	f.mu.Lock()
	f.publishContext, f.volumeContext = r.GetPublishContext(), r.GetVolumeContext()
	f.mu.Unlock()
	return &csipb.NodePublishVolumeResponse{}, os.MkdirAll(r.GetTargetPath(), 0o750)
}

func (f *fakeNode) NodeUnpublishVolume(_ context.Context, r *csipb.NodeUnpublishVolumeRequest) (*csipb.NodeUnpublishVolumeResponse, error) {
	f.record("unpublish " + r.GetVolumeId())
	return &csipb.NodeUnpublishVolumeResponse{}, os.RemoveAll(r.GetTargetPath())
}

// fakeObjects is the API server's CSIDrivers, VolumeAttachments and the Node's volumesInUse.
type fakeObjects struct {
	mu      sync.Mutex
	drivers map[string]*storagev1.CSIDriver
	vas     map[string]*storagev1.VolumeAttachment
	inUse   []corev1.UniqueVolumeName
}

func (f *fakeObjects) CSIDriver(_ context.Context, name string) (*storagev1.CSIDriver, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.drivers[name], nil
}

func (f *fakeObjects) VolumeAttachment(_ context.Context, name string) (*storagev1.VolumeAttachment, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if va := f.vas[name]; va != nil {
		return va, nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Group: "storage.k8s.io", Resource: "volumeattachments"}, name)
}

func (f *fakeObjects) VolumesInUse(context.Context) ([]corev1.UniqueVolumeName, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.inUse, nil
}

func (f *fakeObjects) Secret(context.Context, string, string) (map[string]string, error) {
	return nil, errors.New("no secrets here")
}

// newTestMounter serves a fake driver "fake.csi.test" and a Mounter under a temporary
// root dir.
func newTestMounter(t *testing.T, stage bool) (*Mounter, *fakeNode, *fakeObjects, string) {
	t.Helper()
	root := t.TempDir()
	sock := filepath.Join(root, "csi.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	node := &fakeNode{stage: stage}
	s := grpc.NewServer()
	csipb.RegisterNodeServer(s, node)
	go func() { _ = s.Serve(l) }()
	t.Cleanup(s.Stop)
	h := NewHandler(nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	h.drivers["fake.csi.test"] = Driver{Name: "fake.csi.test", Endpoint: sock}
	objs := &fakeObjects{drivers: map[string]*storagev1.CSIDriver{
		"fake.csi.test": {ObjectMeta: metav1.ObjectMeta{Name: "fake.csi.test"}, Spec: storagev1.CSIDriverSpec{AttachRequired: ptr.To(false)}},
	}, vas: map[string]*storagev1.VolumeAttachment{}}
	m := NewMounter(MounterOptions{Drivers: h, API: objs, RootDir: root, NodeName: "node-1", Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	return m, node, objs, root
}

func testPV(handle string) *corev1.PersistentVolume {
	return &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-" + handle}, Spec: corev1.PersistentVolumeSpec{
		AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: "fake.csi.test", VolumeHandle: handle}},
	}}
}

func publication(root, uid string, pv *corev1.PersistentVolume) Publication {
	return Publication{
		Pod: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "pod-" + uid, Namespace: "ns", UID: types.UID(uid)}},
		PV:  pv, Dir: filepath.Join(root, "pods", uid, "volumes", "kubernetes.io~csi", pv.Name),
	}
}

// Staged once for the node, published per pod; unpublished per pod, unstaged after the
// last; every directory gone.
func TestStagedOncePublishedPerPodUnstagedAfterTheLast(t *testing.T) {
	ctx := context.Background()
	m, node, _, root := newTestMounter(t, true)
	pv := testPV("v1")
	a, b := publication(root, "a", pv), publication(root, "b", pv)
	for _, p := range []Publication{a, b} {
		if _, err := m.SetUp(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	if got := node.take(); !slices.Equal(got, []string{"stage v1", "publish v1 a", "publish v1 b"}) {
		t.Errorf("set-up calls %q, want one stage and a publish per pod", got)
	}
	if err := m.TearDown(ctx, a.Dir); err != nil {
		t.Fatal(err)
	}
	if got := node.take(); !slices.Equal(got, []string{"unpublish v1"}) {
		t.Errorf("first teardown's calls %q, want an unpublish only", got)
	}
	if err := m.TearDown(ctx, b.Dir); err != nil {
		t.Fatal(err)
	}
	if got := node.take(); !slices.Equal(got, []string{"unpublish v1", "unstage v1"}) {
		t.Errorf("last teardown's calls %q, want unpublish then unstage", got)
	}
	for _, dir := range []string{a.Dir, b.Dir, filepath.Dir(m.StagingPath("fake.csi.test", "v1"))} {
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after the teardowns: %v, want it gone", dir, err)
		}
	}
}

// A restart between a pod's unpublish and its volume's unstage: the reconcile round's
// UnstageOrphans unstages it; a volume still published stays staged.
func TestUnstageOrphansAfterARestart(t *testing.T) {
	ctx := context.Background()
	m, node, _, root := newTestMounter(t, true)
	kept, orphan := publication(root, "a", testPV("kept")), publication(root, "b", testPV("orphan"))
	for _, p := range []Publication{kept, orphan} {
		if _, err := m.SetUp(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	if err := removeMountDir(orphan.Dir); err != nil { // the unpublish done, the unstage not
		t.Fatal(err)
	}
	node.take()
	if err := m.UnstageOrphans(ctx); err != nil {
		t.Fatal(err)
	}
	if got := node.take(); !slices.Equal(got, []string{"unstage orphan"}) {
		t.Errorf("UnstageOrphans' calls %q, want the orphan unstaged only", got)
	}
}

// A driver that needs attaching (no CSIDriver object): the volume is in use from its
// first try; the set-up waits for the Node to report it, then for the VolumeAttachment,
// whose metadata is the publish context. Deleted before it was published, it is not
// unpublished, and leaves volumesInUse.
func TestAttachRequiredWaitsForVolumesInUseAndTheAttachment(t *testing.T) {
	ctx := context.Background()
	m, node, objs, root := newTestMounter(t, false)
	delete(objs.drivers, "fake.csi.test")
	p := publication(root, "a", testPV("v1"))
	const unique = "kubernetes.io/csi/fake.csi.test^v1"
	if _, err := m.SetUp(ctx, p); err == nil || !strings.Contains(err.Error(), "not yet in the Node's status.volumesInUse") {
		t.Fatalf("set-up before the Node reports the volume: %v", err)
	}
	if got, err := m.InUse(); err != nil || !slices.Equal(got, []string{unique}) {
		t.Fatalf("InUse = %q, %v; want the waiting volume", got, err)
	}
	objs.inUse = []corev1.UniqueVolumeName{unique}
	if _, err := m.SetUp(ctx, p); err == nil || !strings.Contains(err.Error(), "is not attached yet") {
		t.Fatalf("set-up before the attachment: %v", err)
	}
	name := AttachmentName("v1", "fake.csi.test", "node-1")
	objs.vas[name] = &storagev1.VolumeAttachment{Status: storagev1.VolumeAttachmentStatus{AttachError: &storagev1.VolumeError{Message: "no such disk"}}}
	if _, err := m.SetUp(ctx, p); err == nil || !strings.Contains(err.Error(), "the attacher says: no such disk") {
		t.Fatalf("set-up with an attach error: %v", err)
	}
	if got := node.take(); len(got) != 0 {
		t.Fatalf("calls before the attach: %q, want none", got)
	}
	q := publication(root, "b", testPV("v1"))
	objs.vas[name] = &storagev1.VolumeAttachment{Status: storagev1.VolumeAttachmentStatus{Attached: true, AttachmentMetadata: map[string]string{"lun": "3"}}}
	if _, err := m.SetUp(ctx, q); err != nil {
		t.Fatal(err)
	}
	if node.publishContext["lun"] != "3" {
		t.Errorf("publish context %v, want the attachment's metadata", node.publishContext)
	}
	node.take()
	if err := m.TearDown(ctx, p.Dir); err != nil {
		t.Fatal(err)
	}
	if got := node.take(); len(got) != 0 {
		t.Errorf("teardown of a volume never published: calls %q, want none", got)
	}
	if err := m.TearDown(ctx, q.Dir); err != nil {
		t.Fatal(err)
	}
	if got, err := m.InUse(); err != nil || len(got) != 0 {
		t.Errorf("InUse after the teardowns = %q, %v; want none", got, err)
	}
}

// What unitlet does not do yet, or the driver does not offer, is refused with a reason.
func TestCSIRefusals(t *testing.T) {
	ctx := context.Background()
	m, node, objs, root := newTestMounter(t, false)
	for name, tc := range map[string]struct {
		driver *storagev1.CSIDriverSpec
		pv     func(*corev1.PersistentVolume)
		want   string
	}{
		"tokenRequests":  {driver: &storagev1.CSIDriverSpec{AttachRequired: ptr.To(false), TokenRequests: []storagev1.TokenRequest{{Audience: "x"}}}, want: "sets tokenRequests"},
		"ephemeral only": {driver: &storagev1.CSIDriverSpec{AttachRequired: ptr.To(false), VolumeLifecycleModes: []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecycleEphemeral}}, want: `does not support the volume lifecycle mode "Persistent"`},
		"unregistered":   {pv: func(pv *corev1.PersistentVolume) { pv.Spec.CSI.Driver = "gone.csi.test" }, want: `CSI driver "gone.csi.test" is not registered on this node`},
		"no handle":      {pv: func(pv *corev1.PersistentVolume) { pv.Spec.CSI.VolumeHandle = "" }, want: "spec.csi.volumeHandle is empty"},
		"publish secret": {pv: func(pv *corev1.PersistentVolume) {
			pv.Spec.CSI.NodePublishSecretRef = &corev1.SecretReference{Namespace: "ns", Name: "s"}
		}, want: "fetching nodePublishSecretRef ns/s failed"},
	} {
		t.Run(name, func(t *testing.T) {
			if tc.driver != nil {
				objs.drivers["fake.csi.test"].Spec = *tc.driver
			} else {
				objs.drivers["fake.csi.test"].Spec = storagev1.CSIDriverSpec{AttachRequired: ptr.To(false)}
			}
			pv := testPV("v-" + strings.ReplaceAll(name, " ", "-"))
			if tc.pv != nil {
				tc.pv(pv)
			}
			if _, err := m.SetUp(ctx, publication(root, "a", pv)); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("set-up: %v, want an error saying %q", err, tc.want)
			}
			if got := node.take(); slices.ContainsFunc(got, func(c string) bool { return strings.HasPrefix(c, "publish") }) {
				t.Errorf("calls %q, want no publish", got)
			}
		})
	}
}

func (f *fakeNode) NodeGetVolumeStats(_ context.Context, r *csipb.NodeGetVolumeStatsRequest) (*csipb.NodeGetVolumeStatsResponse, error) {
	f.record("stats " + r.GetVolumeId() + " staged at " + filepath.Base(r.GetStagingTargetPath()))
	return &csipb.NodeGetVolumeStatsResponse{
		Usage: []*csipb.VolumeUsage{
			{Unit: csipb.VolumeUsage_BYTES, Total: 100, Available: 60, Used: 40},
			{Unit: csipb.VolumeUsage_INODES, Total: 10, Available: 7, Used: 3},
		},
		VolumeCondition: &csipb.VolumeCondition{Abnormal: true, Message: "bad sectors"},
	}, nil
}

// NodeGetVolumeStats: the driver's usage and condition, asked with the volume's path and
// staging path; a driver without GET_VOLUME_STATS says so (ErrNoVolumeStats).
func TestVolumeStatsFromTheDriver(t *testing.T) {
	ctx := context.Background()
	m, node, _, root := newTestMounter(t, true)
	p := publication(root, "a", testPV("v1"))
	target, err := m.SetUp(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Stats(ctx, target); !errors.Is(err, ErrNoVolumeStats) {
		t.Fatalf("stats from a driver without GET_VOLUME_STATS: %v, want ErrNoVolumeStats", err)
	}
	node.stats = true
	node.take()
	st, err := m.Stats(ctx, target)
	if err != nil {
		t.Fatal(err)
	}
	want := VolumeStats{UsedBytes: 40, CapacityBytes: 100, AvailableBytes: 60, Inodes: 10, InodesFree: 7, InodesUsed: 3, Condition: &VolumeCondition{Abnormal: true, Message: "bad sectors"}}
	if st.UsedBytes != want.UsedBytes || st.CapacityBytes != want.CapacityBytes || st.AvailableBytes != want.AvailableBytes ||
		st.Inodes != want.Inodes || st.InodesFree != want.InodesFree || st.InodesUsed != want.InodesUsed || st.Condition == nil || *st.Condition != *want.Condition {
		t.Errorf("stats %+v, want %+v", st, want)
	}
	if got := node.take(); !slices.Equal(got, []string{"stats v1 staged at globalmount"}) {
		t.Errorf("calls %q, want NodeGetVolumeStats with the staging path", got)
	}
}

// fakeTokens hands out a token per audience.
type fakeTokens struct{}

func (fakeTokens) TokenWithExpiry(_ context.Context, pod *corev1.Pod, sa, audience string, _ int64) ([]byte, time.Time, error) {
	return []byte("token-" + sa + "-" + audience + "-" + pod.Name), time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC), nil
}

// A CSIDriver with tokenRequests and requiresRepublish: the pod's tokens in the volume
// context (the kubelet's JSON), and the volume published again at each set-up.
func TestTokensAndRepublish(t *testing.T) {
	ctx := context.Background()
	m, node, objs, root := newTestMounter(t, false)
	objs.drivers["fake.csi.test"].Spec = storagev1.CSIDriverSpec{AttachRequired: ptr.To(false), RequiresRepublish: ptr.To(true),
		TokenRequests: []storagev1.TokenRequest{{Audience: "aud-1", ExpirationSeconds: ptr.To[int64](600)}}}
	if _, err := m.SetUp(ctx, publication(root, "a", testPV("v1"))); err == nil || !strings.Contains(err.Error(), "no service account tokens") {
		t.Fatalf("tokenRequests without tokens: %v", err)
	}
	m.tokens = fakeTokens{}
	p := publication(root, "a", testPV("v1"))
	target, err := m.SetUp(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"aud-1":{"token":"token-default-aud-1-pod-a","expirationTimestamp":"2030-01-02T03:04:05Z"}}`
	if got := node.volumeContext["csi.storage.k8s.io/serviceAccount.tokens"]; got != want {
		t.Errorf("tokens in the volume context %s, want %s", got, want)
	}
	if !m.NeedsRepublish(target) {
		t.Error("NeedsRepublish false for a requiresRepublish driver's volume")
	}
	// Published for real (the fake driver only makes the directory): a bind mount.
	bindOver(t, target)
	node.take()
	if _, err := m.SetUp(ctx, p); err != nil {
		t.Fatal(err)
	}
	if got := node.take(); !slices.Equal(got, []string{"publish v1 a"}) {
		t.Errorf("a second set-up's calls %q, want a republish", got)
	}
	// Without requiresRepublish, a published volume is left as it is.
	objs.drivers["fake.csi.test"].Spec.RequiresRepublish = nil
	q := publication(root, "b", testPV("v2"))
	qt, err := m.SetUp(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	bindOver(t, qt)
	node.take()
	if _, err := m.SetUp(ctx, q); err != nil {
		t.Fatal(err)
	}
	if got := node.take(); len(got) != 0 {
		t.Errorf("a second set-up of a published volume: calls %q, want none", got)
	}
}

// bindOver bind-mounts an empty directory over target, as a driver's publish would, until
// the test ends.
func bindOver(t *testing.T, target string) {
	t.Helper()
	if err := unix.Mount(t.TempDir(), target, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(target, 0) })
}

// A CSIDriver with seLinuxMount and a pod with seLinuxOptions: refused on an SELinux
// host (no context computed), mounted as the kubelet does on a host without SELinux.
func TestSELinuxMountRefusedOnAnSELinuxHost(t *testing.T) {
	ctx := context.Background()
	m, _, objs, root := newTestMounter(t, false)
	objs.drivers["fake.csi.test"].Spec.SELinuxMount = ptr.To(true)
	p := publication(root, "a", testPV("v1"))
	p.Pod.Spec.SecurityContext = &corev1.PodSecurityContext{SELinuxOptions: &corev1.SELinuxOptions{Level: "s0:c1,c2"}}
	m.selinux = func() bool { return true }
	if _, err := m.SetUp(ctx, p); err == nil || !strings.Contains(err.Error(), "sets seLinuxMount and pod ns/pod-a sets seLinuxOptions") {
		t.Fatalf("on an SELinux host: %v, want the refusal", err)
	}
	m.selinux = func() bool { return false }
	if _, err := m.SetUp(ctx, p); err != nil {
		t.Fatalf("without SELinux: %v", err)
	}
}
