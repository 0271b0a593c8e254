package kubeletconfig

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	v1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
)

// TestDefaults checks Default against the kubelet's defaults.go (v1.36), field by field,
// as JSON.
func TestDefaults(t *testing.T) {
	var c v1beta1.KubeletConfiguration
	Default(&c)
	b, err := json.Marshal(&c)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"enableServer":                              `true`,
		"syncFrequency":                             `"1m0s"`,
		"fileCheckFrequency":                        `"20s"`,
		"httpCheckFrequency":                        `"20s"`,
		"address":                                   `"0.0.0.0"`,
		"port":                                      `10250`,
		"readOnlyPort":                              `null`, // 0: disabled
		"authentication":                            `{"anonymous":{"enabled":false},"webhook":{"cacheTTL":"2m0s","enabled":true},"x509":{}}`,
		"authorization":                             `{"mode":"Webhook","webhook":{"cacheAuthorizedTTL":"5m0s","cacheUnauthorizedTTL":"30s"}}`,
		"registryPullQPS":                           `5`,
		"registryBurst":                             `10`,
		"eventRecordQPS":                            `50`,
		"eventBurst":                                `100`,
		"enableDebuggingHandlers":                   `true`,
		"healthzPort":                               `10248`,
		"healthzBindAddress":                        `"127.0.0.1"`,
		"oomScoreAdj":                               `-999`,
		"clusterDomain":                             `null`,
		"streamingConnectionIdleTimeout":            `"4h0m0s"`,
		"nodeStatusUpdateFrequency":                 `"10s"`,
		"nodeStatusReportFrequency":                 `"5m0s"`,
		"nodeLeaseDurationSeconds":                  `40`,
		"imageMinimumGCAge":                         `"2m0s"`,
		"imageMaximumGCAge":                         `"0s"`,
		"imageGCHighThresholdPercent":               `85`,
		"imageGCLowThresholdPercent":                `80`,
		"volumeStatsAggPeriod":                      `"1m0s"`,
		"cgroupsPerQOS":                             `true`,
		"cgroupDriver":                              `"cgroupfs"`,
		"cpuManagerPolicy":                          `"none"`,
		"cpuManagerReconcilePeriod":                 `"10s"`,
		"memoryManagerPolicy":                       `"None"`,
		"topologyManagerPolicy":                     `"none"`,
		"topologyManagerScope":                      `"container"`,
		"runtimeRequestTimeout":                     `"2m0s"`,
		"hairpinMode":                               `"promiscuous-bridge"`,
		"maxPods":                                   `110`,
		"podPidsLimit":                              `-1`,
		"resolvConf":                                `"/etc/resolv.conf"`,
		"cpuCFSQuota":                               `true`,
		"cpuCFSQuotaPeriod":                         `"100ms"`,
		"nodeStatusMaxImages":                       `50`,
		"maxOpenFiles":                              `1000000`,
		"contentType":                               `"application/vnd.kubernetes.protobuf"`,
		"kubeAPIQPS":                                `50`,
		"kubeAPIBurst":                              `100`,
		"serializeImagePulls":                       `true`,
		"evictionHard":                              `{"imagefs.available":"15%","imagefs.inodesFree":"5%","memory.available":"100Mi","nodefs.available":"10%","nodefs.inodesFree":"5%"}`,
		"evictionPressureTransitionPeriod":          `"5m0s"`,
		"mergeDefaultEvictionSettings":              `false`,
		"enableControllerAttachDetach":              `true`,
		"makeIPTablesUtilChains":                    `true`,
		"iptablesMasqueradeBit":                     `14`,
		"iptablesDropBit":                           `15`,
		"failSwapOn":                                `true`,
		"containerLogMaxSize":                       `"10Mi"`,
		"containerLogMaxFiles":                      `5`,
		"containerLogMaxWorkers":                    `1`,
		"containerLogMonitorInterval":               `"10s"`,
		"configMapAndSecretChangeDetectionStrategy": `"Watch"`,
		"enforceNodeAllocatable":                    `["pods"]`,
		"volumePluginDir":                           `"/usr/libexec/kubernetes/kubelet-plugins/volume/exec/"`,
		"enableSystemLogHandler":                    `true`,
		"enableProfilingHandler":                    `true`,
		"enableDebugFlagsHandler":                   `true`,
		"seccompDefault":                            `false`,
		"failCgroupV1":                              `true`,
		"memoryThrottlingFactor":                    `0.9`,
		"memoryReservationPolicy":                   `"None"`,
		"registerNode":                              `true`,
		"localStorageCapacityIsolation":             `true`,
		"containerRuntimeEndpoint":                  `"unix:///run/containerd/containerd.sock"`,
		"podLogsDir":                                `"/var/log/pods"`,
		"shutdownGracePeriod":                       `"0s"`,
		"shutdownGracePeriodCriticalPods":           `"0s"`,
		"staticPodURL":                              `null`,
		"crashLoopBackOff":                          `{"maxContainerRestartPeriod":"5m0s"}`,
		"imagePullCredentialsVerificationPolicy":    `"NeverVerifyPreloadedImages"`,
	}
	for field, w := range want {
		var wv any
		if err := json.Unmarshal([]byte(w), &wv); err != nil {
			t.Fatalf("%s: %v", field, err)
		}
		if gv := got[field]; !reflect.DeepEqual(gv, wv) {
			g, _ := json.Marshal(gv)
			t.Errorf("%s = %s, want %s", field, g, w)
		}
	}
	if got["logging"].(map[string]any)["format"] != "text" {
		t.Errorf("logging %v", got["logging"])
	}
	// The kubelet's rotateCertificates default, false, is one unitlet refuses: Load makes
	// it true when no input sets it (TestLoadRotatesCertificatesUnlessToldNot).
	if errs := Validate(&c); len(errs) != 1 || errs[0].Field != "rotateCertificates" {
		t.Errorf("the kubelet's defaults: %v, want only rotateCertificates refused", errs)
	}
	c.RotateCertificates = true
	if errs := Validate(&c); len(errs) > 0 {
		t.Errorf("the defaults do not validate: %v", errs)
	}
	c.RotateCertificates = false

	// Defaulting again changes nothing.
	again := *c.DeepCopy()
	Default(&again)
	if !reflect.DeepEqual(again, c) {
		t.Errorf("Default is not idempotent")
	}
}

