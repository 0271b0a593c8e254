package policy

import (
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
)

// kubeletDefaultHard is the kubelet's evictionHard default on Linux, which
// unitlet-config applies before Parse sees a configuration.
func kubeletDefaultHard() map[string]string {
	return map[string]string{
		"memory.available":   "100Mi",
		"nodefs.available":   "10%",
		"nodefs.inodesFree":  "5%",
		"imagefs.available":  "15%",
		"imagefs.inodesFree": "5%",
	}
}

// summary is a threshold in one line, for comparing parsed configurations.
func summary(t Threshold) string {
	s := ThresholdKey(t) + "=" + t.Value.String()
	if t.Value.Quantity == nil {
		s += "(" + strconv.FormatFloat(float64(t.Value.Percentage), 'g', -1, 32) + ")"
	}
	if t.GracePeriod != 0 {
		s += " grace " + t.GracePeriod.String()
	}
	if t.MinReclaim != nil {
		s += " min " + t.MinReclaim.String()
	}
	return s
}

func summaries(ts []Threshold) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = summary(t)
	}
	return out
}

func TestParse(t *testing.T) {
	withHard := func(m map[string]string) *kubeletconfigv1beta1.KubeletConfiguration {
		return &kubeletconfigv1beta1.KubeletConfiguration{EvictionHard: m}
	}
	tests := []struct {
		name string
		kc   *kubeletconfigv1beta1.KubeletConfiguration
		want []string
		err  string
	}{
		{
			name: "kubelet defaults with node allocatable enforced on pods",
			kc: &kubeletconfigv1beta1.KubeletConfiguration{
				EvictionHard:           kubeletDefaultHard(),
				EnforceNodeAllocatable: []string{"pods"},
			},
			want: []string{
				"hard/allocatableMemory.available<-memory.available=100Mi",
				"hard/imagefs.available=15%(0.15)",
				"hard/imagefs.inodesFree=5%(0.05)",
				"hard/memory.available=100Mi",
				"hard/nodefs.available=10%(0.1)",
				"hard/nodefs.inodesFree=5%(0.05)",
			},
		},
		{
			name: "no allocatable threshold without pods enforcement",
			kc: &kubeletconfigv1beta1.KubeletConfiguration{
				EvictionHard:           map[string]string{"memory.available": "1Gi"},
				EnforceNodeAllocatable: []string{"system-reserved"},
			},
			want: []string{"hard/memory.available=1Gi"},
		},
		{
			name: "a configured allocatable threshold stays beside the derived one",
			kc: &kubeletconfigv1beta1.KubeletConfiguration{
				EvictionHard:           map[string]string{"memory.available": "100Mi", "allocatableMemory.available": "500Mi"},
				EnforceNodeAllocatable: []string{"pods"},
			},
			want: []string{
				"hard/allocatableMemory.available=500Mi",
				"hard/allocatableMemory.available<-memory.available=100Mi",
				"hard/memory.available=100Mi",
			},
		},
		{
			name: "0% and 100% are ignored, other percentages kept",
			kc: withHard(map[string]string{
				"memory.available": "0%", "nodefs.available": "100%",
				"imagefs.available": "0.0%", "pid.available": "50%", "nodefs.inodesFree": "12.5%",
			}),
			want: []string{
				"hard/imagefs.available=0.0%(0)",
				"hard/nodefs.inodesFree=12.5%(0.125)",
				"hard/pid.available=50%(0.5)",
			},
		},
		{
			name: "nothing configured",
			kc:   &kubeletconfigv1beta1.KubeletConfiguration{},
			want: []string{},
		},
		{
			name: "soft thresholds with grace periods follow the hard ones",
			kc: &kubeletconfigv1beta1.KubeletConfiguration{
				EvictionHard:            map[string]string{"memory.available": "100Mi"},
				EvictionSoft:            map[string]string{"nodefs.available": "20%", "memory.available": "500Mi"},
				EvictionSoftGracePeriod: map[string]string{"memory.available": "1m30s", "nodefs.available": "2m", "pid.available": "1s"},
			},
			want: []string{
				"hard/memory.available=100Mi",
				"soft/memory.available=500Mi grace 1m30s",
				"soft/nodefs.available=20%(0.2) grace 2m0s",
			},
		},
		{
			name: "a soft threshold of 0% needs no grace period",
			kc: &kubeletconfigv1beta1.KubeletConfiguration{
				EvictionSoft: map[string]string{"memory.available": "0%"},
			},
			want: []string{},
		},
		{
			name: "minimum reclaim applies to both kinds and to the derived allocatable threshold",
			kc: &kubeletconfigv1beta1.KubeletConfiguration{
				EvictionHard:            map[string]string{"memory.available": "100Mi", "nodefs.available": "10%"},
				EvictionSoft:            map[string]string{"memory.available": "300Mi"},
				EvictionSoftGracePeriod: map[string]string{"memory.available": "30s"},
				EvictionMinimumReclaim:  map[string]string{"memory.available": "200Mi", "nodefs.available": "5%", "pid.available": "0", "allocatableMemory.available": "1Gi"},
				EnforceNodeAllocatable:  []string{"pods"},
			},
			want: []string{
				"hard/allocatableMemory.available<-memory.available=100Mi min 200Mi",
				"hard/memory.available=100Mi min 200Mi",
				"hard/nodefs.available=10%(0.1) min 5%",
				"soft/memory.available=300Mi grace 30s min 200Mi",
			},
		},
		{
			name: "not a quantity",
			kc:   withHard(map[string]string{"memory.available": "abc"}),
			err:  `evictionHard[memory.available]: "abc" is neither a quantity nor a percentage`,
		},
		{
			name: "zero quantity",
			kc:   withHard(map[string]string{"memory.available": "0"}),
			err:  `evictionHard[memory.available]: "0" must be positive`,
		},
		{
			name: "negative quantity",
			kc:   withHard(map[string]string{"memory.available": "-1Mi"}),
			err:  `evictionHard[memory.available]: "-1Mi" must be positive`,
		},
		{
			name: "not a percentage",
			kc:   withHard(map[string]string{"nodefs.available": "ten%"}),
			err:  `evictionHard[nodefs.available]: "ten%" is not a percentage`,
		},
		{
			name: "NaN is not a percentage",
			kc:   withHard(map[string]string{"nodefs.available": "NaN%"}),
			err:  `evictionHard[nodefs.available]: "NaN%" is not a percentage`,
		},
		{
			name: "negative percentage",
			kc:   withHard(map[string]string{"nodefs.available": "-5%"}),
			err:  `evictionHard[nodefs.available]: "-5%" must be >= 0%`,
		},
		{
			name: "percentage over 100",
			kc:   withHard(map[string]string{"nodefs.available": "100.5%"}),
			err:  `evictionHard[nodefs.available]: "100.5%" must be <= 100%`,
		},
		{
			name: "unknown signal",
			kc:   withHard(map[string]string{"memory.free": "1Gi"}),
			err:  `evictionHard[memory.free]: unsupported eviction signal "memory.free"`,
		},
		{
			name: "a key that does not print plainly is quoted",
			kc:   withHard(map[string]string{"memory.available\n": "1Gi"}),
			err:  `evictionHard["memory.available\n"]: unsupported eviction signal "memory.available\n"`,
		},
		{
			name: "soft threshold error names evictionSoft",
			kc:   &kubeletconfigv1beta1.KubeletConfiguration{EvictionSoft: map[string]string{"memory.available": "x"}},
			err:  `evictionSoft[memory.available]: "x" is neither a quantity nor a percentage`,
		},
		{
			name: "soft without grace period",
			kc: &kubeletconfigv1beta1.KubeletConfiguration{
				EvictionSoft:            map[string]string{"memory.available": "1Gi", "nodefs.available": "15%"},
				EvictionSoftGracePeriod: map[string]string{"nodefs.available": "1m"},
			},
			err: `evictionSoftGracePeriod[memory.available]: missing: the soft eviction threshold evictionSoft[memory.available] needs a grace period`,
		},
		{
			name: "grace period not a duration",
			kc: &kubeletconfigv1beta1.KubeletConfiguration{
				EvictionSoftGracePeriod: map[string]string{"memory.available": "soon"},
			},
			err: `evictionSoftGracePeriod[memory.available]: "soon" is not a duration such as 1m30s`,
		},
		{
			name: "negative grace period",
			kc: &kubeletconfigv1beta1.KubeletConfiguration{
				EvictionSoftGracePeriod: map[string]string{"memory.available": "-1s"},
			},
			err: `evictionSoftGracePeriod[memory.available]: "-1s" must not be negative`,
		},
		{
			name: "grace period for an unknown signal",
			kc: &kubeletconfigv1beta1.KubeletConfiguration{
				EvictionSoftGracePeriod: map[string]string{"disk.available": "1s"},
			},
			err: `evictionSoftGracePeriod[disk.available]: unsupported eviction signal "disk.available"`,
		},
		{
			name: "zero percentage minimum reclaim",
			kc: &kubeletconfigv1beta1.KubeletConfiguration{
				EvictionMinimumReclaim: map[string]string{"nodefs.available": "0%"},
			},
			err: `evictionMinimumReclaim[nodefs.available]: "0%" must be a positive percentage`,
		},
		{
			name: "negative minimum reclaim",
			kc: &kubeletconfigv1beta1.KubeletConfiguration{
				EvictionMinimumReclaim: map[string]string{"nodefs.available": "-1Gi"},
			},
			err: `evictionMinimumReclaim[nodefs.available]: "-1Gi" must not be negative`,
		},
		{
			name: "minimum reclaim not a quantity",
			kc: &kubeletconfigv1beta1.KubeletConfiguration{
				EvictionMinimumReclaim: map[string]string{"nodefs.available": "lots"},
			},
			err: `evictionMinimumReclaim[nodefs.available]: "lots" is neither a quantity nor a percentage`,
		},
		{
			name: "negative max pod grace period",
			kc:   &kubeletconfigv1beta1.KubeletConfiguration{EvictionMaxPodGracePeriod: -1},
			err:  `evictionMaxPodGracePeriod: -1 must not be negative`,
		},
		{
			name: "negative transition period",
			kc:   &kubeletconfigv1beta1.KubeletConfiguration{EvictionPressureTransitionPeriod: metav1.Duration{Duration: -time.Second}},
			err:  `evictionPressureTransitionPeriod: -1s must not be negative`,
		},
		{
			name: "the first bad key in order is reported",
			kc:   withHard(map[string]string{"pid.available": "x", "memory.available": "y"}),
			err:  `evictionHard[memory.available]: "y" is neither a quantity nor a percentage`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Parse(tc.kc)
			if tc.err != "" {
				if err == nil || err.Error() != tc.err {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := summaries(cfg.Thresholds)
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("thresholds:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

func TestParseSettings(t *testing.T) {
	cfg, err := Parse(&kubeletconfigv1beta1.KubeletConfiguration{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.TransitionPeriod != 5*time.Minute || cfg.MonitoringPeriod != 10*time.Second || cfg.MaxPodGracePeriod != 0 || !cfg.LocalStorageCapacityIsolation {
		t.Errorf("defaults: %+v", cfg)
	}
	off := false
	cfg, err = Parse(&kubeletconfigv1beta1.KubeletConfiguration{
		EvictionPressureTransitionPeriod: metav1.Duration{Duration: 30 * time.Second},
		EvictionMaxPodGracePeriod:        45,
		LocalStorageCapacityIsolation:    &off,
	})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.TransitionPeriod != 30*time.Second || cfg.MaxPodGracePeriod != 45 || cfg.LocalStorageCapacityIsolation {
		t.Errorf("settings: %+v", cfg)
	}
	if _, err := Parse(nil); err == nil {
		t.Error("Parse(nil) gave no error")
	}
}

func TestParseRawAndValue(t *testing.T) {
	cfg, err := Parse(&kubeletconfigv1beta1.KubeletConfiguration{
		EvictionHard:           map[string]string{"memory.available": "100Mi", "nodefs.available": "10%"},
		EvictionMinimumReclaim: map[string]string{"nodefs.available": "500Mi"},
	})
	if err != nil {
		t.Fatal(err)
	}
	mem, fs := cfg.Thresholds[0], cfg.Thresholds[1]
	if mem.Raw != "100Mi" || mem.Value.Quantity == nil || mem.Value.Quantity.Value() != 100<<20 {
		t.Errorf("memory threshold: %+v", mem)
	}
	if fs.Raw != "10%" || fs.Value.Quantity != nil || fs.Value.Percentage != 0.1 {
		t.Errorf("nodefs threshold: %+v", fs)
	}
	if fs.MinReclaim == nil || fs.MinReclaim.String() != "500Mi" {
		t.Errorf("nodefs minimum reclaim: %+v", fs.MinReclaim)
	}
	// The kubelet's arithmetic: the 32-bit 0.1 is a little over a tenth.
	if got := fs.Resolve(q("100Gi")); got.Value() != 10737418400 {
		t.Errorf("10%% of 100Gi = %v", got.String())
	}
	if got := mem.Resolve(q("1Ti")); got.String() != "100Mi" {
		t.Errorf("100Mi resolved = %v", got.String())
	}
	if got := (Value{Percentage: 0.25}).String(); got != "25%" {
		t.Errorf("a percentage without Raw prints as %q", got)
	}
}

func TestForLayout(t *testing.T) {
	cfg, err := Parse(&kubeletconfigv1beta1.KubeletConfiguration{
		EvictionHard:            map[string]string{"nodefs.available": "10%", "nodefs.inodesFree": "5%", "imagefs.available": "15%", "containerfs.available": "1Gi"},
		EvictionSoft:            map[string]string{"imagefs.available": "20%"},
		EvictionSoftGracePeriod: map[string]string{"imagefs.available": "1m"},
		EvictionMinimumReclaim:  map[string]string{"imagefs.available": "2Gi"},
	})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		layout FsLayout
		want   []string
	}{
		{
			name:   "one filesystem: containerfs is nodefs",
			layout: FsLayout{},
			want: []string{
				"hard/containerfs.available<-nodefs.available=10%(0.1)",
				"hard/containerfs.inodesFree<-nodefs.inodesFree=5%(0.05)",
				"hard/imagefs.available=15%(0.15) min 2Gi",
				"hard/nodefs.available=10%(0.1)",
				"hard/nodefs.inodesFree=5%(0.05)",
				"soft/imagefs.available=20%(0.2) grace 1m0s min 2Gi",
			},
		},
		{
			name:   "dedicated image filesystem: containerfs is imagefs",
			layout: FsLayout{DedicatedImageFs: true},
			want: []string{
				"hard/containerfs.available<-imagefs.available=15%(0.15) min 2Gi",
				"hard/imagefs.available=15%(0.15) min 2Gi",
				"hard/nodefs.available=10%(0.1)",
				"hard/nodefs.inodesFree=5%(0.05)",
				"soft/containerfs.available<-imagefs.available=20%(0.2) grace 1m0s min 2Gi",
				"soft/imagefs.available=20%(0.2) grace 1m0s min 2Gi",
			},
		},
		{
			name:   "writable layers split from images: containerfs is nodefs",
			layout: FsLayout{DedicatedImageFs: true, SplitContainerFs: true},
			want: []string{
				"hard/containerfs.available<-nodefs.available=10%(0.1)",
				"hard/containerfs.inodesFree<-nodefs.inodesFree=5%(0.05)",
				"hard/imagefs.available=15%(0.15) min 2Gi",
				"hard/nodefs.available=10%(0.1)",
				"hard/nodefs.inodesFree=5%(0.05)",
				"soft/imagefs.available=20%(0.2) grace 1m0s min 2Gi",
			},
		},
		{
			name:   "split without a dedicated image filesystem keeps the configuration",
			layout: FsLayout{SplitContainerFs: true},
			want: []string{
				"hard/containerfs.available=1Gi",
				"hard/imagefs.available=15%(0.15) min 2Gi",
				"hard/nodefs.available=10%(0.1)",
				"hard/nodefs.inodesFree=5%(0.05)",
				"soft/imagefs.available=20%(0.2) grace 1m0s min 2Gi",
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := cfg.ForLayout(tc.layout)
			if s := strings.Join(summaries(got.Thresholds), "\n"); s != strings.Join(tc.want, "\n") {
				t.Errorf("thresholds:\n%s\nwant:\n%s", s, strings.Join(tc.want, "\n"))
			}
			again := got.ForLayout(tc.layout)
			if s := strings.Join(summaries(again.Thresholds), "\n"); s != strings.Join(tc.want, "\n") {
				t.Errorf("ForLayout twice:\n%s", s)
			}
		})
	}
	if len(cfg.Thresholds) != 5 {
		t.Errorf("ForLayout changed its receiver's thresholds: %v", summaries(cfg.Thresholds))
	}
}
