package kubeletconfig

import (
	"crypto/tls"
	"fmt"
	"math"
	"net/netip"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	cliflag "k8s.io/component-base/cli/flag"
	tracingapi "k8s.io/component-base/tracing/api/v1"
	v1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/cpuset"
)

// evictionSignals are the signals the kubelet's eviction manager knows on Linux.
var evictionSignals = []string{
	"allocatableMemory.available", "containerfs.available", "containerfs.inodesFree",
	"imagefs.available", "imagefs.inodesFree", "memory.available",
	"nodefs.available", "nodefs.inodesFree", "pid.available",
}

// http2Suite reports whether a cipher suite is one of those HTTP/2 requires one of.
func http2Suite(name string) bool {
	return name == "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256" || name == "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"
}

// reservableResources may appear in kubeReserved and systemReserved.
var reservableResources = []string{"cpu", "ephemeral-storage", "memory", "pid"}

// The values enforceNodeAllocatable may hold.
const (
	enforcePods                       = "pods"
	enforceSystemReserved             = "system-reserved"
	enforceSystemReservedCompressible = "system-reserved-compressible"
	enforceKubeReserved               = "kube-reserved"
	enforceKubeReservedCompressible   = "kube-reserved-compressible"
	enforceNone                       = "none"
)

// Validate checks c as the kubelet v1.36 does when it starts (its configuration
// validation, and the parsing of eviction thresholds and reserved resources that fails
// its start), and a few checks of its own: durations that must be positive, addresses
// that must be IPs, paths that must be absolute. Errors carry JSON field paths. It
// expects a defaulted configuration; a field left nil is not checked.
func Validate(c *v1beta1.KubeletConfiguration) field.ErrorList {
	var errs field.ErrorList
	add := func(e *field.Error) { errs = append(errs, e) }
	gates := featureGates(c.FeatureGates)

	// Feature gates the checks below depend on.
	known := knownGates()
	for _, name := range sortedKeys(c.FeatureGates) {
		if g, ok := known[name]; ok && g.locked && c.FeatureGates[name] != g.def {
			add(field.Forbidden(field.NewPath("featureGates").Key(name), fmt.Sprintf("the feature is locked to %t", g.def)))
		}
	}

	// Durations.
	positive := func(name string, d metav1.Duration) {
		if d.Duration <= 0 {
			add(field.Invalid(path(name), d.Duration.String(), "must be greater than zero"))
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
	positive("cpuManagerReconcilePeriod", c.CPUManagerReconcilePeriod)
	positive("authentication.webhook.cacheTTL", c.Authentication.Webhook.CacheTTL)
	positive("authorization.webhook.cacheAuthorizedTTL", c.Authorization.Webhook.CacheAuthorizedTTL)
	positive("authorization.webhook.cacheUnauthorizedTTL", c.Authorization.Webhook.CacheUnauthorizedTTL)
	if c.ImageMinimumGCAge.Duration < 0 {
		add(field.Invalid(path("imageMinimumGCAge"), c.ImageMinimumGCAge.Duration.String(), "must not be negative"))
	}
	if d := c.ImageMaximumGCAge.Duration; d < 0 {
		add(field.Invalid(path("imageMaximumGCAge"), d.String(), "must not be negative"))
	} else if d > 0 && d <= c.ImageMinimumGCAge.Duration {
		add(field.Invalid(path("imageMaximumGCAge"), d.String(), fmt.Sprintf("must be greater than imageMinimumGCAge (%s), or 0 for no limit", c.ImageMinimumGCAge.Duration)))
	}
	if p := c.CPUCFSQuotaPeriod; p != nil {
		if gates.enabled(gateCustomCPUCFSQuotaPeriod) {
			if p.Duration < time.Millisecond || p.Duration > time.Second {
				add(field.Invalid(path("cpuCFSQuotaPeriod"), p.Duration.String(), "must be between 1ms and 1s"))
			}
		} else if p.Duration != 100*time.Millisecond {
			add(field.Forbidden(path("cpuCFSQuotaPeriod"), "may differ from 100ms only with the feature gate "+gateCustomCPUCFSQuotaPeriod))
		}
	}
	if p := c.ContainerLogMonitorInterval; p != nil && p.Duration < 3*time.Second {
		add(field.Invalid(path("containerLogMonitorInterval"), p.Duration.String(), "must be at least 3s"))
	}
	if p := c.CrashLoopBackOff.MaxContainerRestartPeriod; gates.enabled(gateKubeletCrashLoopBackOffMax) {
		if p != nil && (p.Duration < time.Second || p.Duration > 300*time.Second) {
			add(field.Invalid(path("crashLoopBackOff.maxContainerRestartPeriod"), p.Duration.String(), "must be between 1s and 300s"))
		}
	} else if p != nil {
		add(field.Forbidden(path("crashLoopBackOff.maxContainerRestartPeriod"), "needs the feature gate "+gateKubeletCrashLoopBackOffMax))
	}
	errs = append(errs, validateShutdown(c, gates)...)

	// Addresses and ports.
	port := func(name string, p int32, zeroOK bool) {
		if p == 0 && zeroOK || p >= 1 && p <= 65535 {
			return
		}
		msg := "must be a port between 1 and 65535"
		if zeroOK {
			msg += ", or 0 to disable"
		}
		add(field.Invalid(path(name), p, msg))
	}
	port("port", c.Port, false)
	if c.ReadOnlyPort != 0 {
		add(field.Forbidden(path("readOnlyPort"), fmt.Sprintf("%d is refused: unitlet serves no unauthenticated read-only port; remove the field or set it to 0", c.ReadOnlyPort)))
	}
	if c.HealthzPort != nil {
		port("healthzPort", *c.HealthzPort, true)
	}
	ip := func(p *field.Path, s string) {
		if a, err := netip.ParseAddr(s); err != nil || a.Zone() != "" {
			add(field.Invalid(p, s, "must be an IP address"))
		}
	}
	ip(path("address"), c.Address)
	ip(path("healthzBindAddress"), c.HealthzBindAddress)
	for i, s := range c.ClusterDNS {
		ip(path("clusterDNS").Index(i), s)
	}
	if c.ClusterDomain != "" {
		for _, msg := range validation.IsDNS1123Subdomain(strings.TrimSuffix(c.ClusterDomain, ".")) {
			add(field.Invalid(path("clusterDomain"), c.ClusterDomain, msg))
		}
	}
	if c.PodCIDR != "" {
		if _, err := netip.ParsePrefix(c.PodCIDR); err != nil {
			add(field.Invalid(path("podCIDR"), c.PodCIDR, "must be a CIDR such as 10.244.0.0/24"))
		}
	}
	errs = append(errs, validateEndpoint(path("containerRuntimeEndpoint"), c.ContainerRuntimeEndpoint, true)...)
	errs = append(errs, validateEndpoint(path("imageServiceEndpoint"), c.ImageServiceEndpoint, false)...)
	if c.StaticPodURL != "" {
		if u, err := url.Parse(c.StaticPodURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			add(field.Invalid(path("staticPodURL"), c.StaticPodURL, "must be an http:// or https:// URL"))
		}
	}

	// TLS.
	if (c.TLSCertFile == "") != (c.TLSPrivateKeyFile == "") {
		name, other := "tlsCertFile", "tlsPrivateKeyFile"
		if c.TLSPrivateKeyFile == "" {
			name, other = other, name
		}
		add(field.Required(path(name), "must be set together with "+other))
	}
	// Stricter than the kubelet: no TLS below 1.2, no cipher suite Go calls insecure, and
	// no cipher suites where TLS 1.3 would ignore them.
	if c.TLSMinVersion != "" {
		if v, err := cliflag.TLSVersion(c.TLSMinVersion); err != nil {
			add(field.NotSupported(path("tlsMinVersion"), c.TLSMinVersion, cliflag.TLSPossibleVersions()))
		} else if v < tls.VersionTLS12 {
			add(field.Forbidden(path("tlsMinVersion"), fmt.Sprintf("%s is refused: unitlet serves TLS 1.2 or later (VersionTLS12, VersionTLS13)", c.TLSMinVersion)))
		} else if v == tls.VersionTLS13 && len(c.TLSCipherSuites) > 0 {
			add(field.Forbidden(path("tlsCipherSuites"), "TLS 1.3 cipher suites are not configurable: with tlsMinVersion VersionTLS13 this list would be ignored; remove it"))
		}
	}
	insecure := cliflag.InsecureTLSCiphers()
	for i, s := range c.TLSCipherSuites {
		if _, bad := insecure[s]; bad {
			add(field.Forbidden(path("tlsCipherSuites").Index(i), s+" is refused: Go counts it among the insecure cipher suites"))
		} else if _, err := cliflag.TLSCipherSuites([]string{s}); err != nil {
			add(field.Invalid(path("tlsCipherSuites").Index(i), s, "unknown cipher suite"))
		}
	}
	if len(c.TLSCipherSuites) > 0 && !slices.ContainsFunc(c.TLSCipherSuites, http2Suite) {
		add(field.Invalid(path("tlsCipherSuites"), c.TLSCipherSuites, "the node API speaks HTTP/2, which needs TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 or TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256 in the list"))
	}
	if _, err := cliflag.TLSCurvePreferences(c.TLSCurvePreferences); err != nil {
		add(field.Invalid(path("tlsCurvePreferences"), c.TLSCurvePreferences, err.Error()))
	}
	if !c.RotateCertificates {
		// Load makes it true when no input sets it: only an explicit false gets here.
		add(field.Forbidden(path("rotateCertificates"), "false is refused: unitlet-certs always renews the node's client certificate before it expires; remove the field or set it to true"))
	}
	if c.ServerTLSBootstrap && !gates.enabled(gateRotateKubeletServerCertificate) {
		add(field.Forbidden(path("serverTLSBootstrap"), "needs the feature gate "+gateRotateKubeletServerCertificate))
	}

	// Paths: the file's relative paths were made absolute when it was read; others have
	// no directory to be relative to.
	absolute := func(name, p string) {
		if p != "" && !filepath.IsAbs(p) {
			add(field.Invalid(path(name), p, "must be an absolute path"))
		}
	}
	absolute("staticPodPath", c.StaticPodPath)
	absolute("authentication.x509.clientCAFile", c.Authentication.X509.ClientCAFile)
	absolute("tlsCertFile", c.TLSCertFile)
	absolute("tlsPrivateKeyFile", c.TLSPrivateKeyFile)
	if c.ResolverConfig != nil {
		absolute("resolvConf", *c.ResolverConfig)
	}
	absolute("volumePluginDir", c.VolumePluginDir)
	switch d := c.PodLogsDir; {
	case d == "":
		add(field.Required(path("podLogsDir"), ""))
	case !filepath.IsAbs(d):
		add(field.Invalid(path("podLogsDir"), d, "must be an absolute path"))
	case filepath.Clean(d) != d:
		add(field.Invalid(path("podLogsDir"), d, "must be a clean path (no trailing slash, '.' or '..')"))
	case strings.IndexFunc(d, func(r rune) bool { return r > unicode.MaxASCII }) >= 0:
		add(field.Invalid(path("podLogsDir"), d, "must be ASCII"))
	}

	// Counts, rates and limits.
	nonNegative := func(name string, v int64) {
		if v < 0 {
			add(field.Invalid(path(name), v, "must not be negative"))
		}
	}
	nonNegative("maxPods", int64(c.MaxPods))
	nonNegative("podsPerCore", int64(c.PodsPerCore))
	nonNegative("registryBurst", int64(c.RegistryBurst))
	nonNegative("eventBurst", int64(c.EventBurst))
	nonNegative("kubeAPIBurst", int64(c.KubeAPIBurst))
	nonNegative("maxOpenFiles", c.MaxOpenFiles)
	nonNegative("evictionMaxPodGracePeriod", int64(c.EvictionMaxPodGracePeriod))
	for _, f := range []struct {
		name string
		p    *int32
	}{{"registryPullQPS", c.RegistryPullQPS}, {"eventRecordQPS", c.EventRecordQPS}, {"kubeAPIQPS", c.KubeAPIQPS}} {
		if f.p != nil {
			nonNegative(f.name, int64(*f.p))
		}
	}
	if p := c.NodeStatusMaxImages; p != nil && *p < -1 {
		add(field.Invalid(path("nodeStatusMaxImages"), *p, "must be -1 (no limit) or more"))
	}
	if p := c.PodPidsLimit; p != nil && *p < -1 {
		add(field.Invalid(path("podPidsLimit"), *p, "must be -1 (no limit) or more"))
	}
	if c.NodeLeaseDurationSeconds <= 0 {
		add(field.Invalid(path("nodeLeaseDurationSeconds"), c.NodeLeaseDurationSeconds, "must be greater than zero"))
	}
	if p := c.OOMScoreAdj; p != nil && (*p < -1000 || *p > 1000) {
		add(field.Invalid(path("oomScoreAdj"), *p, "must be between -1000 and 1000"))
	} else if p != nil && *p != -999 {
		add(field.Forbidden(path("oomScoreAdj"), fmt.Sprintf("%d is refused: unitlet's services take their OOM score from their units (OOMScoreAdjust=-999); change it there with a drop-in, and leave this field at -999", *p)))
	}
	for _, f := range []struct {
		name string
		p    *int32
	}{{"iptablesMasqueradeBit", c.IPTablesMasqueradeBit}, {"iptablesDropBit", c.IPTablesDropBit}} {
		if f.p != nil && (*f.p < 0 || *f.p > 31) {
			add(field.Invalid(path(f.name), *f.p, "must be between 0 and 31"))
		}
	}
	errs = append(errs, validateImageGC(c)...)
	if p := c.MaxParallelImagePulls; p != nil {
		if *p < 1 {
			add(field.Invalid(path("maxParallelImagePulls"), *p, "must be 1 or more"))
		} else if *p > 1 && c.SerializeImagePulls != nil && *c.SerializeImagePulls {
			add(field.Invalid(path("maxParallelImagePulls"), *p, "must be 1 unless serializeImagePulls is false"))
		}
	}
	if p := c.ContainerLogMaxFiles; p != nil && *p < 2 {
		add(field.Invalid(path("containerLogMaxFiles"), *p, "must be 2 or more"))
	}
	if c.ContainerLogMaxSize != "" {
		q, err := resource.ParseQuantity(c.ContainerLogMaxSize)
		if _, whole := q.AsInt64(); err != nil || q.Sign() <= 0 || !whole {
			add(field.Invalid(path("containerLogMaxSize"), c.ContainerLogMaxSize, "must be a positive whole number of bytes such as 10Mi"))
		}
	}
	if p := c.ContainerLogMaxWorkers; p != nil && *p < 1 {
		add(field.Invalid(path("containerLogMaxWorkers"), *p, "must be 1 or more"))
	}
	if p := c.MemoryThrottlingFactor; p != nil && (!(*p > 0) || *p > 1) {
		add(field.Invalid(path("memoryThrottlingFactor"), *p, "must be greater than 0 and at most 1"))
	}
	if c.RunOnce {
		add(field.Forbidden(path("runOnce"), "run-once mode is no longer supported"))
	}

	// Choices.
	oneOf := func(name, v string, allowed ...string) {
		if !slices.Contains(allowed, v) {
			add(field.NotSupported(path(name), v, allowed))
		}
	}
	oneOf("hairpinMode", c.HairpinMode, v1beta1.PromiscuousBridge, v1beta1.HairpinVeth, v1beta1.HairpinNone)
	oneOf("cgroupDriver", c.CgroupDriver, "cgroupfs", "systemd")
	oneOf("cpuManagerPolicy", c.CPUManagerPolicy, "none", "static")
	oneOf("memoryManagerPolicy", c.MemoryManagerPolicy, v1beta1.NoneMemoryManagerPolicy, v1beta1.StaticMemoryManagerPolicy)
	oneOf("topologyManagerPolicy", c.TopologyManagerPolicy, v1beta1.NoneTopologyManagerPolicy, v1beta1.BestEffortTopologyManagerPolicy,
		v1beta1.RestrictedTopologyManagerPolicy, v1beta1.SingleNumaNodeTopologyManagerPolicy)
	oneOf("topologyManagerScope", c.TopologyManagerScope, v1beta1.ContainerTopologyManagerScope, v1beta1.PodTopologyManagerScope)
	oneOf("authorization.mode", string(c.Authorization.Mode), string(v1beta1.KubeletAuthorizationModeWebhook), string(v1beta1.KubeletAuthorizationModeAlwaysAllow))
	oneOf("configMapAndSecretChangeDetectionStrategy", string(c.ConfigMapAndSecretChangeDetectionStrategy),
		string(v1beta1.WatchChangeDetectionStrategy), string(v1beta1.GetChangeDetectionStrategy), string(v1beta1.TTLCacheChangeDetectionStrategy))
	oneOf("contentType", c.ContentType, "application/vnd.kubernetes.protobuf", "application/json")
	oneOf("memorySwap.swapBehavior", c.MemorySwap.SwapBehavior, "", "NoSwap", "LimitedSwap")
	oneOf("memoryReservationPolicy", string(c.MemoryReservationPolicy),
		string(v1beta1.NoneMemoryReservationPolicy), string(v1beta1.TieredReservationMemoryReservationPolicy))
	if c.MemoryReservationPolicy == v1beta1.TieredReservationMemoryReservationPolicy && !gates.enabled(gateMemoryQoS) {
		add(field.Forbidden(path("memoryReservationPolicy"), "TieredReservation needs the feature gate "+gateMemoryQoS))
	}
	if c.EnableSystemLogQuery != nil && *c.EnableSystemLogQuery {
		if !gates.enabled(gateNodeLogQuery) {
			add(field.Forbidden(path("enableSystemLogQuery"), "needs the feature gate "+gateNodeLogQuery))
		} else if c.EnableSystemLogHandler != nil && !*c.EnableSystemLogHandler {
			add(field.Forbidden(path("enableSystemLogQuery"), "needs enableSystemLogHandler"))
		}
	}
	if c.SystemCgroups != "" && c.CgroupRoot == "" {
		add(field.Required(path("cgroupRoot"), "systemCgroups needs cgroupRoot"))
	}
	errs = append(errs, validateImagePullCredentials(c, gates)...)
	errs = append(errs, validateEnforceNodeAllocatable(c)...)
	if c.ReservedSystemCPUs != "" {
		if c.SystemReservedCgroup != "" || c.KubeReservedCgroup != "" {
			add(field.Forbidden(path("reservedSystemCPUs"), "may not be used with systemReservedCgroup or kubeReservedCgroup"))
		}
		if _, err := cpuset.Parse(c.ReservedSystemCPUs); err != nil {
			add(field.Invalid(path("reservedSystemCPUs"), c.ReservedSystemCPUs, "must be a CPU list such as 0-1,4"))
		}
	}
	if u := c.UserNamespaces; u != nil && u.IDsPerPod != nil {
		const unit = 65536
		if n := *u.IDsPerPod; n < unit || n%unit != 0 || n > math.MaxUint32 {
			add(field.Invalid(path("userNamespaces.idsPerPod"), n, fmt.Sprintf("must be a multiple of %d between %d and %d", unit, unit, int64(math.MaxUint32))))
		}
	}

	// Eviction and reservations.
	errs = append(errs, validateThresholds("evictionHard", c.EvictionHard)...)
	errs = append(errs, validateThresholds("evictionSoft", c.EvictionSoft)...)
	for _, sig := range sortedKeys(c.EvictionSoft) {
		if _, ok := c.EvictionSoftGracePeriod[sig]; !ok {
			add(field.Required(path("evictionSoftGracePeriod").Key(sig), "every evictionSoft signal needs a grace period"))
		}
	}
	for _, sig := range sortedKeys(c.EvictionSoftGracePeriod) {
		p := path("evictionSoftGracePeriod").Key(sig)
		if !slices.Contains(evictionSignals, sig) {
			add(field.NotSupported(p, sig, evictionSignals))
		} else if d, err := time.ParseDuration(c.EvictionSoftGracePeriod[sig]); err != nil || d < 0 {
			add(field.Invalid(p, c.EvictionSoftGracePeriod[sig], "must be a duration such as 1m30s"))
		}
	}
	for _, sig := range sortedKeys(c.EvictionMinimumReclaim) {
		p := path("evictionMinimumReclaim").Key(sig)
		v := c.EvictionMinimumReclaim[sig]
		if !slices.Contains(evictionSignals, sig) {
			add(field.NotSupported(p, sig, evictionSignals))
		} else if pct, isPct := strings.CutSuffix(v, "%"); isPct {
			if f, err := strconv.ParseFloat(pct, 32); err != nil || !(f > 0 && f <= 100) {
				add(field.Invalid(p, v, "a percentage must be greater than 0% and at most 100%"))
			}
		} else if q, err := resource.ParseQuantity(v); err != nil || q.Sign() < 0 {
			add(field.Invalid(p, v, "must be a quantity such as 100Mi or a percentage such as 5%"))
		}
	}
	errs = append(errs, validateReserved("kubeReserved", c.KubeReserved)...)
	errs = append(errs, validateReserved("systemReserved", c.SystemReserved)...)
	for _, r := range sortedKeys(c.QOSReserved) {
		p := path("qosReserved").Key(r)
		if r != "memory" {
			add(field.NotSupported(p, r, []string{"memory"}))
		} else if pct, isPct := strings.CutSuffix(c.QOSReserved[r], "%"); !isPct {
			add(field.Invalid(p, c.QOSReserved[r], "must be a percentage such as 50%"))
		} else if n, err := strconv.ParseInt(pct, 10, 64); err != nil || n < 0 || n > 100 {
			add(field.Invalid(p, c.QOSReserved[r], "must be a percentage between 0% and 100%"))
		}
	}
	errs = append(errs, validateReservedMemory(c.ReservedMemory)...)

	// Node registration, logging, tracing.
	for i, t := range c.RegisterWithTaints {
		errs = append(errs, validateTaint(path("registerWithTaints").Index(i), t)...)
	}
	errs = append(errs, validateLogging(c)...)
	errs = append(errs, tracingapi.ValidateTracingConfiguration(c.Tracing, nil, path("tracing"))...)
	return errs
}

// path turns a dotted field name into a field.Path.
func path(name string) *field.Path {
	parts := strings.Split(name, ".")
	return field.NewPath(parts[0], parts[1:]...)
}

func validateShutdown(c *v1beta1.KubeletConfiguration, gates gateSet) field.ErrorList {
	var errs field.ErrorList
	period, critical := c.ShutdownGracePeriod.Duration, c.ShutdownGracePeriodCriticalPods.Duration
	if !gates.enabled(gateGracefulNodeShutdown) {
		if period != 0 || critical != 0 {
			errs = append(errs, field.Forbidden(path("shutdownGracePeriod"), "needs the feature gate "+gateGracefulNodeShutdown))
		}
	} else {
		for _, f := range []struct {
			name string
			d    time.Duration
		}{{"shutdownGracePeriod", period}, {"shutdownGracePeriodCriticalPods", critical}} {
			if f.d < 0 || f.d > 0 && f.d < time.Second {
				errs = append(errs, field.Invalid(path(f.name), f.d.String(), "must be 0 or at least 1s"))
			}
		}
		if critical > period {
			errs = append(errs, field.Invalid(path("shutdownGracePeriodCriticalPods"), critical.String(),
				fmt.Sprintf("must not be greater than shutdownGracePeriod (%s)", period)))
		}
	}
	if len(c.ShutdownGracePeriodByPodPriority) > 0 {
		if !gates.enabled(gateGracefulNodeShutdownBasedOnPodPriority) {
			errs = append(errs, field.Forbidden(path("shutdownGracePeriodByPodPriority"), "needs the feature gate "+gateGracefulNodeShutdownBasedOnPodPriority))
		} else if period > 0 || critical > 0 {
			errs = append(errs, field.Forbidden(path("shutdownGracePeriodByPodPriority"), "may not be set together with shutdownGracePeriod or shutdownGracePeriodCriticalPods"))
		}
		// Stricter than the kubelet, which takes a negative budget (and waits for nothing)
		// and a priority given twice (and keeps one of the two groups empty).
		seen := map[int32]bool{}
		for i, p := range c.ShutdownGracePeriodByPodPriority {
			at := path("shutdownGracePeriodByPodPriority").Index(i)
			if p.ShutdownGracePeriodSeconds < 0 {
				errs = append(errs, field.Invalid(at.Child("shutdownGracePeriodSeconds"), p.ShutdownGracePeriodSeconds, "must not be negative"))
			}
			if seen[p.Priority] {
				errs = append(errs, field.Duplicate(at.Child("priority"), p.Priority))
			}
			seen[p.Priority] = true
		}
	}
	return errs
}

func validateImageGC(c *v1beta1.KubeletConfiguration) field.ErrorList {
	if c.ImageGCHighThresholdPercent == nil || c.ImageGCLowThresholdPercent == nil {
		return nil
	}
	var errs field.ErrorList
	high, low := *c.ImageGCHighThresholdPercent, *c.ImageGCLowThresholdPercent
	inRange := true
	for _, f := range []struct {
		name string
		v    int32
	}{{"imageGCHighThresholdPercent", high}, {"imageGCLowThresholdPercent", low}} {
		if f.v < 0 || f.v > 100 {
			errs = append(errs, field.Invalid(path(f.name), f.v, "must be between 0 and 100"))
			inRange = false
		}
	}
	if inRange && low >= high {
		errs = append(errs, field.Invalid(path("imageGCLowThresholdPercent"), low, fmt.Sprintf("must be less than imageGCHighThresholdPercent (%d)", high)))
	}
	return errs
}

// validateEndpoint checks a CRI endpoint: unix:///absolute/path, or an absolute path.
func validateEndpoint(p *field.Path, ep string, required bool) field.ErrorList {
	if ep == "" {
		if required {
			return field.ErrorList{field.Required(p, "")}
		}
		return nil
	}
	sock, isUnix := strings.CutPrefix(ep, "unix://")
	if !isUnix && !strings.HasPrefix(ep, "/") {
		return field.ErrorList{field.Invalid(p, ep, "must be unix:///path/to/socket")}
	}
	if isUnix && !filepath.IsAbs(sock) {
		return field.ErrorList{field.Invalid(p, ep, "the socket path must be absolute: unix:///path/to/socket")}
	}
	return nil
}

func validateImagePullCredentials(c *v1beta1.KubeletConfiguration, gates gateSet) field.ErrorList {
	var errs field.ErrorList
	policy, allow := c.ImagePullCredentialsVerificationPolicy, c.PreloadedImagesVerificationAllowlist
	if !gates.enabled(gateKubeletEnsureSecretPulledImages) {
		if policy != "" {
			errs = append(errs, field.Forbidden(path("imagePullCredentialsVerificationPolicy"), "needs the feature gate "+gateKubeletEnsureSecretPulledImages))
		}
		if len(allow) > 0 {
			errs = append(errs, field.Forbidden(path("preloadedImagesVerificationAllowlist"), "needs the feature gate "+gateKubeletEnsureSecretPulledImages))
		}
		return errs
	}
	policies := []string{string(v1beta1.NeverVerify), string(v1beta1.NeverVerifyPreloadedImages),
		string(v1beta1.NeverVerifyAllowlistedImages), string(v1beta1.AlwaysVerify)}
	if !slices.Contains(policies, string(policy)) {
		errs = append(errs, field.NotSupported(path("imagePullCredentialsVerificationPolicy"), policy, policies))
	}
	if len(allow) > 0 && policy != v1beta1.NeverVerifyAllowlistedImages {
		errs = append(errs, field.Forbidden(path("preloadedImagesVerificationAllowlist"), "needs imagePullCredentialsVerificationPolicy NeverVerifyAllowlistedImages"))
	}
	for i, pattern := range allow {
		if msg := allowlistPatternError(pattern); msg != "" {
			errs = append(errs, field.Invalid(path("preloadedImagesVerificationAllowlist").Index(i), pattern, msg))
		}
	}
	return errs
}

// allowlistPatternError checks an image pattern: a registry path without tag or digest,
// optionally ending in /* for everything below it.
func allowlistPatternError(p string) string {
	switch {
	case p != strings.TrimSpace(p):
		return "must not start or end with spaces"
	case strings.ContainsAny(strings.TrimSuffix(p, "/*"), "*"):
		return "only a /* at the end may be a wildcard"
	case strings.TrimSuffix(p, "*") == "" || strings.TrimSuffix(p, "/*") == "":
		return "too short"
	case strings.ContainsAny(p, "@") || strings.Contains(p[strings.LastIndex(p, "/")+1:], ":"):
		return "must not have a tag or digest"
	}
	return ""
}

func validateEnforceNodeAllocatable(c *v1beta1.KubeletConfiguration) field.ErrorList {
	var errs field.ErrorList
	p := path("enforceNodeAllocatable")
	has := func(v string) bool { return slices.Contains(c.EnforceNodeAllocatable, v) }
	if has(enforceSystemReserved) && has(enforceSystemReservedCompressible) {
		errs = append(errs, field.Invalid(p, c.EnforceNodeAllocatable, "may not hold both system-reserved and system-reserved-compressible"))
	}
	if has(enforceKubeReserved) && has(enforceKubeReservedCompressible) {
		errs = append(errs, field.Invalid(p, c.EnforceNodeAllocatable, "may not hold both kube-reserved and kube-reserved-compressible"))
	}
	seen := map[string]bool{}
	for i, v := range c.EnforceNodeAllocatable {
		if seen[v] {
			errs = append(errs, field.Duplicate(p.Index(i), v))
			continue
		}
		seen[v] = true
		switch v {
		case enforcePods:
		case enforceSystemReserved, enforceSystemReservedCompressible:
			if c.SystemReservedCgroup == "" {
				errs = append(errs, field.Required(path("systemReservedCgroup"), "enforceNodeAllocatable "+v+" needs systemReservedCgroup"))
			}
		case enforceKubeReserved, enforceKubeReservedCompressible:
			if c.KubeReservedCgroup == "" {
				errs = append(errs, field.Required(path("kubeReservedCgroup"), "enforceNodeAllocatable "+v+" needs kubeReservedCgroup"))
			}
		case enforceNone:
			if len(c.EnforceNodeAllocatable) > 1 {
				errs = append(errs, field.Invalid(p.Index(i), v, "none may not be combined with other values"))
			}
			continue
		default:
			errs = append(errs, field.NotSupported(p.Index(i), v, []string{enforcePods, enforceSystemReserved,
				enforceSystemReservedCompressible, enforceKubeReserved, enforceKubeReservedCompressible, enforceNone}))
			continue
		}
		if c.CgroupsPerQOS != nil && !*c.CgroupsPerQOS {
			errs = append(errs, field.Invalid(p.Index(i), v, "needs cgroupsPerQOS"))
		}
	}
	return errs
}

// validateThresholds checks eviction thresholds as the kubelet parses them: a known
// signal, and a positive quantity or a percentage from 0% to 100% (0% and 100% turn the
// threshold off).
func validateThresholds(name string, m map[string]string) field.ErrorList {
	var errs field.ErrorList
	for _, sig := range sortedKeys(m) {
		p := path(name).Key(sig)
		v := m[sig]
		if !slices.Contains(evictionSignals, sig) {
			errs = append(errs, field.NotSupported(p, sig, evictionSignals))
			continue
		}
		if pct, isPct := strings.CutSuffix(v, "%"); isPct {
			if f, err := strconv.ParseFloat(pct, 32); err != nil || !(f >= 0 && f <= 100) {
				errs = append(errs, field.Invalid(p, v, "a percentage must be between 0% and 100%"))
			}
			continue
		}
		if q, err := resource.ParseQuantity(v); err != nil || q.Sign() <= 0 {
			errs = append(errs, field.Invalid(p, v, "must be a positive quantity such as 100Mi or a percentage such as 10%"))
		}
	}
	return errs
}

// validateReserved checks kubeReserved and systemReserved as the kubelet parses them.
func validateReserved(name string, m map[string]string) field.ErrorList {
	var errs field.ErrorList
	for _, r := range sortedKeys(m) {
		p := path(name).Key(r)
		if !slices.Contains(reservableResources, r) {
			errs = append(errs, field.NotSupported(p, r, reservableResources))
			continue
		}
		if q, err := resource.ParseQuantity(m[r]); err != nil || q.Sign() < 0 {
			errs = append(errs, field.Invalid(p, m[r], "must be a quantity that is not negative, such as 500m or 1Gi"))
		}
	}
	return errs
}

func validateReservedMemory(list []v1beta1.MemoryReservation) field.ErrorList {
	var errs field.ErrorList
	type key struct {
		node int32
		res  v1.ResourceName
	}
	seen := map[key]bool{}
	for i, r := range list {
		for _, name := range sortedKeys(r.Limits) {
			res := v1.ResourceName(name)
			p := path("reservedMemory").Index(i).Child("limits").Key(name)
			if res != v1.ResourceMemory && !strings.HasPrefix(name, v1.ResourceHugePagesPrefix) {
				errs = append(errs, field.NotSupported(p, name, []string{"memory", "hugepages-<size>"}))
			}
			if q := r.Limits[res]; q.IsZero() {
				errs = append(errs, field.Invalid(p, q.String(), "must not be zero"))
			}
			if k := (key{r.NumaNode, res}); seen[k] {
				errs = append(errs, field.Duplicate(p, name))
			} else {
				seen[k] = true
			}
		}
	}
	return errs
}

func validateTaint(p *field.Path, t v1.Taint) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range validation.IsQualifiedName(t.Key) {
		errs = append(errs, field.Invalid(p.Child("key"), t.Key, msg))
	}
	for _, msg := range validation.IsValidLabelValue(t.Value) {
		errs = append(errs, field.Invalid(p.Child("value"), t.Value, msg))
	}
	effects := []string{string(v1.TaintEffectNoSchedule), string(v1.TaintEffectPreferNoSchedule), string(v1.TaintEffectNoExecute)}
	if !slices.Contains(effects, string(t.Effect)) {
		errs = append(errs, field.NotSupported(p.Child("effect"), t.Effect, effects))
	}
	if t.TimeAdded != nil {
		errs = append(errs, field.Forbidden(p.Child("timeAdded"), "may not be set"))
	}
	return errs
}

// validateLogging checks what the kubelet's logging options check that does not depend
// on the process's flags.
func validateLogging(c *v1beta1.KubeletConfiguration) field.ErrorList {
	var errs field.ErrorList
	l := c.Logging
	p := path("logging")
	if l.Format != "text" && l.Format != "json" {
		errs = append(errs, field.NotSupported(p.Child("format"), l.Format, []string{"text", "json"}))
	}
	if l.FlushFrequency.Duration.Duration <= 0 {
		errs = append(errs, field.Invalid(p.Child("flushFrequency"), l.FlushFrequency.Duration.Duration.String(), "must be greater than zero"))
	}
	if l.Verbosity > math.MaxInt32 {
		errs = append(errs, field.Invalid(p.Child("verbosity"), l.Verbosity, fmt.Sprintf("must be at most %d", math.MaxInt32)))
	}
	if len(l.VModule) > 0 && l.Format != "text" {
		errs = append(errs, field.Forbidden(p.Child("vmodule"), "only the text format supports it"))
	}
	for i, item := range l.VModule {
		switch {
		case item.FilePattern == "":
			errs = append(errs, field.Required(p.Child("vmodule").Index(i).Child("filePattern"), ""))
		case strings.ContainsAny(item.FilePattern, "=,"):
			errs = append(errs, field.Invalid(p.Child("vmodule").Index(i).Child("filePattern"), item.FilePattern, "must not contain = or ,"))
		}
		if item.Verbosity > math.MaxInt32 {
			errs = append(errs, field.Invalid(p.Child("vmodule").Index(i).Child("verbosity"), item.Verbosity, fmt.Sprintf("must be at most %d", math.MaxInt32)))
		}
	}
	return errs
}
