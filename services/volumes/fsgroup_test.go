package volumes

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
)

// TestFSGroupReachesEveryKind: with the pod's fsGroup, an emptyDir (and the directory a
// subPath into it creates) is the group's and set-group-ID; a configMap volume, its root,
// ..data link and files included, is the group's as the kubelet leaves it.
func TestFSGroupReachesEveryKind(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatalf("this test changes file groups and must run as root; running as euid %d", os.Geteuid())
	}
	m, _ := newTestManager(t, &fakePayloads{content: "v1"})
	group := int64(2000)
	pod := testPod("uid-fsgroup", []corev1.Volume{
		{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cm"}}}},
	}, []corev1.VolumeMount{
		{Name: "scratch", MountPath: "/scratch"},
		{Name: "scratch", MountPath: "/sub", SubPath: "made/by/subpath"},
		{Name: "config", MountPath: "/config"},
	})
	pod.Spec.SecurityContext = &corev1.PodSecurityContext{FSGroup: &group}
	if _, err := m.Prepare(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	vols := filepath.Join(m.podsDir, "uid-fsgroup", "volumes")
	scratch := filepath.Join(vols, "kubernetes.io~empty-dir", "scratch")
	config := filepath.Join(vols, "kubernetes.io~configmap", "config")
	for path, mode := range map[string]uint32{
		scratch:                        0o2777,
		filepath.Join(scratch, "made"): 0o2777,
		filepath.Join(scratch, "made/by/subpath"): 0o2777,
		config:                          0o2755,
		filepath.Join(config, "..data"): 0,
		filepath.Join(config, "key"):    0,
	} {
		var st unix.Stat_t
		if err := unix.Lstat(path, &st); err != nil {
			t.Fatal(err)
		}
		if st.Gid != 2000 || mode != 0 && st.Mode&0o7777 != mode {
			t.Errorf("%s: gid %d mode %#o, want 2000 and %#o", path, st.Gid, st.Mode&0o7777, mode)
		}
	}
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(config, "key"), &st); err != nil || st.Gid != 2000 || st.Mode&0o040 == 0 {
		t.Errorf("the configMap's file: gid %d mode %#o (%v), want 2000 with group read", st.Gid, st.Mode&0o777, err)
	}
}
