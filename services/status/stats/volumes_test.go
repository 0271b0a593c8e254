package stats

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestSummaryPodVolumes(t *testing.T) {
	h := newHost(t, false)
	rt := cluster()
	rt.imageFs = imageFs(h.root)
	vol := func(name, plugin string, used uint64) Volume {
		return Volume{PodUID: "uid-web", Name: name, Plugin: plugin, Path: h.root, UsedBytes: used, InodesUsed: 2, Measured: t0}
	}
	vols := []Volume{
		vol("scratch", "kubernetes.io/empty-dir", 10<<20),
		vol("mem", "kubernetes.io/empty-dir", 1<<20),
		vol("cm", "kubernetes.io/configmap", 4096),
		vol("token", "kubernetes.io/secret", 8192),
		vol("data", "kubernetes.io/local-volume", 1<<30),
		{PodUID: "uid-web", Name: "host", Plugin: "kubernetes.io/host-path", Measured: t0},
		{PodUID: "uid-web", Name: "fresh", Plugin: "kubernetes.io/empty-dir"},
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", UID: "uid-web"}, Spec: corev1.PodSpec{Volumes: []corev1.Volume{
		{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: "mem", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}},
		{Name: "cm", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{}}},
		{Name: "token", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{}}},
		{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "web-data"}}},
	}}}
	var volumesErr error
	p := New(Options{Runtime: rt, NodeName: "node-a", RootDir: h.root, CgroupRoot: h.cgroup, ProcRoot: h.proc, PodLogsDir: h.root, Clock: clocktesting.NewFakeClock(t0),
		Volumes: func(context.Context) ([]Volume, error) { return vols, volumesErr },
		Pods:    func(context.Context) ([]*corev1.Pod, error) { return []*corev1.Pod{pod}, nil }})

	s, err := p.Summary(context.Background(), false)
	if err != nil {
		t.Fatalf("Summary: %v", err)
	}
	ps := s.Pods[0]
	var names []string
	for _, v := range ps.VolumeStats {
		names = append(names, v.Name)
		if v.CapacityBytes == nil || *v.CapacityBytes != *s.Node.Fs.CapacityBytes {
			t.Errorf("volume %s capacity = %v, want its filesystem's", v.Name, v.CapacityBytes)
		}
	}
	// Local ephemeral volumes first, hostPath and the not yet measured left out.
	if got := strings.Join(names, ","); got != "cm,scratch,data,mem,token" {
		t.Errorf("volumes = %s, want cm,scratch,data,mem,token", got)
	}
	if want := (&statsv1alpha1.PVCReference{Name: "web-data", Namespace: "default"}); ps.VolumeStats[2].PVCRef == nil || *ps.VolumeStats[2].PVCRef != *want {
		t.Errorf("data pvcRef = %+v, want %+v", ps.VolumeStats[2].PVCRef, want)
	}
	// Writable layers 4096+1024 bytes and 3+3 inodes, the disk emptyDir and the configMap.
	u64(t, "ephemeral storage", ps.EphemeralStorage.UsedBytes, 4096+1024+10<<20+4096)
	u64(t, "ephemeral storage inodes", ps.EphemeralStorage.InodesUsed, 3+3+2+2)

	volumesErr = errors.New("unitlet-volumes: unavailable")
	// As the kubelet's: the summary is served, without volume stats.
	down, err := p.Summary(context.Background(), false)
	if err != nil || len(down.Pods) != 1 || down.Pods[0].VolumeStats != nil || len(down.Pods[0].Containers) == 0 {
		t.Errorf("Summary with volumes down = %+v, %v; want the pod without volume stats", down, err)
	}
	if _, err := p.Summary(context.Background(), true); err != nil {
		t.Errorf("only_cpu_and_memory read the volumes: %v", err)
	}
}
