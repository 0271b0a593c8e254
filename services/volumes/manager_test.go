package volumes

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	volumesv1 "github.com/unitlet/unitlet/proto/unitlet/volumes/v1"
	"github.com/unitlet/unitlet/services/volumes/atomicwriter"
	"github.com/unitlet/unitlet/services/volumes/subpath"
)

// fakePayloads gives every API-backed volume one file, or an error.
type fakePayloads struct {
	content string
	err     error
}

func (f *fakePayloads) Payload(_ context.Context, _ *corev1.Pod, v *corev1.Volume) (map[string]atomicwriter.FileProjection, error) {
	if f.err != nil {
		return nil, f.err
	}
	return map[string]atomicwriter.FileProjection{"key": {Data: []byte(f.content + ":" + v.Name), Mode: 0o644}}, nil
}

func newTestManager(t *testing.T, p Payloads) (*Manager, *clocktesting.FakeClock) {
	t.Helper()
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	m := NewManager(ManagerOptions{PodsDir: filepath.Join(t.TempDir(), "pods"), Payloads: p, Clock: clk, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	// Release what a test left mounted (subPath bind mounts, tmpfs) before TempDir's
	// RemoveAll, which would otherwise fail on them or reach through them.
	t.Cleanup(func() {
		uids, _ := m.OnDisk()
		for _, uid := range uids {
			if err := m.Release(context.Background(), uid); err != nil {
				t.Errorf("release pod %s at the end of the test: %v", uid, err)
			}
		}
	})
	return m, clk
}

func testPod(uid string, vols []corev1.Volume, mounts []corev1.VolumeMount) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metaFor(uid),
		Spec: corev1.PodSpec{
			Volumes:    vols,
			Containers: []corev1.Container{{Name: "main", VolumeMounts: mounts}, {Name: "plain"}},
		},
	}
}

func mountsOf(t *testing.T, cms []*volumesv1.ContainerMounts, container string) map[string]*volumesv1.Mount {
	t.Helper()
	out := map[string]*volumesv1.Mount{}
	for _, cm := range cms {
		if cm.Container == container {
			for _, m := range cm.Mounts {
				out[m.ContainerPath] = m
			}
		}
	}
	return out
}

func TestPrepareEmptyDirHostPathAndConfigMap(t *testing.T) {
	m, _ := newTestManager(t, &fakePayloads{content: "v1"})
	host := t.TempDir()
	pod := testPod("uid-1", []corev1.Volume{
		{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: host}}},
		{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cm"}}}},
	}, []corev1.VolumeMount{
		{Name: "scratch", MountPath: "/scratch"},
		{Name: "host", MountPath: "/host", ReadOnly: true},
		{Name: "config", MountPath: "/config"},
		{Name: "config", MountPath: "/config-key", SubPath: "key"},
	})
	cms, err := m.Prepare(context.Background(), pod)
	if err != nil {
		t.Fatal(err)
	}
	if len(cms) != 1 {
		t.Fatalf("mounts for %d containers, want only main's: %v", len(cms), cms)
	}
	got := mountsOf(t, cms, "main")
	scratch := filepath.Join(m.podsDir, "uid-1", "volumes", "kubernetes.io~empty-dir", "scratch")
	if g := got["/scratch"]; g == nil || g.HostPath != scratch || g.ReadOnly {
		t.Errorf("/scratch = %v, want %s read-write", g, scratch)
	}
	if st, err := os.Stat(scratch); err != nil || st.Mode().Perm() != 0o777 {
		t.Errorf("emptyDir %s: %v %v, want a 0777 directory", scratch, st, err)
	}
	if g := got["/host"]; g == nil || g.HostPath != host || !g.ReadOnly {
		t.Errorf("/host = %v, want %s read-only", g, host)
	}
	config := filepath.Join(m.podsDir, "uid-1", "volumes", "kubernetes.io~configmap", "config")
	if g := got["/config"]; g == nil || g.HostPath != config || !g.ReadOnly {
		t.Errorf("/config = %v, want %s, read-only as the kubelet mounts configMaps", g, config)
	}
	if b, err := os.ReadFile(filepath.Join(config, "key")); err != nil || string(b) != "v1:config" {
		t.Errorf("configMap file: %q %v", b, err)
	}
	target := filepath.Join(m.podsDir, "uid-1", "volume-subpaths", "config", "main", "3")
	if g := got["/config-key"]; g == nil || g.HostPath != target || !g.ReadOnly {
		t.Errorf("/config-key = %v, want the bind mount %s of the key's file, read-only", g, target)
	}
	if b, err := os.ReadFile(target); err != nil || string(b) != "v1:config" {
		t.Errorf("the subPath's bind mount %s shows %q, %v; want the key's content", target, b, err)
	}
	if vols := m.List(); len(vols) != 3 {
		t.Errorf("List = %v, want 3 volumes", vols)
	}
	if err := m.Release(context.Background(), "uid-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(m.podsDir, "uid-1", "volume-subpaths")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Release left the subPath mounts' directory: %v", err)
	}
}

