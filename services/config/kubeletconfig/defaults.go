package kubeletconfig

import (
	"maps"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	logsapi "k8s.io/component-base/logs/api/v1"
	v1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
)

// defaultEvictionHard is the kubelet's hard eviction thresholds on Linux.
func defaultEvictionHard() map[string]string {
	return map[string]string{
		"memory.available":   "100Mi",
		"nodefs.available":   "10%",
		"nodefs.inodesFree":  "5%",
		"imagefs.available":  "15%",
		"imagefs.inodesFree": "5%",
	}
}

// Default fills every field left unset with the kubelet's v1beta1 default (kubelet
// v1.36 on Linux, with its feature gates at their defaults unless featureGates says
// otherwise), then settles evictionHard as the kubelet does for its --config file: the
// default thresholds when none is set, or the missing ones added when
// mergeDefaultEvictionSettings is true.
func Default(c *v1beta1.KubeletConfiguration) {
	defaultFields(c)
	if c.EvictionHard == nil {
		c.EvictionHard = defaultEvictionHard()
	} else if *c.MergeDefaultEvictionSettings {
		mergeDefaultEvictionHard(c)
	}
}

// mergeDefaultEvictionHard adds the default thresholds for the signals evictionHard
// does not name.
func mergeDefaultEvictionHard(c *v1beta1.KubeletConfiguration) {
	if c.EvictionHard == nil {
		c.EvictionHard = map[string]string{}
	}
	for k, v := range defaultEvictionHard() {
		if _, set := c.EvictionHard[k]; !set {
			c.EvictionHard[k] = v
		}
	}
}

// strictDefaults sets, in a decoded file before the drop-ins merge over it, the fields
// whose kubelet default unitlet refuses: rotateCertificates is true unless an input says
// otherwise (the kubelet's v1beta1 default is false; Validate refuses false).
func strictDefaults(doc map[string]any) {
	if _, set := doc["rotateCertificates"]; !set {
		doc["rotateCertificates"] = true
	}
}

// settleEvictionHard does to a decoded file what Default does to evictionHard, before
// the drop-ins merge over it.
func settleEvictionHard(doc map[string]any) {
	defaults := map[string]any{}
	for k, v := range defaultEvictionHard() {
		defaults[k] = v
	}
	switch set := doc["evictionHard"].(type) {
	case nil:
		doc["evictionHard"] = defaults
	case map[string]any:
		if doc["mergeDefaultEvictionSettings"] == true {
			for k, v := range defaults {
				if _, ok := set[k]; !ok {
					set[k] = v
				}
			}
		}
	}
}

// defaultFields is the kubelet's SetDefaults_KubeletConfiguration: every default but
// evictionHard's.
func defaultFields(c *v1beta1.KubeletConfiguration) {
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
	i32 := func(n *int32, def int32) {
		if *n == 0 {
			*n = def
		}
	}

	setPtr(&c.EnableServer, true)
	dur(&c.SyncFrequency, time.Minute)
	dur(&c.FileCheckFrequency, 20*time.Second)
	dur(&c.HTTPCheckFrequency, 20*time.Second)
	str(&c.Address, "0.0.0.0")
	i32(&c.Port, 10250)
	setPtr(&c.Authentication.Anonymous.Enabled, false)
	setPtr(&c.Authentication.Webhook.Enabled, true)
	dur(&c.Authentication.Webhook.CacheTTL, 2*time.Minute)
	str((*string)(&c.Authorization.Mode), string(v1beta1.KubeletAuthorizationModeWebhook))
	dur(&c.Authorization.Webhook.CacheAuthorizedTTL, 5*time.Minute)
	dur(&c.Authorization.Webhook.CacheUnauthorizedTTL, 30*time.Second)
	setPtr(&c.RegistryPullQPS, 5)
	i32(&c.RegistryBurst, 10)
	setPtr(&c.EventRecordQPS, 50)
	i32(&c.EventBurst, 100)
	setPtr(&c.EnableDebuggingHandlers, true)
	setPtr(&c.HealthzPort, 10248)
	str(&c.HealthzBindAddress, "127.0.0.1")
	setPtr(&c.OOMScoreAdj, -999)
	dur(&c.StreamingConnectionIdleTimeout, 4*time.Hour)
	// The report frequency follows an update frequency that is set, as in the kubelet.
	if c.NodeStatusReportFrequency.Duration == 0 {
		if c.NodeStatusUpdateFrequency.Duration == 0 {
			c.NodeStatusReportFrequency.Duration = 5 * time.Minute
		} else {
			c.NodeStatusReportFrequency = c.NodeStatusUpdateFrequency
		}
	}
	dur(&c.NodeStatusUpdateFrequency, 10*time.Second)
	i32(&c.NodeLeaseDurationSeconds, 40)
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
	i32(&c.MaxPods, 110)
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
	i32(&c.KubeAPIBurst, 100)
	if c.SerializeImagePulls == nil {
		// Parallel pulls only when a limit of at least 2 asks for them.
		c.SerializeImagePulls = ptr.To(c.MaxParallelImagePulls == nil || *c.MaxParallelImagePulls < 2)
	}
	dur(&c.EvictionPressureTransitionPeriod, 5*time.Minute)
	setPtr(&c.MergeDefaultEvictionSettings, false)
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

	gates := featureGates(c.FeatureGates)
	if gates.enabled(gateKubeletCrashLoopBackOffMax) && c.CrashLoopBackOff.MaxContainerRestartPeriod == nil {
		c.CrashLoopBackOff.MaxContainerRestartPeriod = &metav1.Duration{Duration: 300 * time.Second}
	}
	if gates.enabled(gateKubeletEnsureSecretPulledImages) {
		str((*string)(&c.ImagePullCredentialsVerificationPolicy), string(v1beta1.NeverVerifyPreloadedImages))
	}
}

func setPtr[T any](p **T, def T) {
	if *p == nil {
		*p = ptr.To(def)
	}
}

// The feature gates that change the kubelet's defaults or validation.
const (
	gateCustomCPUCFSQuotaPeriod                = "CustomCPUCFSQuotaPeriod"
	gateImageMaximumGCAge                      = "ImageMaximumGCAge"
	gateRotateKubeletServerCertificate         = "RotateKubeletServerCertificate"
	gateGracefulNodeShutdown                   = "GracefulNodeShutdown"
	gateGracefulNodeShutdownBasedOnPodPriority = "GracefulNodeShutdownBasedOnPodPriority"
	gateNodeSwap                               = "NodeSwap"
	gateKubeletCrashLoopBackOffMax             = "KubeletCrashLoopBackOffMax"
	gateKubeletEnsureSecretPulledImages        = "KubeletEnsureSecretPulledImages"
	gateMemoryQoS                              = "MemoryQoS"
	gateNodeLogQuery                           = "NodeLogQuery"
	gateHostnameOverride                       = "HostnameOverride"
	gateEventedPLEG                            = "EventedPLEG"
)

// gate is a feature gate's state in kubelet v1.36: its default, whether it is locked to
// that default, and its stage (ALPHA, BETA, DEPRECATED; empty for GA).
type gate struct {
	def, locked bool
	stage       string
}

// knownGates are the kubelet v1.36 feature gates (gates_kubelet.go, generated from the
// kubelet itself by `make gates`).
func knownGates() map[string]gate { return kubeletGates }

// gateSet answers whether a feature is enabled given the featureGates field.
type gateSet map[string]bool

func featureGates(set map[string]bool) gateSet { return maps.Clone(set) }

func (s gateSet) enabled(name string) bool {
	if on, ok := s[name]; ok {
		return on
	}
	return knownGates()[name].def
}
