package stats

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
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

// A CSI volume whose driver reports its size and condition: the summary has the driver's
// figures and the volume's health, and kubelet_volume_stats_* have them per claim, once.
func TestCSIVolumeStatsAndTheirMetrics(t *testing.T) {
	h := newHost(t, false)
	rt := cluster()
	rt.imageFs = imageFs(h.root)
	abnormal := true
	vols := []Volume{
		{PodUID: "uid-web", Name: "data", Plugin: "kubernetes.io/csi", Path: h.root, UsedBytes: 3 << 20, InodesUsed: 11, Measured: t0,
			Size: &VolumeSize{CapacityBytes: 32 << 20, AvailableBytes: 29 << 20, Inodes: 8192, InodesFree: 8181}, Abnormal: &abnormal},
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", UID: "uid-web"}, Spec: corev1.PodSpec{Volumes: []corev1.Volume{
		{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "web-data"}}},
	}}}
	p := New(Options{Runtime: rt, NodeName: "node-a", RootDir: h.root, CgroupRoot: h.cgroup, ProcRoot: h.proc, PodLogsDir: h.root, Clock: clocktesting.NewFakeClock(t0),
		Volumes: func(context.Context) ([]Volume, error) { return vols, nil },
		Pods:    func(context.Context) ([]*corev1.Pod, error) { return []*corev1.Pod{pod}, nil }})
	c := NewCache(p, DefaultCollectPeriod)
	c.collect(context.Background())
	s, err := c.latest()
	if err != nil {
		t.Fatal(err)
	}
	v := s.Pods[0].VolumeStats[0]
	u64(t, "capacity", v.CapacityBytes, 32<<20)
	u64(t, "available", v.AvailableBytes, 29<<20)
	u64(t, "inodes", v.Inodes, 8192)
	u64(t, "inodes free", v.InodesFree, 8181)
	if v.VolumeHealthStats == nil || !v.VolumeHealthStats.Abnormal {
		t.Errorf("volume health = %+v, want abnormal", v.VolumeHealthStats)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c.VolumeStatsCollector())
	want := `
# HELP kubelet_volume_stats_capacity_bytes Capacity in bytes of the volume
# TYPE kubelet_volume_stats_capacity_bytes gauge
kubelet_volume_stats_capacity_bytes{namespace="default",persistentvolumeclaim="web-data"} 3.3554432e+07
# HELP kubelet_volume_stats_health_status_abnormal Abnormal volume health status. The count is either 1 or 0. 1 indicates the volume is unhealthy, 0 indicates volume is healthy
# TYPE kubelet_volume_stats_health_status_abnormal gauge
kubelet_volume_stats_health_status_abnormal{namespace="default",persistentvolumeclaim="web-data"} 1
# HELP kubelet_volume_stats_inodes_used Number of used inodes in the volume
# TYPE kubelet_volume_stats_inodes_used gauge
kubelet_volume_stats_inodes_used{namespace="default",persistentvolumeclaim="web-data"} 11
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "kubelet_volume_stats_capacity_bytes", "kubelet_volume_stats_health_status_abnormal", "kubelet_volume_stats_inodes_used"); err != nil {
		t.Error(err)
	}
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 7 {
		t.Errorf("%d series (%v), want the 7 kubelet_volume_stats_* of the one claim", n, err)
	}
}
