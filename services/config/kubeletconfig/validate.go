package kubeletconfig

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	v1beta1 "k8s.io/kubelet/config/v1beta1"
)

// evictionSignals are the signals the kubelet's eviction manager knows on Linux.
var evictionSignals = map[string]bool{
	"memory.available": true, "nodefs.available": true, "nodefs.inodesFree": true,
	"imagefs.available": true, "imagefs.inodesFree": true, "containerfs.available": true,
	"containerfs.inodesFree": true, "allocatableMemory.available": true, "pid.available": true,
}

// reservableResources may appear in kubeReserved and systemReserved.
var reservableResources = map[string]bool{"cpu": true, "memory": true, "ephemeral-storage": true, "pid": true}

// Validate checks the fields unitlet uses, as the kubelet does; errors carry JSON field
// paths. It expects a defaulted configuration.
func Validate(c *v1beta1.KubeletConfiguration) field.ErrorList {
	var errs field.ErrorList
	positive := func(name string, d metav1.Duration) {
		if d.Duration <= 0 {
			errs = append(errs, field.Invalid(field.NewPath(name), d.Duration.String(), "must be greater than zero"))
		}
	}
	positive("syncFrequency", c.SyncFrequency)
	positive("fileCheckFrequency", c.FileCheckFrequency)
	positive("httpCheckFrequency", c.HTTPCheckFrequency)
	positive("nodeStatusUpdateFrequency", c.NodeStatusUpdateFrequency)
	positive("nodeStatusReportFrequency", c.NodeStatusReportFrequency)
	positive("runtimeRequestTimeout", c.RuntimeRequestTimeout)
	positive("streamingConnectionIdleTimeout", c.StreamingConnectionIdleTimeout)
	positive("evictionPressureTransitionPeriod", c.EvictionPressureTransitionPeriod)
	positive("volumeStatsAggPeriod", c.VolumeStatsAggPeriod)
	positive("imageMinimumGCAge", c.ImageMinimumGCAge)
	if c.ImageMaximumGCAge.Duration < 0 {
		errs = append(errs, field.Invalid(field.NewPath("imageMaximumGCAge"), c.ImageMaximumGCAge.Duration.String(), "must not be negative"))
	} else if c.ImageMaximumGCAge.Duration > 0 && c.ImageMaximumGCAge.Duration <= c.ImageMinimumGCAge.Duration {
		errs = append(errs, field.Invalid(field.NewPath("imageMaximumGCAge"), c.ImageMaximumGCAge.Duration.String(), "must be greater than imageMinimumGCAge"))
	}

	port := func(name string, p int32, zeroOK bool) {
		if (p == 0 && zeroOK) || (p >= 1 && p <= 65535) {
			return
		}
		errs = append(errs, field.Invalid(field.NewPath(name), p, "must be a port between 1 and 65535"+map[bool]string{true: ", or 0 to disable", false: ""}[zeroOK]))
	}
	port("port", c.Port, false)
	port("readOnlyPort", c.ReadOnlyPort, true)
	port("healthzPort", *c.HealthzPort, true)

	ip := func(name, s string) {
		if _, err := netip.ParseAddr(s); err != nil {
			errs = append(errs, field.Invalid(field.NewPath(name), s, "must be an IP address"))
		}
	}
	ip("address", c.Address)
	ip("healthzBindAddress", c.HealthzBindAddress)
	for i, s := range c.ClusterDNS {
		if _, err := netip.ParseAddr(s); err != nil {
			errs = append(errs, field.Invalid(field.NewPath("clusterDNS").Index(i), s, "must be an IP address"))
		}
	}
	if c.ClusterDomain != "" {
		for _, msg := range validation.IsDNS1123Subdomain(strings.TrimSuffix(c.ClusterDomain, ".")) {
			errs = append(errs, field.Invalid(field.NewPath("clusterDomain"), c.ClusterDomain, msg))
		}
	}

	nonNegative := func(name string, v int64) {
		if v < 0 {
			errs = append(errs, field.Invalid(field.NewPath(name), v, "must not be negative"))
		}
	}
	nonNegative("maxPods", int64(c.MaxPods))
	nonNegative("registryPullQPS", int64(*c.RegistryPullQPS))
	nonNegative("registryBurst", int64(c.RegistryBurst))
	nonNegative("eventRecordQPS", int64(*c.EventRecordQPS))
	nonNegative("eventBurst", int64(c.EventBurst))
	nonNegative("kubeAPIQPS", int64(*c.KubeAPIQPS))
	nonNegative("kubeAPIBurst", int64(c.KubeAPIBurst))
	nonNegative("maxOpenFiles", c.MaxOpenFiles)
	nonNegative("nodeStatusMaxImages", int64(*c.NodeStatusMaxImages)+1) // -1 means no limit
	if *c.PodPidsLimit < -1 {
		errs = append(errs, field.Invalid(field.NewPath("podPidsLimit"), *c.PodPidsLimit, "must be -1 (no limit) or more"))
	}
	if c.NodeLeaseDurationSeconds <= 0 {
		errs = append(errs, field.Invalid(field.NewPath("nodeLeaseDurationSeconds"), c.NodeLeaseDurationSeconds, "must be greater than zero"))
	}
	if c.RegistryPullQPS != nil && *c.RegistryPullQPS > 0 && c.RegistryBurst == 0 {
		errs = append(errs, field.Invalid(field.NewPath("registryBurst"), c.RegistryBurst, "must be greater than zero when registryPullQPS is"))
	}

	high, low := *c.ImageGCHighThresholdPercent, *c.ImageGCLowThresholdPercent
	if high < 0 || high > 100 {
		errs = append(errs, field.Invalid(field.NewPath("imageGCHighThresholdPercent"), high, "must be between 0 and 100"))
	}
	if low < 0 || low > 100 {
		errs = append(errs, field.Invalid(field.NewPath("imageGCLowThresholdPercent"), low, "must be between 0 and 100"))
	}
	if low > high && high >= 0 && high <= 100 && low >= 0 && low <= 100 {
		errs = append(errs, field.Invalid(field.NewPath("imageGCLowThresholdPercent"), low, fmt.Sprintf("must not be greater than imageGCHighThresholdPercent (%d)", high)))
	}

	oneOf := func(name, v string, allowed ...string) {
		for _, a := range allowed {
			if v == a {
				return
			}
		}
		errs = append(errs, field.NotSupported(field.NewPath(name), v, allowed))
	}
	oneOf("hairpinMode", c.HairpinMode, v1beta1.PromiscuousBridge, v1beta1.HairpinVeth, v1beta1.HairpinNone)
	oneOf("cgroupDriver", c.CgroupDriver, "cgroupfs", "systemd")
	oneOf("authorization.mode", string(c.Authorization.Mode), string(v1beta1.KubeletAuthorizationModeWebhook), string(v1beta1.KubeletAuthorizationModeAlwaysAllow))
	oneOf("configMapAndSecretChangeDetectionStrategy", string(c.ConfigMapAndSecretChangeDetectionStrategy),
		string(v1beta1.WatchChangeDetectionStrategy), string(v1beta1.GetChangeDetectionStrategy), string(v1beta1.TTLCacheChangeDetectionStrategy))
	oneOf("contentType", c.ContentType, "application/vnd.kubernetes.protobuf", "application/json")

	errs = append(errs, thresholds("evictionHard", c.EvictionHard)...)
	errs = append(errs, thresholds("evictionSoft", c.EvictionSoft)...)
	for _, sig := range sortedStrings(c.EvictionSoft) {
		if _, ok := c.EvictionSoftGracePeriod[sig]; !ok {
			errs = append(errs, field.Required(field.NewPath("evictionSoftGracePeriod").Key(sig), "every evictionSoft signal needs a grace period"))
		}
	}
	for _, sig := range sortedStrings(c.EvictionSoftGracePeriod) {
		p := field.NewPath("evictionSoftGracePeriod").Key(sig)
		if !evictionSignals[sig] {
			errs = append(errs, field.NotSupported(p, sig, sortedKeysBool(evictionSignals)))
		} else if d, err := parseDuration(c.EvictionSoftGracePeriod[sig]); err != nil || d <= 0 {
			errs = append(errs, field.Invalid(p, c.EvictionSoftGracePeriod[sig], "must be a positive duration such as 1m30s"))
		}
	}
	errs = append(errs, reserved("kubeReserved", c.KubeReserved)...)
	errs = append(errs, reserved("systemReserved", c.SystemReserved)...)

	if c.ContainerRuntimeEndpoint != "" {
		ep := c.ContainerRuntimeEndpoint
		path, isUnix := strings.CutPrefix(ep, "unix://")
		if !isUnix && !strings.HasPrefix(ep, "/") {
			errs = append(errs, field.Invalid(field.NewPath("containerRuntimeEndpoint"), ep, "must be unix:///path/to/socket"))
		} else if isUnix && !filepath.IsAbs(path) {
			errs = append(errs, field.Invalid(field.NewPath("containerRuntimeEndpoint"), ep, "the socket path must be absolute: unix:///path/to/socket"))
		}
	}
	for name, p := range map[string]string{"staticPodPath": c.StaticPodPath, "podLogsDir": c.PodLogsDir} {
		if p != "" && !filepath.IsAbs(p) {
			errs = append(errs, field.Invalid(field.NewPath(name), p, "must be an absolute path"))
		}
	}
	if c.StaticPodURL != "" && !strings.HasPrefix(c.StaticPodURL, "http://") && !strings.HasPrefix(c.StaticPodURL, "https://") {
		errs = append(errs, field.Invalid(field.NewPath("staticPodURL"), c.StaticPodURL, "must be an http:// or https:// URL"))
	}
	for i, t := range c.RegisterWithTaints {
		p := field.NewPath("registerWithTaints").Index(i)
		for _, msg := range validation.IsQualifiedName(t.Key) {
			errs = append(errs, field.Invalid(p.Child("key"), t.Key, msg))
		}
		if t.Value != "" {
			for _, msg := range validation.IsValidLabelValue(t.Value) {
				errs = append(errs, field.Invalid(p.Child("value"), t.Value, msg))
			}
		}
		switch t.Effect {
		case v1.TaintEffectNoSchedule, v1.TaintEffectPreferNoSchedule, v1.TaintEffectNoExecute:
		default:
			errs = append(errs, field.NotSupported(p.Child("effect"), t.Effect, []string{string(v1.TaintEffectNoSchedule), string(v1.TaintEffectPreferNoSchedule), string(v1.TaintEffectNoExecute)}))
		}
	}
	if *c.ContainerLogMaxFiles < 2 {
		errs = append(errs, field.Invalid(field.NewPath("containerLogMaxFiles"), *c.ContainerLogMaxFiles, "must be 2 or more"))
	}
	if q, err := resource.ParseQuantity(c.ContainerLogMaxSize); err != nil || q.Sign() <= 0 {
		errs = append(errs, field.Invalid(field.NewPath("containerLogMaxSize"), c.ContainerLogMaxSize, "must be a positive quantity such as 10Mi"))
	}
	if *c.ContainerLogMaxWorkers < 1 {
		errs = append(errs, field.Invalid(field.NewPath("containerLogMaxWorkers"), *c.ContainerLogMaxWorkers, "must be 1 or more"))
	}
	if f := *c.MemoryThrottlingFactor; f <= 0 || f > 1 {
		errs = append(errs, field.Invalid(field.NewPath("memoryThrottlingFactor"), f, "must be greater than 0 and at most 1"))
	}
	if c.ShutdownGracePeriod.Duration < 0 || c.ShutdownGracePeriodCriticalPods.Duration < 0 {
		errs = append(errs, field.Invalid(field.NewPath("shutdownGracePeriod"), c.ShutdownGracePeriod.Duration.String(), "must not be negative"))
	} else if c.ShutdownGracePeriodCriticalPods.Duration > c.ShutdownGracePeriod.Duration {
		errs = append(errs, field.Invalid(field.NewPath("shutdownGracePeriodCriticalPods"), c.ShutdownGracePeriodCriticalPods.Duration.String(), "must not be greater than shutdownGracePeriod"))
	}
	return errs
}

