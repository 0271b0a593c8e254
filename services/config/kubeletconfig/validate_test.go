package kubeletconfig

import (
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	tracingapi "k8s.io/component-base/tracing/api/v1"
	v1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
)

type (
	kc            = v1beta1.KubeletConfiguration
	tracingConfig = tracingapi.TracingConfiguration
)

func dur(s string) metav1.Duration {
	d, err := time.ParseDuration(s)
	if err != nil {
		panic(err)
	}
	return metav1.Duration{Duration: d}
}

// loaded is the configuration Load makes of no input: the kubelet's defaults and
// unitlet's stricter ones.
func loaded() kc {
	var c kc
	Default(&c)
	c.RotateCertificates = true
	return c
}

func TestValidateRejects(t *testing.T) {
	cases := []struct {
		name  string
		edit  func(c *kc)
		field string
	}{
		{"syncFrequency negative", func(c *kc) { c.SyncFrequency = dur("-1s") }, "syncFrequency"},
		{"fileCheckFrequency negative", func(c *kc) { c.FileCheckFrequency = dur("-1s") }, "fileCheckFrequency"},
		{"httpCheckFrequency negative", func(c *kc) { c.HTTPCheckFrequency = dur("-1s") }, "httpCheckFrequency"},
		{"nodeStatusUpdateFrequency negative", func(c *kc) { c.NodeStatusUpdateFrequency = dur("-1s") }, "nodeStatusUpdateFrequency"},
		{"nodeStatusReportFrequency negative", func(c *kc) { c.NodeStatusReportFrequency = dur("-1s") }, "nodeStatusReportFrequency"},
		{"runtimeRequestTimeout negative", func(c *kc) { c.RuntimeRequestTimeout = dur("-1s") }, "runtimeRequestTimeout"},
		{"streamingConnectionIdleTimeout negative", func(c *kc) { c.StreamingConnectionIdleTimeout = dur("-1s") }, "streamingConnectionIdleTimeout"},
		{"evictionPressureTransitionPeriod negative", func(c *kc) { c.EvictionPressureTransitionPeriod = dur("-1s") }, "evictionPressureTransitionPeriod"},
		{"webhook cacheTTL negative", func(c *kc) { c.Authentication.Webhook.CacheTTL = dur("-1s") }, "authentication.webhook.cacheTTL"},
		{"imageMinimumGCAge negative", func(c *kc) { c.ImageMinimumGCAge = dur("-1s") }, "imageMinimumGCAge"},
		{"imageMaximumGCAge not above minimum", func(c *kc) { c.ImageMaximumGCAge = dur("1m") }, "imageMaximumGCAge"},
		{"cpuCFSQuotaPeriod too long", func(c *kc) { c.CPUCFSQuotaPeriod = ptr.To(dur("2s")) }, "cpuCFSQuotaPeriod"},
		{"cpuCFSQuotaPeriod without its feature", func(c *kc) {
			c.CPUCFSQuotaPeriod = ptr.To(dur("50ms"))
			c.FeatureGates = map[string]bool{gateCustomCPUCFSQuotaPeriod: false}
		}, "cpuCFSQuotaPeriod"},
		{"containerLogMonitorInterval too short", func(c *kc) { c.ContainerLogMonitorInterval = ptr.To(dur("1s")) }, "containerLogMonitorInterval"},
		{"maxContainerRestartPeriod too long", func(c *kc) { c.CrashLoopBackOff.MaxContainerRestartPeriod = ptr.To(dur("10m")) }, "crashLoopBackOff.maxContainerRestartPeriod"},
		{"maxContainerRestartPeriod without its feature", func(c *kc) {
			c.FeatureGates = map[string]bool{gateKubeletCrashLoopBackOffMax: false}
		}, "crashLoopBackOff.maxContainerRestartPeriod"},
		{"shutdownGracePeriod under a second", func(c *kc) { c.ShutdownGracePeriod = dur("500ms") }, "shutdownGracePeriod"},
		{"critical pods longer than shutdown", func(c *kc) {
			c.ShutdownGracePeriod = dur("10s")
			c.ShutdownGracePeriodCriticalPods = dur("20s")
		}, "shutdownGracePeriodCriticalPods"},
		{"shutdown by priority and by period", func(c *kc) {
			c.ShutdownGracePeriod = dur("10s")
			c.ShutdownGracePeriodByPodPriority = []v1beta1.ShutdownGracePeriodByPodPriority{{Priority: 1, ShutdownGracePeriodSeconds: 5}}
		}, "shutdownGracePeriodByPodPriority"},
		{"negative budget of a priority group", func(c *kc) {
			c.ShutdownGracePeriodByPodPriority = []v1beta1.ShutdownGracePeriodByPodPriority{{Priority: 1, ShutdownGracePeriodSeconds: -5}}
		}, "shutdownGracePeriodByPodPriority[0].shutdownGracePeriodSeconds"},
		{"a priority group given twice", func(c *kc) {
			c.ShutdownGracePeriodByPodPriority = []v1beta1.ShutdownGracePeriodByPodPriority{{Priority: 1, ShutdownGracePeriodSeconds: 5}, {Priority: 1, ShutdownGracePeriodSeconds: 6}}
		}, "shutdownGracePeriodByPodPriority[1].priority"},

		{"port 0", func(c *kc) { c.Port = 0 }, "port"},
		{"port too big", func(c *kc) { c.Port = 70000 }, "port"},
		{"readOnlyPort negative", func(c *kc) { c.ReadOnlyPort = -1 }, "readOnlyPort"},
		{"oomScoreAdj other than the units'", func(c *kc) { c.OOMScoreAdj = ptr.To[int32](-500) }, "oomScoreAdj"},
		{"readOnlyPort served", func(c *kc) { c.ReadOnlyPort = 10255 }, "readOnlyPort"},
		{"rotateCertificates false", func(c *kc) { c.RotateCertificates = false }, "rotateCertificates"},
		{"tlsMinVersion below 1.2", func(c *kc) { c.TLSMinVersion = "VersionTLS11" }, "tlsMinVersion"},
		{"tlsMinVersion unknown", func(c *kc) { c.TLSMinVersion = "VersionTLS14" }, "tlsMinVersion"},
		{"tlsCipherSuites insecure", func(c *kc) {
			c.TLSCipherSuites = []string{"TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "TLS_RSA_WITH_RC4_128_SHA"}
		}, "tlsCipherSuites[1]"},
		{"tlsCipherSuites unknown", func(c *kc) { c.TLSCipherSuites = []string{"TLS_NONE"} }, "tlsCipherSuites[0]"},
		{"tlsCipherSuites without HTTP/2's", func(c *kc) { c.TLSCipherSuites = []string{"TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"} }, "tlsCipherSuites"},
		{"tlsCipherSuites with TLS 1.3", func(c *kc) {
			c.TLSMinVersion, c.TLSCipherSuites = "VersionTLS13", []string{"TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"}
		}, "tlsCipherSuites"},
		{"tlsCurvePreferences unknown", func(c *kc) { c.TLSCurvePreferences = []int32{29, 7} }, "tlsCurvePreferences"},
		{"healthzPort too big", func(c *kc) { c.HealthzPort = ptr.To[int32](65536) }, "healthzPort"},
		{"address not an IP", func(c *kc) { c.Address = "localhost" }, "address"},
		{"healthzBindAddress not an IP", func(c *kc) { c.HealthzBindAddress = "127.0.0.1:80" }, "healthzBindAddress"},
		{"clusterDNS not an IP", func(c *kc) { c.ClusterDNS = []string{"10.0.0.10", "dns.local"} }, "clusterDNS[1]"},
		{"clusterDNS with a zone", func(c *kc) { c.ClusterDNS = []string{"fe80::1%eth0"} }, "clusterDNS[0]"},
		{"clusterDomain not a domain", func(c *kc) { c.ClusterDomain = "Cluster_Local" }, "clusterDomain"},
		{"podCIDR not a CIDR", func(c *kc) { c.PodCIDR = "10.0.0.0" }, "podCIDR"},
		{"containerRuntimeEndpoint empty", func(c *kc) { c.ContainerRuntimeEndpoint = "" }, "containerRuntimeEndpoint"},
		{"containerRuntimeEndpoint tcp", func(c *kc) { c.ContainerRuntimeEndpoint = "tcp://localhost:1" }, "containerRuntimeEndpoint"},
		{"containerRuntimeEndpoint relative socket", func(c *kc) { c.ContainerRuntimeEndpoint = "unix://run/c.sock" }, "containerRuntimeEndpoint"},
		{"imageServiceEndpoint relative", func(c *kc) { c.ImageServiceEndpoint = "run/c.sock" }, "imageServiceEndpoint"},
		{"staticPodURL not http", func(c *kc) { c.StaticPodURL = "ftp://host/pods" }, "staticPodURL"},
		{"tls key without cert", func(c *kc) { c.TLSPrivateKeyFile = "/k.key" }, "tlsCertFile"},
		{"tlsMinVersion unknown", func(c *kc) { c.TLSMinVersion = "VersionTLS14" }, "tlsMinVersion"},
		{"tlsCipherSuites unknown", func(c *kc) { c.TLSCipherSuites = []string{"TLS_AES_128_GCM_SHA256", "ROT13"} }, "tlsCipherSuites[1]"},

		{"staticPodPath relative", func(c *kc) { c.StaticPodPath = "manifests" }, "staticPodPath"},
		{"clientCAFile relative", func(c *kc) { c.Authentication.X509.ClientCAFile = "ca.crt" }, "authentication.x509.clientCAFile"},
		{"resolvConf relative", func(c *kc) { c.ResolverConfig = ptr.To("resolv.conf") }, "resolvConf"},
		{"podLogsDir relative", func(c *kc) { c.PodLogsDir = "logs" }, "podLogsDir"},
		{"podLogsDir not clean", func(c *kc) { c.PodLogsDir = "/var/log/pods/" }, "podLogsDir"},
		{"podLogsDir not ASCII", func(c *kc) { c.PodLogsDir = "/var/log/pöds" }, "podLogsDir"},

		{"maxPods negative", func(c *kc) { c.MaxPods = -1 }, "maxPods"},
		{"podsPerCore negative", func(c *kc) { c.PodsPerCore = -1 }, "podsPerCore"},
		{"podPidsLimit below -1", func(c *kc) { c.PodPidsLimit = ptr.To[int64](-2) }, "podPidsLimit"},
		{"nodeLeaseDurationSeconds negative", func(c *kc) { c.NodeLeaseDurationSeconds = -1 }, "nodeLeaseDurationSeconds"},
		{"registryPullQPS negative", func(c *kc) { c.RegistryPullQPS = ptr.To[int32](-1) }, "registryPullQPS"},
		{"registryBurst negative", func(c *kc) { c.RegistryBurst = -1 }, "registryBurst"},
		{"eventRecordQPS negative", func(c *kc) { c.EventRecordQPS = ptr.To[int32](-1) }, "eventRecordQPS"},
		{"eventBurst negative", func(c *kc) { c.EventBurst = -1 }, "eventBurst"},
		{"kubeAPIQPS negative", func(c *kc) { c.KubeAPIQPS = ptr.To[int32](-1) }, "kubeAPIQPS"},
		{"kubeAPIBurst negative", func(c *kc) { c.KubeAPIBurst = -1 }, "kubeAPIBurst"},
		{"maxOpenFiles negative", func(c *kc) { c.MaxOpenFiles = -1 }, "maxOpenFiles"},
		{"nodeStatusMaxImages below -1", func(c *kc) { c.NodeStatusMaxImages = ptr.To[int32](-2) }, "nodeStatusMaxImages"},
		{"oomScoreAdj out of range", func(c *kc) { c.OOMScoreAdj = ptr.To[int32](-1001) }, "oomScoreAdj"},
		{"iptablesDropBit out of range", func(c *kc) { c.IPTablesDropBit = ptr.To[int32](32) }, "iptablesDropBit"},
		{"image GC high threshold out of range", func(c *kc) { c.ImageGCHighThresholdPercent = ptr.To[int32](101) }, "imageGCHighThresholdPercent"},
		{"image GC low threshold out of range", func(c *kc) { c.ImageGCLowThresholdPercent = ptr.To[int32](-1) }, "imageGCLowThresholdPercent"},
		{"image GC low equal to high", func(c *kc) { c.ImageGCLowThresholdPercent = ptr.To[int32](85) }, "imageGCLowThresholdPercent"},
		{"maxParallelImagePulls zero", func(c *kc) { c.MaxParallelImagePulls = ptr.To[int32](0) }, "maxParallelImagePulls"},
		{"maxParallelImagePulls with serial pulls", func(c *kc) { c.MaxParallelImagePulls = ptr.To[int32](3) }, "maxParallelImagePulls"},
		{"containerLogMaxFiles 1", func(c *kc) { c.ContainerLogMaxFiles = ptr.To[int32](1) }, "containerLogMaxFiles"},
		{"containerLogMaxSize not a quantity", func(c *kc) { c.ContainerLogMaxSize = "big" }, "containerLogMaxSize"},
		{"containerLogMaxSize zero", func(c *kc) { c.ContainerLogMaxSize = "0" }, "containerLogMaxSize"},
		{"containerLogMaxWorkers zero", func(c *kc) { c.ContainerLogMaxWorkers = ptr.To[int32](0) }, "containerLogMaxWorkers"},
		{"memoryThrottlingFactor above 1", func(c *kc) { c.MemoryThrottlingFactor = ptr.To(1.5) }, "memoryThrottlingFactor"},
		{"runOnce", func(c *kc) { c.RunOnce = true }, "runOnce"},

		{"hairpinMode unknown", func(c *kc) { c.HairpinMode = "hairy" }, "hairpinMode"},
		{"cgroupDriver unknown", func(c *kc) { c.CgroupDriver = "upstart" }, "cgroupDriver"},
		{"cpuManagerPolicy unknown", func(c *kc) { c.CPUManagerPolicy = "greedy" }, "cpuManagerPolicy"},
		{"memoryManagerPolicy unknown", func(c *kc) { c.MemoryManagerPolicy = "none" }, "memoryManagerPolicy"},
		{"topologyManagerPolicy unknown", func(c *kc) { c.TopologyManagerPolicy = "any" }, "topologyManagerPolicy"},
		{"topologyManagerScope unknown", func(c *kc) { c.TopologyManagerScope = "node" }, "topologyManagerScope"},
		{"authorization mode unknown", func(c *kc) { c.Authorization.Mode = "RBAC" }, "authorization.mode"},
		{"change detection unknown", func(c *kc) { c.ConfigMapAndSecretChangeDetectionStrategy = "Poll" }, "configMapAndSecretChangeDetectionStrategy"},
		{"swapBehavior unknown", func(c *kc) { c.MemorySwap.SwapBehavior = "UnlimitedSwap" }, "memorySwap.swapBehavior"},
		{"tiered memory reservation without MemoryQoS", func(c *kc) { c.MemoryReservationPolicy = v1beta1.TieredReservationMemoryReservationPolicy }, "memoryReservationPolicy"},
		{"locked feature turned off", func(c *kc) { c.FeatureGates = map[string]bool{gateNodeSwap: false} }, "featureGates[NodeSwap]"},
		{"system log query without handler", func(c *kc) {
			c.EnableSystemLogQuery = ptr.To(true)
			c.EnableSystemLogHandler = ptr.To(false)
		}, "enableSystemLogQuery"},
		{"systemCgroups without cgroupRoot", func(c *kc) { c.SystemCgroups = "/system" }, "cgroupRoot"},
		{"image pull policy unknown", func(c *kc) { c.ImagePullCredentialsVerificationPolicy = "Sometimes" }, "imagePullCredentialsVerificationPolicy"},
		{"allowlist without its policy", func(c *kc) { c.PreloadedImagesVerificationAllowlist = []string{"registry.k8s.io/pause"} }, "preloadedImagesVerificationAllowlist"},
		{"allowlist pattern with a tag", func(c *kc) {
			c.ImagePullCredentialsVerificationPolicy = v1beta1.NeverVerifyAllowlistedImages
			c.PreloadedImagesVerificationAllowlist = []string{"registry.k8s.io/*", "registry.k8s.io/pause:3.10"}
		}, "preloadedImagesVerificationAllowlist[1]"},
		{"enforceNodeAllocatable unknown", func(c *kc) { c.EnforceNodeAllocatable = []string{"pods", "everything"} }, "enforceNodeAllocatable[1]"},
		{"enforceNodeAllocatable duplicate", func(c *kc) { c.EnforceNodeAllocatable = []string{"pods", "pods"} }, "enforceNodeAllocatable[1]"},
		{"enforceNodeAllocatable none and more", func(c *kc) { c.EnforceNodeAllocatable = []string{"pods", "none"} }, "enforceNodeAllocatable[1]"},
		{"enforce system-reserved without its cgroup", func(c *kc) { c.EnforceNodeAllocatable = []string{"system-reserved"} }, "systemReservedCgroup"},
		{"enforce pods without cgroupsPerQOS", func(c *kc) { c.CgroupsPerQOS = ptr.To(false) }, "enforceNodeAllocatable[0]"},
		{"reservedSystemCPUs not a list", func(c *kc) { c.ReservedSystemCPUs = "0-" }, "reservedSystemCPUs"},
		{"idsPerPod not a multiple", func(c *kc) { c.UserNamespaces = &v1beta1.UserNamespaces{IDsPerPod: ptr.To[int64](70000)} }, "userNamespaces.idsPerPod"},

		{"evictionHard unknown signal", func(c *kc) { c.EvictionHard = map[string]string{"memory.free": "1Gi"} }, "evictionHard[memory.free]"},
		{"evictionHard not a quantity", func(c *kc) { c.EvictionHard = map[string]string{"memory.available": "lots"} }, "evictionHard[memory.available]"},
		{"evictionHard zero quantity", func(c *kc) { c.EvictionHard = map[string]string{"memory.available": "0"} }, "evictionHard[memory.available]"},
		{"evictionHard negative", func(c *kc) { c.EvictionHard = map[string]string{"memory.available": "-1Gi"} }, "evictionHard[memory.available]"},
		{"evictionHard percentage above 100", func(c *kc) { c.EvictionHard = map[string]string{"nodefs.available": "101%"} }, "evictionHard[nodefs.available]"},
		{"evictionHard percentage not a number", func(c *kc) { c.EvictionHard = map[string]string{"nodefs.available": "NaN%"} }, "evictionHard[nodefs.available]"},
		{"evictionSoft without grace period", func(c *kc) { c.EvictionSoft = map[string]string{"memory.available": "1Gi"} }, "evictionSoftGracePeriod[memory.available]"},
		{"evictionSoft unknown signal", func(c *kc) {
			c.EvictionSoft = map[string]string{"memory": "1Gi"}
			c.EvictionSoftGracePeriod = map[string]string{"memory": "1m"}
		}, "evictionSoft[memory]"},
		{"evictionSoftGracePeriod not a duration", func(c *kc) {
			c.EvictionSoft = map[string]string{"memory.available": "1Gi"}
			c.EvictionSoftGracePeriod = map[string]string{"memory.available": "a while"}
		}, "evictionSoftGracePeriod[memory.available]"},
		{"evictionMinimumReclaim zero percentage", func(c *kc) { c.EvictionMinimumReclaim = map[string]string{"memory.available": "0%"} }, "evictionMinimumReclaim[memory.available]"},
		{"kubeReserved unknown resource", func(c *kc) { c.KubeReserved = map[string]string{"gpu": "1"} }, "kubeReserved[gpu]"},
		{"kubeReserved not a quantity", func(c *kc) { c.KubeReserved = map[string]string{"memory": "lots"} }, "kubeReserved[memory]"},
		{"systemReserved negative", func(c *kc) { c.SystemReserved = map[string]string{"cpu": "-1"} }, "systemReserved[cpu]"},
		{"qosReserved not a percentage", func(c *kc) { c.QOSReserved = map[string]string{"memory": "1Gi"} }, "qosReserved[memory]"},
		{"reservedMemory unknown resource", func(c *kc) {
			c.ReservedMemory = []v1beta1.MemoryReservation{{NumaNode: 0, Limits: v1.ResourceList{"cpu": resource.MustParse("1")}}}
		}, "reservedMemory[0].limits[cpu]"},

		{"taint key invalid", func(c *kc) { c.RegisterWithTaints = []v1.Taint{{Key: "bad key", Effect: v1.TaintEffectNoSchedule}} }, "registerWithTaints[0].key"},
		{"taint value invalid", func(c *kc) {
			c.RegisterWithTaints = []v1.Taint{{Key: "a", Value: "not valid!", Effect: v1.TaintEffectNoSchedule}}
		}, "registerWithTaints[0].value"},
		{"taint effect unknown", func(c *kc) { c.RegisterWithTaints = []v1.Taint{{Key: "a", Effect: "Sometimes"}} }, "registerWithTaints[0].effect"},
		{"taint effect missing", func(c *kc) { c.RegisterWithTaints = []v1.Taint{{Key: "a"}} }, "registerWithTaints[0].effect"},
		{"taint timeAdded", func(c *kc) {
			c.RegisterWithTaints = []v1.Taint{{Key: "a", Effect: v1.TaintEffectNoExecute, TimeAdded: &metav1.Time{}}}
		}, "registerWithTaints[0].timeAdded"},
		{"logging format unknown", func(c *kc) { c.Logging.Format = "xml" }, "logging.format"},
		{"tracing endpoint invalid", func(c *kc) { c.Tracing = &tracingConfig{Endpoint: ptr.To("dns://%zz")} }, "tracing.endpoint"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := loaded()
			tc.edit(&c)
			errs := Validate(&c)
			if len(errs) == 0 {
				t.Fatalf("no error, want one on %s", tc.field)
			}
			if errs[0].Field != tc.field {
				t.Fatalf("first error %v, want one on %s", errs[0], tc.field)
			}
			for _, e := range errs {
				if strings.ContainsAny(e.Error(), "\n\r") {
					t.Errorf("error on several lines: %q", e.Error())
				}
			}
		})
	}
}