func TestPrepareFailuresNameTheVolume(t *testing.T) {
	m, _ := newTestManager(t, &fakePayloads{err: errors.New(`configmap "cm" not found`)})
	pod := testPod("uid-2", []corev1.Volume{
		{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{}}},
	}, nil)
	_, err := m.Prepare(context.Background(), pod)
	var pe *ErrPrepare
	if !errors.As(err, &pe) || pe.Volume != "config" || !strings.Contains(err.Error(), `configmap "cm" not found`) {
		t.Errorf("Prepare = %v, want an ErrPrepare naming volume config and the cause", err)
	}

	missing := filepath.Join(t.TempDir(), "nope")
	dirType := corev1.HostPathDirectory
	pod = testPod("uid-3", []corev1.Volume{{Name: "h", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: missing, Type: &dirType}}}}, nil)
	if _, err := m.Prepare(context.Background(), pod); !errors.As(err, &pe) || pe.Volume != "h" {
		t.Errorf("hostPath Directory that does not exist: %v, want an ErrPrepare for h", err)
	}

	pod = testPod("uid-4", []corev1.Volume{{Name: "nfs", VolumeSource: corev1.VolumeSource{NFS: &corev1.NFSVolumeSource{Server: "x", Path: "/"}}}}, nil)
	if _, err := m.Prepare(context.Background(), pod); !errors.As(err, &pe) || !strings.Contains(err.Error(), "unsupported volume type") {
		t.Errorf("nfs: %v, want unsupported", err)
	}
}

func TestSubPathEscapeIsRefused(t *testing.T) {
	m, _ := newTestManager(t, &fakePayloads{content: "x"})
	vols := []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	pod := testPod("uid-5", vols, []corev1.VolumeMount{{Name: "scratch", MountPath: "/s", SubPath: "../../etc"}})
	_, err := m.Prepare(context.Background(), pod)
	var pe *ErrPrepare
	if !errors.As(err, &pe) || pe.Volume != "scratch" || !strings.Contains(err.Error(), "../../etc") {
		t.Errorf("subPath ../../etc: %v, want a refusal naming it", err)
	}
	// A symlink the container planted in the volume, pointing out of it.
	dir := filepath.Join(m.podsDir, "uid-5", "volumes", "kubernetes.io~empty-dir", "scratch")
	if err := os.Symlink("/etc", filepath.Join(dir, "escape")); err != nil {
		t.Fatal(err)
	}
	pod = testPod("uid-5", vols, []corev1.VolumeMount{{Name: "scratch", MountPath: "/s", SubPath: "escape"}})
	_, err = m.Prepare(context.Background(), pod)
	var re *subpath.RefusedError
	if !errors.As(err, &re) {
		t.Errorf("subPath through a symlink out of the volume: %v, want refused", err)
	}
}

