package stats

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// Volume is one prepared volume of a pod with its last measured usage, as unitlet-volumes
// lists it.
type Volume struct {
	PodUID string
	// Name is the volume's name in the pod's spec.
	Name string
	// Plugin is the kubelet's plugin name: "kubernetes.io/empty-dir", ...
	Plugin string
	// Path is its directory on the host; empty when it is not materialized (hostPath).
	Path       string
	UsedBytes  uint64
	InodesUsed uint64
	// Measured is when the usage was measured; zero: not yet.
	Measured time.Time
	// Size is the volume's capacity as its CSI driver reports it; nil: the file system's
	// at Path.
	Size *VolumeSize
	// Abnormal is the CSI driver's word on the volume's health; nil when it gives none.
	Abnormal *bool
}

// VolumeSize is a volume's capacity in bytes and inodes.
type VolumeSize struct {
	CapacityBytes, AvailableBytes, Inodes, InodesFree uint64
}

// The plugins whose volumes the kubelet gives no stats for (hostPath has no metrics), and
// those it counts as local ephemeral storage when the pod's spec is not known.
const pluginHostPath = "kubernetes.io/host-path"

var ephemeralPlugins = []string{"kubernetes.io/empty-dir", "kubernetes.io/configmap", "kubernetes.io/git-repo"}

// podVolumes is each pod's volume stats (by pod UID), and what its local ephemeral
// volumes use, from the volumes' last measurement: the kubelet's, with the name from the
// pod's spec and a pvcRef for a persistentVolumeClaim or generic ephemeral volume; the
// local ephemeral volumes (a disk emptyDir, a configMap, a gitRepo) first.
func (p *Provider) podVolumes(ctx context.Context) (map[string][]statsv1alpha1.VolumeStats, map[string][2]uint64, error) {
	if p.volumes == nil {
		return nil, nil, nil
	}
	vols, err := p.volumes(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("list volumes: %w", err)
	}
	specs := map[string]*corev1.Pod{}
	if p.pods != nil {
		pods, err := p.pods(ctx)
		if err != nil {
			return nil, nil, fmt.Errorf("list pods: %w", err)
		}
		for _, pod := range pods {
			specs[string(pod.UID)] = pod
		}
	}
	type entry struct {
		stats     statsv1alpha1.VolumeStats
		ephemeral bool
	}
	byPod := map[string][]entry{}
	for _, v := range vols {
		if v.Plugin == pluginHostPath || v.Measured.IsZero() {
			continue
		}
		e := entry{stats: statsv1alpha1.VolumeStats{Name: v.Name, FsStats: volumeFs(v)}, ephemeral: slices.Contains(ephemeralPlugins, v.Plugin)}
		if v.Abnormal != nil {
			e.stats.VolumeHealthStats = &statsv1alpha1.VolumeHealthStats{Abnormal: *v.Abnormal}
		}
		if pod, ok := specs[v.PodUID]; ok {
			if i := slices.IndexFunc(pod.Spec.Volumes, func(sv corev1.Volume) bool { return sv.Name == v.Name }); i >= 0 {
				e.stats.PVCRef, e.ephemeral = volumeClaim(pod, &pod.Spec.Volumes[i]), localEphemeral(&pod.Spec.Volumes[i])
			}
		}
		byPod[v.PodUID] = append(byPod[v.PodUID], e)
	}
	out := map[string][]statsv1alpha1.VolumeStats{}
	usage := map[string][2]uint64{}
	for uid, entries := range byPod {
		slices.SortFunc(entries, func(a, b entry) int {
			if a.ephemeral != b.ephemeral {
				if a.ephemeral {
					return -1
				}
				return 1
			}
			return cmp.Compare(a.stats.Name, b.stats.Name)
		})
		var used [2]uint64
		for _, e := range entries {
			out[uid] = append(out[uid], e.stats)
			if e.ephemeral {
				used[0] += *e.stats.UsedBytes
				used[1] += *e.stats.InodesUsed
			}
		}
		usage[uid] = used
	}
	return out, usage, nil
}

// volumeFs is a volume's usage with its size: its CSI driver's figures when it gives them,
// else the size of the filesystem it is on, when its directory is visible here.
func volumeFs(v Volume) statsv1alpha1.FsStats {
	used, inodes := v.UsedBytes, v.InodesUsed
	s := statsv1alpha1.FsStats{Time: metav1.NewTime(v.Measured), UsedBytes: &used, InodesUsed: &inodes}
	if z := v.Size; z != nil {
		capacity, available, total, free := z.CapacityBytes, z.AvailableBytes, z.Inodes, z.InodesFree
		s.CapacityBytes, s.AvailableBytes, s.Inodes, s.InodesFree = &capacity, &available, &total, &free
		return s
	}
	if v.Path != "" {
		if fs, err := fsStats(v.Path, v.Measured); err == nil {
			s.AvailableBytes, s.CapacityBytes, s.Inodes, s.InodesFree = fs.AvailableBytes, fs.CapacityBytes, fs.Inodes, fs.InodesFree
		}
	}
	return s
}

// volumeClaim is the claim a persistentVolumeClaim or generic ephemeral volume is bound
// to; nil for other volumes.
func volumeClaim(pod *corev1.Pod, v *corev1.Volume) *statsv1alpha1.PVCReference {
	switch {
	case v.PersistentVolumeClaim != nil:
		return &statsv1alpha1.PVCReference{Name: v.PersistentVolumeClaim.ClaimName, Namespace: pod.Namespace}
	case v.Ephemeral != nil:
		return &statsv1alpha1.PVCReference{Name: pod.Name + "-" + v.Name, Namespace: pod.Namespace}
	}
	return nil
}

// localEphemeral tells whether the kubelet counts a volume in the pod's ephemeral
// storage: a gitRepo, an emptyDir on disk, a configMap.
func localEphemeral(v *corev1.Volume) bool {
	return v.GitRepo != nil || (v.EmptyDir != nil && v.EmptyDir.Medium == corev1.StorageMediumDefault) || v.ConfigMap != nil
}
