package policy

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
)

// decodeMap reads a fuzz input map written "key=value,key=value"; an empty string is no
// map at all.
func decodeMap(s string) map[string]string {
	if s == "" {
		return nil
	}
	m := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return m
}

// errorFields are the fields a Parse error may start with.
var errorFields = []string{
	"evictionHard[", "evictionSoft[", "evictionSoftGracePeriod[", "evictionMinimumReclaim[",
	"evictionMaxPodGracePeriod: ", "evictionPressureTransitionPeriod: ",
}

// FuzzParse feeds Parse arbitrary eviction settings: it must never panic, its errors
// must be one line naming a field, and what it accepts must be a configuration that the
// rest of the package can use without panicking.
func FuzzParse(f *testing.F) {
	f.Add("memory.available=100Mi,nodefs.available=10%,nodefs.inodesFree=5%,imagefs.available=15%,imagefs.inodesFree=5%", "", "", "", int32(0), int64(0), true)
	f.Add("memory.available=100Mi", "memory.available=1Gi,nodefs.available=20%", "memory.available=1m30s,nodefs.available=2m", "memory.available=200Mi,nodefs.available=5%", int32(30), int64(time.Minute), true)
	f.Add("memory.available=0%,nodefs.available=100%", "pid.available=0%", "", "", int32(0), int64(0), false)
	f.Add("memory.available=abc", "", "", "", int32(0), int64(0), false)
	f.Add("memory.available=-5%", "", "", "", int32(0), int64(0), false)
	f.Add("memory.available=NaN%", "", "", "", int32(0), int64(0), false)
	f.Add("memory.available=1e400", "", "", "", int32(0), int64(0), false)
	f.Add("pid.available=10%%", "", "", "pid.available=0", int32(0), int64(0), false)
	f.Add("", "memory.available=1Gi", "", "", int32(0), int64(0), false)
	f.Add("", "", "memory.available=-1s", "", int32(0), int64(0), false)
	f.Add("", "", "", "nodefs.available=0%", int32(0), int64(0), false)
	f.Add("allocatableMemory.available=500Mi,memory.available=100Mi", "", "", "allocatableMemory.available=1Gi", int32(-1), int64(-1), true)
	f.Add("containerfs.available=1Gi,containerfs.inodesFree=1k", "imagefs.available=30%", "imagefs.available=0s", "containerfs.available=1%", int32(60), int64(time.Hour), false)
	f.Add("bogus=1", "", "", "", int32(0), int64(0), false)
	f.Add("memory.available=9223372036854775807,nodefs.available=0.0000001%", "", "", "memory.available=9223372036854775807", int32(0), int64(0), false)
	f.Fuzz(func(t *testing.T, hard, soft, grace, minReclaim string, maxPodGrace int32, transition int64, pods bool) {
		kc := &kubeletconfigv1beta1.KubeletConfiguration{
			EvictionHard:                     decodeMap(hard),
			EvictionSoft:                     decodeMap(soft),
			EvictionSoftGracePeriod:          decodeMap(grace),
			EvictionMinimumReclaim:           decodeMap(minReclaim),
			EvictionMaxPodGracePeriod:        maxPodGrace,
			EvictionPressureTransitionPeriod: metav1.Duration{Duration: time.Duration(transition)},
		}
		if pods {
			kc.EnforceNodeAllocatable = []string{"pods"}
		}
		cfg, err := Parse(kc)
		if err != nil {
			msg := err.Error()
			if strings.ContainsAny(msg, "\r\n") {
				t.Fatalf("error on several lines: %q", msg)
			}
			if !slices.ContainsFunc(errorFields, func(p string) bool { return strings.HasPrefix(msg, p) }) {
				t.Fatalf("error names no field: %q", msg)
			}
			return
		}
		checkConfig(t, kc, cfg)
		for _, layout := range []FsLayout{{}, {DedicatedImageFs: true}, {DedicatedImageFs: true, SplitContainerFs: true}, {SplitContainerFs: true}} {
			exercise(t, cfg.ForLayout(layout))
		}
	})
}

// checkConfig fails when cfg is not what Parse promises for kc.
func checkConfig(t *testing.T, kc *kubeletconfigv1beta1.KubeletConfiguration, cfg Config) {
	t.Helper()
	if cfg.TransitionPeriod <= 0 || cfg.MaxPodGracePeriod < 0 || cfg.MonitoringPeriod != MonitoringPeriod {
		t.Fatalf("settings %+v", cfg)
	}
	seen := map[string]bool{}
	for i, th := range cfg.Thresholds {
		k := ThresholdKey(th)
		if seen[k] {
			t.Fatalf("two thresholds %s", k)
		}
		seen[k] = true
		if !th.Signal.Valid() {
			t.Fatalf("threshold on signal %q", th.Signal)
		}
		if i > 0 && cfg.Thresholds[i-1].Soft && !th.Soft {
			t.Fatalf("a hard threshold after a soft one: %s", k)
		}
		if v := th.Value; v.Quantity != nil {
			if v.Quantity.Sign() <= 0 {
				t.Fatalf("%s: quantity %v", k, v.Quantity)
			}
		} else if !(v.Percentage >= 0 && v.Percentage <= 1) {
			t.Fatalf("%s: percentage %v", k, v.Percentage)
		}
		if th.Soft {
			if g, err := time.ParseDuration(kc.EvictionSoftGracePeriod[string(th.Signal)]); err != nil || g != th.GracePeriod {
				t.Fatalf("%s: grace period %v", k, th.GracePeriod)
			}
		} else if th.GracePeriod != 0 {
			t.Fatalf("%s: a hard threshold with a grace period", k)
		}
		if mr := th.MinReclaim; mr != nil && (mr.Quantity == nil && mr.Percentage <= 0 || mr.Quantity != nil && mr.Quantity.Sign() < 0) {
			t.Fatalf("%s: minimum reclaim %+v", k, mr)
		}
	}
}

// exercise runs cfg through Evaluate, across a restart, and through the reclaim checks,
// on signals at the edges of what can be observed.
func exercise(t *testing.T, cfg Config) {
	t.Helper()
	obs := func(avail int64) Observations {
		o := Observations{}
		for _, s := range Signals {
			o[s] = Observation{Available: *resource.NewQuantity(avail, resource.BinarySI), Capacity: *resource.NewQuantity(1<<62, resource.BinarySI), Time: t0}
		}
		return o
	}
	var st State
	for i, avail := range []int64{0, 1 << 40, -1, 1<<62 + 1} {
		now := t0.Add(time.Duration(i) * time.Hour)
		r := Evaluate(cfg, obs(avail), &st, now)
		if len(r.Met) > len(r.Crossed)+len(cfg.Thresholds) || len(r.Actionable) > len(r.Met) {
			t.Fatalf("result %+v", r)
		}
		b, err := json.Marshal(&st)
		if err != nil {
			t.Fatal(err)
		}
		st = State{}
		if err := json.Unmarshal(b, &st); err != nil {
			t.Fatal(err)
		}
		ReclaimedAll(cfg, obs(avail))
	}
	for _, th := range cfg.Thresholds {
		th.Resolve(*resource.NewQuantity(1<<62, resource.BinarySI))
		_ = th.Value.String()
		if th.MinReclaim != nil {
			_ = th.MinReclaim.String()
		}
	}
}
