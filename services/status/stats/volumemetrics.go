package stats

import (
	"github.com/prometheus/client_golang/prometheus"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// The kubelet's volume stats gauges, one series per claim, from the last summary.
var (
	volumeLabels           = []string{"namespace", "persistentvolumeclaim"}
	volumeCapacityDesc     = prometheus.NewDesc("kubelet_volume_stats_capacity_bytes", "Capacity in bytes of the volume", volumeLabels, nil)
	volumeAvailableDesc    = prometheus.NewDesc("kubelet_volume_stats_available_bytes", "Number of available bytes in the volume", volumeLabels, nil)
	volumeUsedDesc         = prometheus.NewDesc("kubelet_volume_stats_used_bytes", "Number of used bytes in the volume", volumeLabels, nil)
	volumeInodesDesc       = prometheus.NewDesc("kubelet_volume_stats_inodes", "Maximum number of inodes in the volume", volumeLabels, nil)
	volumeInodesFreeDesc   = prometheus.NewDesc("kubelet_volume_stats_inodes_free", "Number of free inodes in the volume", volumeLabels, nil)
	volumeInodesUsedDesc   = prometheus.NewDesc("kubelet_volume_stats_inodes_used", "Number of used inodes in the volume", volumeLabels, nil)
	volumeHealthAbnormDesc = prometheus.NewDesc("kubelet_volume_stats_health_status_abnormal", "Abnormal volume health status. The count is either 1 or 0. 1 indicates the volume is unhealthy, 0 indicates volume is healthy", volumeLabels, nil)
)

// volumeStatsCollector serves kubelet_volume_stats_* from a Cache's last summary.
type volumeStatsCollector struct{ c *Cache }

// VolumeStatsCollector is the kubelet's volume stats metrics for /metrics: capacity,
// available and used bytes and inodes of every persistentVolumeClaim (and generic
// ephemeral) volume of the node's pods, once per claim, and its health where its CSI
// driver reports it; from the last collected summary, as the kubelet's are from its stats.
func (c *Cache) VolumeStatsCollector() prometheus.Collector { return volumeStatsCollector{c} }

func (v volumeStatsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{volumeCapacityDesc, volumeAvailableDesc, volumeUsedDesc, volumeInodesDesc, volumeInodesFreeDesc, volumeInodesUsedDesc, volumeHealthAbnormDesc} {
		ch <- d
	}
}

func (v volumeStatsCollector) Collect(ch chan<- prometheus.Metric) {
	s, err := v.c.latest()
	if err != nil || s == nil {
		return
	}
	seen := map[statsv1alpha1.PVCReference]bool{}
	for _, pod := range s.Pods {
		for _, vs := range pod.VolumeStats {
			ref := vs.PVCRef
			if ref == nil || seen[*ref] {
				continue
			}
			seen[*ref] = true
			gauge := func(d *prometheus.Desc, value *uint64) {
				if value != nil {
					ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(*value), ref.Namespace, ref.Name)
				}
			}
			gauge(volumeCapacityDesc, vs.CapacityBytes)
			gauge(volumeAvailableDesc, vs.AvailableBytes)
			gauge(volumeUsedDesc, vs.UsedBytes)
			gauge(volumeInodesDesc, vs.Inodes)
			gauge(volumeInodesFreeDesc, vs.InodesFree)
			gauge(volumeInodesUsedDesc, vs.InodesUsed)
			if h := vs.VolumeHealthStats; h != nil {
				abnormal := 0.0
				if h.Abnormal {
					abnormal = 1
				}
				ch <- prometheus.MustNewConstMetric(volumeHealthAbnormDesc, prometheus.GaugeValue, abnormal, ref.Namespace, ref.Name)
			}
		}
	}
}
