package kubeletconfig

import (
	"encoding/json"
	"fmt"
	"reflect"

	v1beta1 "k8s.io/kubelet/config/v1beta1"
)

// Field support: every KubeletConfiguration field is applied by a service, refused unless
// it has unitlet's value (Validate), or not applied yet. The README's field table lists the
// same (TestFieldSupportIsComplete keeps the two and the type in step).

// appliedBy are the fields a service applies, and which.
var appliedBy = map[string]string{
	"staticPodPath":                    "podsync",
	"podLogsDir":                       "podsync",
	"syncFrequency":                    "podsync, volumes",
	"fileCheckFrequency":               "podsync",
	"httpCheckFrequency":               "podsync",
	"staticPodURL":                     "podsync",
	"staticPodURLHeader":               "podsync",
	"address":                          "status",
	"port":                             "podsync, status",
	"tlsCertFile":                      "status",
	"tlsPrivateKeyFile":                "status",
	"tlsCipherSuites":                  "status",
	"tlsCurvePreferences":              "status",
	"tlsMinVersion":                    "status",
	"serverTLSBootstrap":               "certs, status",
	"authentication":                   "status",
	"authorization":                    "status",
	"eventRecordQPS":                   "podsync, status: their event client",
	"eventBurst":                       "podsync, status: their event client",
	"clusterDomain":                    "podsync",
	"clusterDNS":                       "podsync",
	"streamingConnectionIdleTimeout":   "status",
	"nodeStatusUpdateFrequency":        "status",
	"nodeStatusReportFrequency":        "status",
	"nodeLeaseDurationSeconds":         "status",
	"imageMinimumGCAge":                "podsync",
	"imageGCHighThresholdPercent":      "podsync",
	"imageGCLowThresholdPercent":       "podsync",
	"cgroupRoot":                       "podsync: where the pods' cgroups are made",
	"cgroupDriver":                     "podsync",
	"maxPods":                          "podsync (admission), status (capacity)",
	"resolvConf":                       "podsync",
	"nodeStatusMaxImages":              "status",
	"kubeAPIQPS":                       "every service's API client",
	"kubeAPIBurst":                     "every service's API client",
	"evictionHard":                     "eviction (thresholds), status (node allocatable)",
	"evictionSoft":                     "eviction",
	"evictionSoftGracePeriod":          "eviction",
	"evictionPressureTransitionPeriod": "eviction",
	"evictionMaxPodGracePeriod":        "eviction",
	"evictionMinimumReclaim":           "eviction",
	"kernelMemcgNotification":          "eviction: memory crossings acted on at once (cgroup v1: the kernel's threshold event; v2: a 1 s sampler)",
	"localStorageCapacityIsolation":    "eviction: pods over their ephemeral-storage limits or emptyDir sizeLimit are evicted",
	"podsPerCore":                      "podsync (admission), status (capacity)",
	"enableControllerAttachDetach":     "status: the node annotation",
	"protectKernelDefaults":            "config: the kernel tunables check",
	"systemReserved":                   "status (node allocatable), podsync (the kubepods cgroup's limits, the system-reserved cgroup)",
	"kubeReserved":                     "status (node allocatable), podsync (the kubepods cgroup's limits, the kube-reserved cgroup)",
	"providerID":                       "status: the Node",
	"seccompDefault":                   "podsync",
	"allowedUnsafeSysctls":             "podsync (admission)",
	"registerWithTaints":               "config, status: the Node",
	"registerNode":                     "status",
	"containerRuntimeEndpoint":         "podsync, status, volumes",
	"mergeDefaultEvictionSettings":     "config",
	"cgroupsPerQOS":                    "podsync: the QoS and pod cgroups",
	"podPidsLimit":                     "podsync: each pod cgroup's pids limit",
	"enforceNodeAllocatable":           "podsync: the kubepods, system-reserved and kube-reserved cgroups' limits",
	"systemReservedCgroup":             "podsync (enforceNodeAllocatable system-reserved)",
	"kubeReservedCgroup":               "podsync (enforceNodeAllocatable kube-reserved)",
	"containerLogMaxSize":              "podsync: container log rotation, changes applied live",
	"containerLogMaxFiles":             "podsync: container log rotation, changes applied live",
	"containerLogMaxWorkers":           "podsync: container log rotation, changes applied live",
	"containerLogMonitorInterval":      "podsync: container log rotation, changes applied live",
	"reservedSystemCPUs":               "status (node allocatable), podsync (the kubepods cgroup's CPU); no CPU pinning",
}