// thresholds checks eviction thresholds: known signals, each a quantity or a percentage.
func thresholds(name string, m map[string]string) field.ErrorList {
	var errs field.ErrorList
	for _, sig := range sortedStrings(m) {
		p := field.NewPath(name).Key(sig)
		if !evictionSignals[sig] {
			errs = append(errs, field.NotSupported(p, sig, sortedKeysBool(evictionSignals)))
			continue
		}
		v := strings.TrimSpace(m[sig])
		if pct, ok := strings.CutSuffix(v, "%"); ok {
			f, err := strconv.ParseFloat(pct, 64)
			if err != nil || f < 0 || f > 100 {
				errs = append(errs, field.Invalid(p, v, "a percentage must be between 0% and 100%"))
			}
			continue
		}
		if q, err := resource.ParseQuantity(v); err != nil || q.Sign() < 0 {
			errs = append(errs, field.Invalid(p, v, "must be a quantity such as 100Mi or a percentage such as 10%"))
		}
	}
	return errs
}

// reserved checks kubeReserved and systemReserved.
func reserved(name string, m map[string]string) field.ErrorList {
	var errs field.ErrorList
	for _, r := range sortedStrings(m) {
		p := field.NewPath(name).Key(r)
		if !reservableResources[r] {
			errs = append(errs, field.NotSupported(p, r, sortedKeysBool(reservableResources)))
			continue
		}
		if q, err := resource.ParseQuantity(m[r]); err != nil || q.Sign() < 0 {
			errs = append(errs, field.Invalid(p, m[r], "must be a non-negative quantity"))
		}
	}
	return errs
}

func parseDuration(s string) (float64, error) {
	var d metav1.Duration
	if err := d.UnmarshalJSON([]byte(strconv.Quote(s))); err != nil {
		return 0, err
	}
	return d.Duration.Seconds(), nil
}

func sortedStrings(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sortStrings(keys)
	return keys
}

func sortedKeysBool(m map[string]bool) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sortStrings(keys)
	return keys
}
