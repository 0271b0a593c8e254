package kubeletconfig

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
	v1beta1 "k8s.io/kubelet/config/v1beta1"
)

// Field support: every KubeletConfiguration field is applied by a service, refused unless
// it has unitlet's value (Validate), or not supported: refused at load unless it holds a
// value unitlet honours (Unsupported). The README's field table lists the same
// (TestFieldSupportIsComplete keeps the two and the type in step).

// appliedBy are the fields a service applies, and which.
var appliedBy = map[string]string{
	"staticPodPath":                          "podsync",
	"podLogsDir":                             "podsync",
	"syncFrequency":                          "podsync, volumes",
	"fileCheckFrequency":                     "podsync",
	"httpCheckFrequency":                     "podsync",
	"staticPodURL":                           "podsync",
	"staticPodURLHeader":                     "podsync",
	"address":                                "status",
	"port":                                   "podsync, status",
	"tlsCertFile":                            "status",
	"tlsPrivateKeyFile":                      "status",
	"tlsCipherSuites":                        "status",
	"tlsCurvePreferences":                    "status",
	"tlsMinVersion":                          "status",
	"serverTLSBootstrap":                     "certs, status",
	"authentication":                         "status",
	"authorization":                          "status",
	"eventRecordQPS":                         "podsync, status: their event client",
	"eventBurst":                             "podsync, status: their event client",
	"clusterDomain":                          "podsync",
	"clusterDNS":                             "podsync",
	"streamingConnectionIdleTimeout":         "status",
	"nodeStatusUpdateFrequency":              "status",
	"nodeStatusReportFrequency":              "status",
	"nodeLeaseDurationSeconds":               "status",
	"imageMinimumGCAge":                      "podsync",
	"imageGCHighThresholdPercent":            "podsync",
	"imageGCLowThresholdPercent":             "podsync",
	"cgroupRoot":                             "podsync: where the pods' cgroups are made",
	"cgroupDriver":                           "podsync",
	"maxPods":                                "podsync (admission), status (capacity)",
	"resolvConf":                             "podsync",
	"nodeStatusMaxImages":                    "status",
	"kubeAPIQPS":                             "every service's API client",
	"kubeAPIBurst":                           "every service's API client",
	"evictionHard":                           "eviction (thresholds), status (node allocatable)",
	"evictionSoft":                           "eviction",
	"evictionSoftGracePeriod":                "eviction",
	"evictionPressureTransitionPeriod":       "eviction",
	"evictionMaxPodGracePeriod":              "eviction",
	"evictionMinimumReclaim":                 "eviction",
	"kernelMemcgNotification":                "eviction: memory crossings acted on at once (cgroup v1: the kernel's threshold event; v2: a 1 s sampler)",
	"localStorageCapacityIsolation":          "eviction: pods over their ephemeral-storage limits or emptyDir sizeLimit are evicted",
	"podsPerCore":                            "podsync (admission), status (capacity)",
	"enableControllerAttachDetach":           "status: the node annotation",
	"protectKernelDefaults":                  "config: the kernel tunables check",
	"systemReserved":                         "status (node allocatable), podsync (the kubepods cgroup's limits, the system-reserved cgroup)",
	"kubeReserved":                           "status (node allocatable), podsync (the kubepods cgroup's limits, the kube-reserved cgroup)",
	"providerID":                             "status: the Node",
	"seccompDefault":                         "podsync",
	"allowedUnsafeSysctls":                   "podsync (admission)",
	"registerWithTaints":                     "config, status: the Node",
	"registerNode":                           "status",
	"containerRuntimeEndpoint":               "podsync, status, volumes",
	"mergeDefaultEvictionSettings":           "config",
	"cgroupsPerQOS":                          "podsync: the QoS and pod cgroups",
	"podPidsLimit":                           "podsync: each pod cgroup's pids limit",
	"enforceNodeAllocatable":                 "podsync: the kubepods, system-reserved and kube-reserved cgroups' limits",
	"systemReservedCgroup":                   "podsync (enforceNodeAllocatable system-reserved)",
	"kubeReservedCgroup":                     "podsync (enforceNodeAllocatable kube-reserved)",
	"containerLogMaxSize":                    "podsync: container log rotation, changes applied live",
	"containerLogMaxFiles":                   "podsync: container log rotation, changes applied live",
	"containerLogMaxWorkers":                 "podsync: container log rotation, changes applied live",
	"containerLogMonitorInterval":            "podsync: container log rotation, changes applied live",
	"reservedSystemCPUs":                     "status (node allocatable), podsync (the kubepods cgroup's CPU); no CPU pinning",
	"registryPullQPS":                        "podsync: image pulls",
	"registryBurst":                          "podsync: image pulls",
	"serializeImagePulls":                    "podsync: image pulls",
	"maxParallelImagePulls":                  "podsync: image pulls",
	"imageMaximumGCAge":                      "podsync: image garbage collection",
	"imagePullCredentialsVerificationPolicy": "podsync: which pods may use an image already on the node",
	"preloadedImagesVerificationAllowlist":   "podsync: which pods may use an image already on the node",
	"contentType":                            "every service's API client",
	"runtimeRequestTimeout":                  "every service's CRI client",
	"imageServiceEndpoint":                   "every service's CRI client",
	"failSwapOn":                             "config: refused to start with swap on",
	"memorySwap":                             "podsync: swapBehavior NoSwap (the default) keeps containers from swapping where the kernel controls swap (memory.swap.max 0 on cgroup v2, a memory+swap limit equal to the memory limit on v1); LimitedSwap lets a Burstable pod's containers whose memory request is below their limit swap their request's share of the node's memory, of its swap (cgroup v2 only; logged and NoSwap on v1)",
	"failCgroupV1":                           "config: refused to start on cgroup v1",
	"singleProcessOOMKill":                   "podsync: memory.oom.group on cgroup v2",
	"shutdownGracePeriod":                    "podsync (graceful node shutdown), status (the Node not ready at once)",
	"shutdownGracePeriodCriticalPods":        "podsync (graceful node shutdown)",
	"shutdownGracePeriodByPodPriority":       "podsync (graceful node shutdown), status (the Node not ready at once)",
	"enableDebuggingHandlers":                "status: exec, attach, port forwarding, run, container logs, `/logs/` and `/configz` on the node API",
	"enableSystemLogHandler":                 "status: /logs/ on the node API, the files under /var/log (with enableDebuggingHandlers)",
	"enableSystemLogQuery":                   "status: the node log query on /logs/, the journal of the node's services (journalctl)",
	"healthzPort":                            "status: /healthz over plain HTTP",
	"healthzBindAddress":                     "status: /healthz over plain HTTP",
	"crashLoopBackOff":                       "podsync: maxContainerRestartPeriod caps the crash-loop back-off (10s doubling, or from the cap when it is shorter), with the gate KubeletCrashLoopBackOffMax",
	"featureGates":                           "config: every kubelet v1.36 gate is accepted at its default, one the kubelet does not have is refused, and a gate other than its default is refused unless unitlet follows it",
}