func TestValidateAccepts(t *testing.T) {
	cases := []struct {
		name string
		edit func(c *kc)
	}{
		{"defaults", func(c *kc) {}},
		{"ports disabled", func(c *kc) { c.ReadOnlyPort, c.HealthzPort = 0, ptr.To[int32](0) }},
		{"TLS settings", func(c *kc) {
			c.TLSMinVersion = "VersionTLS12"
			c.TLSCipherSuites = []string{"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256"}
			c.TLSCurvePreferences = []int32{29, 23}
		}},
		{"TLS 1.3 only", func(c *kc) { c.TLSMinVersion = "VersionTLS13" }},
		{"IPv6", func(c *kc) {
			c.Address, c.HealthzBindAddress, c.ClusterDNS = "::", "::1", []string{"fd00::a", "10.0.0.10"}
		}},
		{"runtime endpoint as a path", func(c *kc) { c.ContainerRuntimeEndpoint = "/run/crio/crio.sock" }},
		{"systemd cgroups", func(c *kc) { c.CgroupDriver = "systemd" }},
		{"eviction thresholds", func(c *kc) {
			c.EvictionHard = map[string]string{"memory.available": "500Mi", "nodefs.available": "0%", "imagefs.available": "100%", "pid.available": "5.5%"}
			c.EvictionSoft = map[string]string{"memory.available": "1Gi"}
			c.EvictionSoftGracePeriod = map[string]string{"memory.available": "1m30s"}
			c.EvictionMinimumReclaim = map[string]string{"memory.available": "0", "nodefs.available": "500Mi", "imagefs.available": "2%"}
		}},
		{"reservations", func(c *kc) {
			c.KubeReserved = map[string]string{"cpu": "100m", "memory": "1Gi", "ephemeral-storage": "1Gi", "pid": "1000"}
			c.SystemReserved = map[string]string{"cpu": "0"}
			c.QOSReserved = map[string]string{"memory": "50%"}
			c.ReservedSystemCPUs = "0-1,4"
		}},
		{"taints", func(c *kc) {
			c.RegisterWithTaints = []v1.Taint{{Key: "node-role.kubernetes.io/control-plane", Effect: v1.TaintEffectNoSchedule}, {Key: "a", Value: "b", Effect: v1.TaintEffectPreferNoSchedule}}
		}},
		{"enforce all reservations", func(c *kc) {
			c.EnforceNodeAllocatable = []string{"pods", "system-reserved", "kube-reserved-compressible"}
			c.SystemReservedCgroup, c.KubeReservedCgroup = "/system.slice", "/kube.slice"
		}},
		{"enforce none", func(c *kc) { c.EnforceNodeAllocatable, c.CgroupsPerQOS = []string{"none"}, ptr.To(false) }},
		{"graceful shutdown", func(c *kc) { c.ShutdownGracePeriod, c.ShutdownGracePeriodCriticalPods = dur("30s"), dur("10s") }},
		{"graceful shutdown by priority", func(c *kc) {
			c.ShutdownGracePeriodByPodPriority = []v1beta1.ShutdownGracePeriodByPodPriority{{Priority: 100000, ShutdownGracePeriodSeconds: 10}, {Priority: 0, ShutdownGracePeriodSeconds: 20}}
		}},
		{"parallel pulls", func(c *kc) { c.SerializeImagePulls, c.MaxParallelImagePulls = ptr.To(false), ptr.To[int32](5) }},
		{"image max age", func(c *kc) { c.ImageMaximumGCAge = dur("24h") }},
		{"allowlist", func(c *kc) {
			c.ImagePullCredentialsVerificationPolicy = v1beta1.NeverVerifyAllowlistedImages
			c.PreloadedImagesVerificationAllowlist = []string{"registry.k8s.io/*", "registry.k8s.io/pause"}
		}},
		{"features at their locked values", func(c *kc) { c.FeatureGates = map[string]bool{gateNodeSwap: true, "SomethingElse": false} }},
		{"TLS", func(c *kc) {
			c.TLSCertFile, c.TLSPrivateKeyFile, c.TLSMinVersion = "/pki/k.crt", "/pki/k.key", "VersionTLS12"
			c.TLSCipherSuites = []string{"TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"}
		}},
		{"cluster domain with a dot", func(c *kc) { c.ClusterDomain = "cluster.local." }},
		{"static pod URL", func(c *kc) { c.StaticPodURL = "https://example.com/pods.yaml" }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := loaded()
			tc.edit(&c)
			if errs := Validate(&c); len(errs) > 0 {
				t.Fatalf("errors: %v", errs)
			}
		})
	}
}

// TestValidateUndefaulted: Validate on a configuration nobody defaulted reports errors
// and does not panic.
func TestValidateUndefaulted(t *testing.T) {
	if errs := Validate(&kc{}); len(errs) == 0 {
		t.Fatal("an empty configuration validates")
	}
}