func TestReleaseAndOrphans(t *testing.T) {
	m, clk := newTestManager(t, &fakePayloads{content: "x"})
	vols := []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	host := t.TempDir()
	if err := os.WriteFile(filepath.Join(host, "keep"), []byte("k"), 0o644); err != nil {
		t.Fatal(err)
	}
	withHost := append(vols, corev1.Volume{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: host}}})
	for _, uid := range []string{"live", "gone", "done"} {
		if _, err := m.Prepare(context.Background(), testPod(uid, withHost, nil)); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Release(context.Background(), "done"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(m.podsDir, "done", "volumes")); !os.IsNotExist(err) {
		t.Errorf("released pod's volumes still there: %v", err)
	}
	if _, err := os.Stat(filepath.Join(host, "keep")); err != nil {
		t.Errorf("release touched the hostPath: %v", err)
	}
	// A restart: a new manager sees the volumes on disk only.
	m2 := NewManager(ManagerOptions{PodsDir: m.podsDir, Payloads: m.payloads, Clock: clk, Log: m.log})
	on, _ := m2.OnDisk()
	if len(on) != 2 {
		t.Errorf("OnDisk = %v, want live and gone", on)
	}
	clk.Step(time.Minute)
	released := m2.CleanupOrphans(context.Background(), map[types.UID]bool{"live": true}, clk.Now())
	if len(released) != 1 || released[0] != "gone" {
		t.Errorf("CleanupOrphans released %v, want only gone", released)
	}
	if _, err := os.Stat(filepath.Join(m.podsDir, "live", "volumes", "kubernetes.io~empty-dir", "scratch")); err != nil {
		t.Errorf("a live pod's volume was touched: %v", err)
	}
	// A pod prepared after podsync's list was taken is not an orphan.
	since := clk.Now()
	clk.Step(time.Second)
	if _, err := m2.Prepare(context.Background(), testPod("new", vols, nil)); err != nil {
		t.Fatal(err)
	}
	if released := m2.CleanupOrphans(context.Background(), map[types.UID]bool{"live": true}, since); len(released) != 0 {
		t.Errorf("CleanupOrphans released %v, want nothing (new was prepared after the list)", released)
	}
}

// TestOrphanReleaseNeverUndoesAConcurrentPrepare: after a restart (volumes on disk, none
// in memory) podsync's Prepare of a pod arrives while an orphan release of it tears down:
// the Prepare waits for the release and sets the volume up again, so what it returns is
// never torn down under the container (the release used to run without the pod's lock).
func TestOrphanReleaseNeverUndoesAConcurrentPrepare(t *testing.T) {
	m, clk := newTestManager(t, &fakePayloads{content: "x"})
	vols := []corev1.Volume{{Name: "cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{}}}}
	pod := testPod("racy", vols, nil)
	if _, err := m.Prepare(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	m2 := NewManager(ManagerOptions{PodsDir: m.podsDir, Payloads: m.payloads, Clock: clk, Log: m.log})
	prepared := make(chan error, 1)
	m2.releasing = func(types.UID) {
		go func() {
			_, err := m2.Prepare(context.Background(), pod)
			prepared <- err
		}()
		select { // give the Prepare every chance to run now
		case err := <-prepared:
			prepared <- err
		case <-time.After(100 * time.Millisecond):
		}
	}
	since := clk.Now()
	if got := m2.CleanupOrphans(context.Background(), map[types.UID]bool{}, since); len(got) != 1 {
		t.Fatalf("released %v, want the pod nobody had", got)
	}
	if err := <-prepared; err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(m.podsDir, "racy", "volumes", "kubernetes.io~configmap", "cfg", "key")); err != nil {
		t.Fatalf("the volume Prepare returned is gone: %v", err)
	}
	if !m2.Prepared("racy") {
		t.Errorf("the pod prepared after the release is not known as prepared")
	}
}

func TestUpdatesReachTheFiles(t *testing.T) {
	p := &fakePayloads{content: "v1"}
	m, _ := newTestManager(t, p)
	pod := testPod("uid-6", []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{}}}}, nil)
	if _, err := m.Prepare(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	p.content = "v2"
	if _, err := m.Prepare(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(m.podsDir, "uid-6", "volumes", "kubernetes.io~configmap", "config", "key")
	if b, err := os.ReadFile(file); err != nil || string(b) != "v2:config" {
		t.Errorf("after an update: %q %v, want v2", b, err)
	}
}

func metaFor(uid string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: "pod-" + uid, Namespace: "default", UID: types.UID(uid)}
}