// refusedUnlessDefault are the fields Validate refuses unless they hold unitlet's value,
// each with a message of its own there.
var refusedUnlessDefault = []string{"readOnlyPort", "rotateCertificates", "oomScoreAdj", "runOnce"}

// unsupported is a field no service applies: a value other than the kubelet's default (or
// unitlet's own behaviour, accept) is refused at load, saying why.
type unsupported struct {
	why    string
	accept []string // JSON values accepted besides the kubelet's default
}

// notSupported are the fields unitlet does not apply. A configuration that sets one to a
// value unitlet would not honour does not load: the error names the field and says why.
var notSupported = map[string]unsupported{
	"enableServer":                              {why: "unitlet-status always serves the node API (logs, exec and metrics go through it)"},
	"enableContentionProfiling":                 {why: "unitlet serves no profiling handlers"},
	"enableProfilingHandler":                    {why: "unitlet serves no /debug/pprof handler on the node API", accept: []string{"false"}},
	"enableDebugFlagsHandler":                   {why: "unitlet serves no /debug/flags/v handler on the node API", accept: []string{"false"}},
	"volumeStatsAggPeriod":                      {why: "unitlet-volumes measures volumes on its own schedule"},
	"kubeletCgroups":                            {why: "each service runs in its systemd unit's cgroup; move units with Slice= in a drop-in"},
	"systemCgroups":                             {why: "unitlet moves no system processes; systemd places them"},
	"cpuManagerPolicy":                          {why: "unitlet has no CPU manager: containers are not pinned to CPUs"},
	"cpuManagerPolicyOptions":                   {why: "unitlet has no CPU manager"},
	"cpuManagerReconcilePeriod":                 {why: "unitlet has no CPU manager"},
	"memoryManagerPolicy":                       {why: "unitlet has no memory manager"},
	"reservedMemory":                            {why: "unitlet has no memory manager"},
	"topologyManagerPolicy":                     {why: "unitlet has no topology manager"},
	"topologyManagerScope":                      {why: "unitlet has no topology manager"},
	"topologyManagerPolicyOptions":              {why: "unitlet has no topology manager"},
	"qosReserved":                               {why: "the QoS cgroups get no memory reservations (the kubelet's alpha QOSReserved)"},
	"podCIDR":                                   {why: "unitlet passes no pod CIDR to the runtime; the CNI configuration assigns pod addresses"},
	"cpuCFSQuota":                               {why: "CPU limits are always enforced with CFS quota"},
	"cpuCFSQuotaPeriod":                         {why: "the CFS quota period is always 100ms"},
	"maxOpenFiles":                              {why: "each service's open file limit is its unit's LimitNOFILE=; change it with a drop-in"},
	"makeIPTablesUtilChains":                    {why: "unitlet makes no iptables chains (the kubelet's KUBE-IPTABLES-HINT and KUBE-FIREWALL)", accept: []string{"false"}},
	"iptablesMasqueradeBit":                     {why: "unitlet makes no iptables chains"},
	"iptablesDropBit":                           {why: "unitlet makes no iptables chains"},
	"configMapAndSecretChangeDetectionStrategy": {why: "unitlet-volumes reads the configMaps and secrets its pods use at each pod start and again every syncFrequency (the kubelet's Get strategy), whatever the field says"},
	"showHiddenMetricsForVersion":               {why: "unitlet has no hidden metrics"},
	"logging":                                   {why: "each service logs text to the journal; set UNITLET_LOG_LEVEL in its unit to change the level"},
	"memoryThrottlingFactor":                    {why: "unitlet does not set memory.high (the kubelet's alpha MemoryQoS)"},
	"memoryReservationPolicy":                   {why: "unitlet does not set memory.min (the kubelet's alpha MemoryQoS)"},
	"tracing":                                   {why: "unitlet exports no traces"},
	"userNamespaces":                            {why: "each pod's user namespace gets the default 65536 IDs"},
}