// refusedUnlessDefault are the fields Validate refuses unless they hold unitlet's value.
var refusedUnlessDefault = []string{"readOnlyPort", "rotateCertificates", "oomScoreAdj"}

// notApplied are the fields no service applies yet: a value other than the kubelet's
// default is reported at every load (NotApplied), never silently dropped.
var notApplied = []string{
	"enableServer",
	"registryPullQPS",
	"registryBurst",
	"imagePullCredentialsVerificationPolicy",
	"preloadedImagesVerificationAllowlist",
	"enableDebuggingHandlers",
	"enableContentionProfiling",
	"healthzPort",
	"healthzBindAddress",
	"imageMaximumGCAge",
	"volumeStatsAggPeriod",
	"kubeletCgroups",
	"systemCgroups",
	"cpuManagerPolicy",
	"singleProcessOOMKill",
	"cpuManagerPolicyOptions",
	"cpuManagerReconcilePeriod",
	"memoryManagerPolicy",
	"topologyManagerPolicy",
	"topologyManagerScope",
	"topologyManagerPolicyOptions",
	"qosReserved",
	"runtimeRequestTimeout",
	"hairpinMode",
	"podCIDR",
	"runOnce",
	"cpuCFSQuota",
	"cpuCFSQuotaPeriod",
	"maxOpenFiles",
	"contentType",
	"serializeImagePulls",
	"maxParallelImagePulls",
	"makeIPTablesUtilChains",
	"iptablesMasqueradeBit",
	"iptablesDropBit",
	"featureGates",
	"failSwapOn",
	"memorySwap",
	"configMapAndSecretChangeDetectionStrategy",
	"showHiddenMetricsForVersion",
	"volumePluginDir",
	"logging",
	"enableSystemLogHandler",
	"enableSystemLogQuery",
	"shutdownGracePeriod",
	"shutdownGracePeriodCriticalPods",
	"shutdownGracePeriodByPodPriority",
	"crashLoopBackOff",
	"reservedMemory",
	"enableProfilingHandler",
	"enableDebugFlagsHandler",
	"memoryThrottlingFactor",
	"memoryReservationPolicy",
	"tracing",
	"imageServiceEndpoint",
	"failCgroupV1",
	"userNamespaces",
}

// NotApplied names the not-applied fields of c that differ from the kubelet's defaults,
// each as a warning for the log.
func NotApplied(c *v1beta1.KubeletConfiguration) []string {
	var def v1beta1.KubeletConfiguration
	Default(&def)
	got, want := jsonFields(c), jsonFields(&def)
	var out []string
	for _, f := range notApplied {
		if !reflect.DeepEqual(got[f], want[f]) {
			out = append(out, fmt.Sprintf("%s is set to %s, but unitlet does not apply it yet: the node behaves as with the kubelet's default (see the README's field table)", f, got[f]))
		}
	}
	return out
}

// jsonFields is c as JSON, by field.
func jsonFields(c *v1beta1.KubeletConfiguration) map[string]json.RawMessage {
	b, _ := json.Marshal(c)
	var m map[string]json.RawMessage
	_ = json.Unmarshal(b, &m)
	for k, v := range m {
		var x any
		_ = json.Unmarshal(v, &x)
		norm, _ := json.Marshal(x)
		m[k] = norm
	}
	return m
}
