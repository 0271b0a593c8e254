package kubeletconfig

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	logsapi "k8s.io/component-base/logs/api/v1"
	v1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
)

// DefaultEvictionHard is the kubelet's hard eviction thresholds on Linux, used when the
// configuration sets none (or merged in per signal with mergeDefaultEvictionSettings).
var DefaultEvictionHard = map[string]string{
	"memory.available":   "100Mi",
	"nodefs.available":   "10%",
	"nodefs.inodesFree":  "5%",
	"imagefs.available":  "15%",
	"imagefs.inodesFree": "5%",
}

// Default fills every field left unset with the kubelet's v1beta1 default (kubelet v1.36).
// Unlike the kubelet, which defaults evictionHard of the --config file before merging the
// drop-ins, the default thresholds apply here after the merge: a drop-in that sets one
// threshold replaces the defaults, just as the same setting in the file would.
func Default(c *v1beta1.KubeletConfiguration) {
	dur := func(d *metav1.Duration, def time.Duration) {
		if d.Duration == 0 {
			d.Duration = def
		}
	}
	str := func(s *string, def string) {
		if *s == "" {
			*s = def
		}
	}
	setPtr(&c.EnableServer, true)
	dur(&c.SyncFrequency, time.Minute)
	dur(&c.FileCheckFrequency, 20*time.Second)
	dur(&c.HTTPCheckFrequency, 20*time.Second)
	str(&c.Address, "0.0.0.0")
	if c.Port == 0 {
		c.Port = 10250
	}
	setPtr(&c.Authentication.Anonymous.Enabled, false)
	setPtr(&c.Authentication.Webhook.Enabled, true)
	dur(&c.Authentication.Webhook.CacheTTL, 2*time.Minute)
	str((*string)(&c.Authorization.Mode), string(v1beta1.KubeletAuthorizationModeWebhook))
	dur(&c.Authorization.Webhook.CacheAuthorizedTTL, 5*time.Minute)
	dur(&c.Authorization.Webhook.CacheUnauthorizedTTL, 30*time.Second)
	setPtr(&c.RegistryPullQPS, 5)
	if c.RegistryBurst == 0 {
		c.RegistryBurst = 10
	}
	setPtr(&c.EventRecordQPS, 50)
	if c.EventBurst == 0 {
		c.EventBurst = 100
	}
	setPtr(&c.EnableDebuggingHandlers, true)
	setPtr(&c.HealthzPort, 10248)
	str(&c.HealthzBindAddress, "127.0.0.1")
	setPtr(&c.OOMScoreAdj, -999)
	dur(&c.StreamingConnectionIdleTimeout, 4*time.Hour)
	// The report frequency follows an explicitly set update frequency, as in the kubelet.
	if c.NodeStatusReportFrequency.Duration == 0 {
		if c.NodeStatusUpdateFrequency.Duration == 0 {
			c.NodeStatusReportFrequency.Duration = 5 * time.Minute
		} else {
			c.NodeStatusReportFrequency = c.NodeStatusUpdateFrequency
		}
	}
	dur(&c.NodeStatusUpdateFrequency, 10*time.Second)
	if c.NodeLeaseDurationSeconds == 0 {
		c.NodeLeaseDurationSeconds = 40
	}
	dur(&c.ImageMinimumGCAge, 2*time.Minute)
	setPtr(&c.ImageGCHighThresholdPercent, 85)
	setPtr(&c.ImageGCLowThresholdPercent, 80)
	dur(&c.VolumeStatsAggPeriod, time.Minute)
	setPtr(&c.CgroupsPerQOS, true)
	str(&c.CgroupDriver, "cgroupfs")
	str(&c.CPUManagerPolicy, "none")
	dur(&c.CPUManagerReconcilePeriod, 10*time.Second)
	str(&c.MemoryManagerPolicy, v1beta1.NoneMemoryManagerPolicy)
	str(&c.TopologyManagerPolicy, v1beta1.NoneTopologyManagerPolicy)
	str(&c.TopologyManagerScope, v1beta1.ContainerTopologyManagerScope)
	dur(&c.RuntimeRequestTimeout, 2*time.Minute)
	str(&c.HairpinMode, v1beta1.PromiscuousBridge)
	if c.MaxPods == 0 {
		c.MaxPods = 110
	}
	if c.PodPidsLimit == nil || *c.PodPidsLimit < 0 {
		c.PodPidsLimit = ptr.To[int64](-1)
	}
	setPtr(&c.ResolverConfig, "/etc/resolv.conf")
	setPtr(&c.CPUCFSQuota, true)
	if c.CPUCFSQuotaPeriod == nil {
		c.CPUCFSQuotaPeriod = &metav1.Duration{Duration: 100 * time.Millisecond}
	}
	setPtr(&c.NodeStatusMaxImages, 50)
	if c.MaxOpenFiles == 0 {
		c.MaxOpenFiles = 1000000
	}
	str(&c.ContentType, "application/vnd.kubernetes.protobuf")
	setPtr(&c.KubeAPIQPS, 50)
	if c.KubeAPIBurst == 0 {
		c.KubeAPIBurst = 100
	}
	if c.SerializeImagePulls == nil {
		// Parallel pulls only when a limit of at least 2 asks for them.
		c.SerializeImagePulls = ptr.To(c.MaxParallelImagePulls == nil || *c.MaxParallelImagePulls < 2)
	}
	dur(&c.EvictionPressureTransitionPeriod, 5*time.Minute)
	setPtr(&c.MergeDefaultEvictionSettings, false)
	switch {
	case c.EvictionHard == nil:
		c.EvictionHard = map[string]string{}
		for k, v := range DefaultEvictionHard {
			c.EvictionHard[k] = v
		}
	case *c.MergeDefaultEvictionSettings:
		for k, v := range DefaultEvictionHard {
			if _, set := c.EvictionHard[k]; !set {
				c.EvictionHard[k] = v
			}
		}
	}
	setPtr(&c.EnableControllerAttachDetach, true)
	setPtr(&c.MakeIPTablesUtilChains, true)
	setPtr(&c.IPTablesMasqueradeBit, 14)
	setPtr(&c.IPTablesDropBit, 15)
	setPtr(&c.FailSwapOn, true)
	str(&c.ContainerLogMaxSize, "10Mi")
	setPtr(&c.ContainerLogMaxFiles, 5)
	setPtr(&c.ContainerLogMaxWorkers, 1)
	if c.ContainerLogMonitorInterval == nil {
		c.ContainerLogMonitorInterval = &metav1.Duration{Duration: 10 * time.Second}
	}
	str((*string)(&c.ConfigMapAndSecretChangeDetectionStrategy), string(v1beta1.WatchChangeDetectionStrategy))
	if c.EnforceNodeAllocatable == nil {
		c.EnforceNodeAllocatable = []string{"pods"}
	}
	str(&c.VolumePluginDir, "/usr/libexec/kubernetes/kubelet-plugins/volume/exec/")
	logsapi.SetRecommendedLoggingConfiguration(&c.Logging)
	setPtr(&c.EnableSystemLogHandler, true)
	setPtr(&c.EnableProfilingHandler, true)
	setPtr(&c.EnableDebugFlagsHandler, true)
	setPtr(&c.SeccompDefault, false)
	setPtr(&c.FailCgroupV1, true)
	setPtr(&c.MemoryThrottlingFactor, 0.9)
	str((*string)(&c.MemoryReservationPolicy), string(v1beta1.NoneMemoryReservationPolicy))
	setPtr(&c.RegisterNode, true)
	setPtr(&c.LocalStorageCapacityIsolation, true)
	str(&c.ContainerRuntimeEndpoint, "unix:///run/containerd/containerd.sock")
	str(&c.PodLogsDir, "/var/log/pods")
}

func setPtr[T any](p **T, def T) {
	if *p == nil {
		*p = ptr.To(def)
	}
}