// irrelevant are the fields that change nothing on a unitlet node, and why: any valid
// value loads, and one other than the default is logged at each load (Irrelevant).
var irrelevant = map[string]string{
	"hairpinMode":     "the kubelet v1.36 does not use it either: the CNI configuration sets hairpin mode",
	"volumePluginDir": "unitlet runs no FlexVolume plugins: a pod with a flexVolume fails at volume set-up",
}

// Irrelevant names the fields of c that hold a value other than the default and change
// nothing on a unitlet node, each as a line for the log.
func Irrelevant(c *v1beta1.KubeletConfiguration) []string {
	var def v1beta1.KubeletConfiguration
	Default(&def)
	got, want := jsonFields(c), jsonFields(&def)
	var out []string
	for _, name := range jsonNamesOf(c) {
		if why, ok := irrelevant[name]; ok && !reflect.DeepEqual(got[name], want[name]) {
			out = append(out, fmt.Sprintf("%s is set to %s, which changes nothing on a unitlet node: %s", name, got[name], why))
		}
	}
	return out
}

// gatesFollowed are the feature gates unitlet honours at either value: each only decides
// what unitlet does anyway (a field it refuses or does not use) or what it follows
// (HostnameOverride, EventedPLEG). Any other gate must hold the kubelet's default.
var gatesFollowed = []string{
	gateCustomCPUCFSQuotaPeriod,                // off: cpuCFSQuotaPeriod stays 100ms, as unitlet's
	gateRotateKubeletServerCertificate,         // off: serverTLSBootstrap is refused
	gateGracefulNodeShutdown,                   // validation follows it: off refuses the shutdown periods
	gateGracefulNodeShutdownBasedOnPodPriority, // likewise for shutdownGracePeriodByPodPriority
	gateKubeletCrashLoopBackOffMax,             // podsync follows it; off: crashLoopBackOff is refused
	gateKubeletEnsureSecretPulledImages,        // podsync follows it
	gateHostnameOverride,                       // podsync follows it
	gateEventedPLEG,                            // podsync follows it (on unless set false, unlike the kubelet)
}

// Unsupported refuses the fields of c unitlet does not apply that hold a value it would
// not honour, and the feature gates it would not follow, naming each and why. A field is
// compared with the kubelet's default under c's feature gates.
func Unsupported(c *v1beta1.KubeletConfiguration) field.ErrorList {
	def := v1beta1.KubeletConfiguration{FeatureGates: c.FeatureGates}
	Default(&def)
	got, want := jsonFields(c), jsonFields(&def)
	var errs field.ErrorList
	known := knownGates()
	for _, name := range sortedKeys(c.FeatureGates) {
		g, ok := known[name]
		p := field.NewPath("featureGates").Key(name)
		switch {
		case !ok:
			errs = append(errs, field.Forbidden(p, "unrecognized feature gate: kubelet v1.36 has no such gate; remove it"))
		case c.FeatureGates[name] != g.def && !slices.Contains(gatesFollowed, name):
			errs = append(errs, field.Forbidden(p, fmt.Sprintf("%t is not supported: unitlet does not implement the feature's %s state; remove the gate or set it to %t", c.FeatureGates[name], onOff(c.FeatureGates[name]), g.def)))
		}
	}
	for _, name := range jsonNamesOf(c) {
		u, ok := notSupported[name]
		if !ok || reflect.DeepEqual(got[name], want[name]) || slices.Contains(u.accept, string(got[name])) {
			continue
		}
		errs = append(errs, field.Forbidden(field.NewPath(name), fmt.Sprintf("%s is not supported: %s; remove the field or set it to %s", got[name], u.why, acceptable(want[name], u.accept))))
	}
	return errs
}

// acceptable lists the values an unsupported field may hold, for its error.
func acceptable(def json.RawMessage, accept []string) string {
	vals := []string{string(def)}
	if def == nil {
		vals = []string{"null"}
	}
	return strings.Join(append(vals, accept...), " or ")
}

// jsonNamesOf are the JSON names of the fields of c's type, in the type's order.
func jsonNamesOf(c *v1beta1.KubeletConfiguration) []string {
	var out []string
	t := reflect.TypeOf(*c)
	for i := range t.NumField() {
		if name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ","); name != "" && name != "-" {
			out = append(out, name)
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

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}