func TestNamesThatLeaveThePodDirectoryAreRefused(t *testing.T) {
	m, _ := newTestManager(t, &fakePayloads{})
	for _, uid := range []string{"", "..", "a/b"} {
		if _, err := m.Prepare(context.Background(), testPod(uid, nil, nil)); err == nil {
			t.Errorf("Prepare with uid %q: no error", uid)
		}
		if err := m.Release(context.Background(), types.UID(uid)); err == nil {
			t.Errorf("Release with uid %q: no error", uid)
		}
	}
	pod := testPod("ok", []corev1.Volume{{Name: "../x", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}, nil)
	if _, err := m.Prepare(context.Background(), pod); err == nil {
		t.Errorf("Prepare with volume name ../x: no error")
	}
}

func TestEphemeralContainersGetTheirMounts(t *testing.T) {
	m, _ := newTestManager(t, &fakePayloads{content: "v1"})
	pod := testPod("uid-eph", []corev1.Volume{
		{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
	}, nil)
	ec := func(name, subPath string) corev1.EphemeralContainer {
		return corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
			Name: name, VolumeMounts: []corev1.VolumeMount{{Name: "scratch", MountPath: "/scratch", SubPath: subPath}},
		}}
	}
	// "bad" has a subPath, which the API server forbids: podsync refuses to start it and
	// nothing is bind-mounted for it.
	pod.Spec.EphemeralContainers = []corev1.EphemeralContainer{ec("debugger", ""), ec("bad", "x")}
	cms, err := m.Prepare(context.Background(), pod)
	if err != nil {
		t.Fatal(err)
	}
	scratch := filepath.Join(m.podsDir, "uid-eph", "volumes", "kubernetes.io~empty-dir", "scratch")
	if g := mountsOf(t, cms, "debugger")["/scratch"]; g == nil || g.HostPath != scratch {
		t.Errorf("debugger's /scratch = %v, want %s", g, scratch)
	}
	if g := mountsOf(t, cms, "bad"); len(g) != 0 {
		t.Errorf("mounts for an ephemeral container with a subPath: %v", g)
	}
	if _, err := os.Lstat(filepath.Join(m.podsDir, "uid-eph", "volume-subpaths")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a subPath was bind-mounted for an ephemeral container: %v", err)
	}
}

// A reconcile round's resync of a pod released after the round listed it does not set its
// volumes up again; a pod with volumes on disk (after a restart) is set up.
func TestResyncAfterReleaseSetsNothingUp(t *testing.T) {
	ctx := context.Background()
	m, _ := newTestManager(t, &fakePayloads{})
	pod := testPod("r1", []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}, nil)
	if _, err := m.Prepare(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if err := m.Release(ctx, pod.UID); err != nil {
		t.Fatal(err)
	}
	if err := m.Resync(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if _, onDisk := m.SetUpAt(pod.UID); onDisk || m.Prepared(pod.UID) {
		t.Errorf("a released pod's resync set its volumes up again (on disk %v, prepared %v)", onDisk, m.Prepared(pod.UID))
	}
	// Volumes on disk that this process did not prepare (a restart): resynced.
	if err := os.MkdirAll(filepath.Join(m.podsDir, "r1", "volumes"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := m.Resync(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if !m.Prepared(pod.UID) {
		t.Error("a pod with volumes on disk was not resynced")
	}
}