func TestDefaultKeepsWhatIsSet(t *testing.T) {
	c := v1beta1.KubeletConfiguration{
		ReadOnlyPort:                10255,
		Authentication:              v1beta1.KubeletAuthentication{Anonymous: v1beta1.KubeletAnonymousAuthentication{Enabled: ptr.To(true)}},
		HealthzPort:                 ptr.To[int32](0),
		RegistryPullQPS:             ptr.To[int32](0),
		ImageGCHighThresholdPercent: ptr.To[int32](100),
		EnforceNodeAllocatable:      []string{},
		EvictionHard:                map[string]string{},
		ResolverConfig:              ptr.To(""),
		CgroupsPerQOS:               ptr.To(false),
		CPUCFSQuotaPeriod:           &metav1.Duration{Duration: 50 * time.Millisecond},
	}
	Default(&c)
	if c.ReadOnlyPort != 10255 || !*c.Authentication.Anonymous.Enabled || *c.HealthzPort != 0 || *c.RegistryPullQPS != 0 ||
		*c.ImageGCHighThresholdPercent != 100 || len(c.EnforceNodeAllocatable) != 0 || c.EnforceNodeAllocatable == nil ||
		len(c.EvictionHard) != 0 || *c.ResolverConfig != "" || *c.CgroupsPerQOS || c.CPUCFSQuotaPeriod.Duration != 50*time.Millisecond {
		t.Errorf("Default overwrote a set field: %+v", c)
	}
}

func TestDefaultsThatDependOnOtherFields(t *testing.T) {
	cases := []struct {
		name  string
		in    v1beta1.KubeletConfiguration
		check func(c *v1beta1.KubeletConfiguration) bool
	}{
		{"report frequency follows a set update frequency",
			v1beta1.KubeletConfiguration{NodeStatusUpdateFrequency: metav1.Duration{Duration: 20 * time.Second}},
			func(c *v1beta1.KubeletConfiguration) bool {
				return c.NodeStatusReportFrequency.Duration == 20*time.Second
			}},
		{"a set report frequency stays",
			v1beta1.KubeletConfiguration{NodeStatusUpdateFrequency: metav1.Duration{Duration: 20 * time.Second}, NodeStatusReportFrequency: metav1.Duration{Duration: time.Minute}},
			func(c *v1beta1.KubeletConfiguration) bool { return c.NodeStatusReportFrequency.Duration == time.Minute }},
		{"parallel pulls when maxParallelImagePulls is 2 or more",
			v1beta1.KubeletConfiguration{MaxParallelImagePulls: ptr.To[int32](3)},
			func(c *v1beta1.KubeletConfiguration) bool { return !*c.SerializeImagePulls }},
		{"serial pulls when maxParallelImagePulls is 1",
			v1beta1.KubeletConfiguration{MaxParallelImagePulls: ptr.To[int32](1)},
			func(c *v1beta1.KubeletConfiguration) bool { return *c.SerializeImagePulls }},
		{"a negative podPidsLimit is -1",
			v1beta1.KubeletConfiguration{PodPidsLimit: ptr.To[int64](-7)},
			func(c *v1beta1.KubeletConfiguration) bool { return *c.PodPidsLimit == -1 }},
		{"mergeDefaultEvictionSettings adds the missing signals",
			v1beta1.KubeletConfiguration{MergeDefaultEvictionSettings: ptr.To(true), EvictionHard: map[string]string{"memory.available": "1Gi"}},
			func(c *v1beta1.KubeletConfiguration) bool {
				return len(c.EvictionHard) == 5 && c.EvictionHard["memory.available"] == "1Gi"
			}},
		{"no crash-loop back-off default without its feature",
			v1beta1.KubeletConfiguration{FeatureGates: map[string]bool{gateKubeletCrashLoopBackOffMax: false}},
			func(c *v1beta1.KubeletConfiguration) bool { return c.CrashLoopBackOff.MaxContainerRestartPeriod == nil }},
		{"no image pull credential policy default without its feature",
			v1beta1.KubeletConfiguration{FeatureGates: map[string]bool{gateKubeletEnsureSecretPulledImages: false}},
			func(c *v1beta1.KubeletConfiguration) bool { return c.ImagePullCredentialsVerificationPolicy == "" }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.in
			Default(&c)
			c.RotateCertificates = true // as Load gives it (strictDefaults)
			if !tc.check(&c) {
				t.Errorf("got %+v", c)
			}
			if errs := Validate(&c); len(errs) > 0 {
				t.Errorf("does not validate: %v", errs)
			}
		})
	}
}
