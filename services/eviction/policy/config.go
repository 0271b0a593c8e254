package policy

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
)

// Kubelet defaults that apply when the configuration leaves a setting unset.
const (
	// DefaultTransitionPeriod is evictionPressureTransitionPeriod's default: how long a
	// pressure condition stays true after its threshold was last crossed.
	DefaultTransitionPeriod = 5 * time.Minute
	// MonitoringPeriod is how often the kubelet evaluates the eviction thresholds (its
	// housekeeping period).
	MonitoringPeriod = 10 * time.Second
	// ImmediateGracePeriodSeconds is the grace period the kubelet gives a pod it evicts for
	// a hard threshold or for going over a local storage limit.
	ImmediateGracePeriodSeconds int64 = 1
)

// nodeAllocatablePods is the enforceNodeAllocatable entry that makes the kubelet copy the
// hard memory.available threshold onto allocatableMemory.available.
const nodeAllocatablePods = "pods"

// Value is a threshold's or a minimum reclaim's value: a quantity, or a fraction of the
// signal's capacity. When Quantity is nil the value is Percentage (0.1 for "10%").
type Value struct {
	Quantity   *resource.Quantity
	Percentage float32
	// Raw is the value as configured ("100Mi", "10%").
	Raw string
}

// Resolve is the value in the signal's units for a signal of the given capacity: the
// quantity itself, or the percentage of the capacity rounded toward zero, as the kubelet
// computes it (in bytes for memory and disk, a count for inodes and PIDs).
func (v Value) Resolve(capacity resource.Quantity) resource.Quantity {
	if v.Quantity != nil {
		return v.Quantity.DeepCopy()
	}
	return *resource.NewQuantity(int64(float64(capacity.Value())*float64(v.Percentage)), resource.BinarySI)
}

// String is the value as configured, or a canonical form when Raw is empty.
func (v Value) String() string {
	switch {
	case v.Raw != "":
		return v.Raw
	case v.Quantity != nil:
		return v.Quantity.String()
	default:
		return strconv.FormatFloat(float64(v.Percentage)*100, 'g', -1, 32) + "%"
	}
}

// Threshold is one eviction threshold: evict when the signal's available amount is below
// Value.
type Threshold struct {
	Signal Signal
	// Soft is true for an evictionSoft threshold, false for evictionHard.
	Soft  bool
	Value Value
	// GracePeriod is how long a soft threshold must stay crossed before it is met
	// (evictionSoftGracePeriod); zero for a hard one.
	GracePeriod time.Duration
	// MinReclaim is evictionMinimumReclaim for the signal, nil when none: once met, the
	// threshold stays met until the signal is back above Value plus MinReclaim.
	MinReclaim *Value
	// Raw is the value as configured, e.g. "100Mi" or "10%".
	Raw string
	// DerivedFrom is set on a threshold the kubelet makes from another signal's rather
	// than reads from the configuration: allocatableMemory.available from the hard
	// memory.available threshold (enforceNodeAllocatable holds "pods"), and containerfs
	// thresholds from nodefs or imagefs ones (Config.ForLayout).
	DerivedFrom Signal
}

// Resolve is the threshold in the signal's units for a signal of the given capacity
// (a percentage threshold is that share of the capacity).
func (t Threshold) Resolve(capacity resource.Quantity) resource.Quantity {
	return t.Value.Resolve(capacity)
}

// hard tells whether the kubelet treats t as a hard threshold: it goes by the grace
// period, so a soft threshold with a zero grace period acts as a hard one.
func (t Threshold) hard() bool {
	return !t.Soft || t.GracePeriod == 0
}

// kind is "soft" or "hard".
func (t Threshold) kind() string {
	if t.Soft {
		return "soft"
	}
	return "hard"
}

// ThresholdKey names t in State: its kind and signal ("soft/memory.available"), followed
// for a derived threshold by the signal it was derived from
// ("hard/allocatableMemory.available<-memory.available"), since a configured threshold on
// the same signal may exist beside it.
func ThresholdKey(t Threshold) string {
	k := t.kind() + "/" + string(t.Signal)
	if t.DerivedFrom != "" {
		k += "<-" + string(t.DerivedFrom)
	}
	return k
}

// Config is the eviction configuration, parsed from a KubeletConfiguration.
type Config struct {
	// Thresholds are the hard thresholds, then the soft ones, each sorted by signal.
	Thresholds []Threshold
	// MaxPodGracePeriod is evictionMaxPodGracePeriod in seconds: the most a pod evicted
	// for a soft threshold is given. The kubelet uses it as it is, zero included (see
	// GracePeriod).
	MaxPodGracePeriod int64
	// TransitionPeriod is evictionPressureTransitionPeriod: how long a pressure condition
	// stays true after its threshold was last crossed. DefaultTransitionPeriod when unset.
	TransitionPeriod time.Duration
	// MonitoringPeriod is how often to evaluate: the kubelet's housekeeping period.
	MonitoringPeriod time.Duration
	// LocalStorageCapacityIsolation is localStorageCapacityIsolation (true when unset): the
	// kubelet evicts pods over their ephemeral storage limits (LocalStorageViolations)
	// only when it is on.
	LocalStorageCapacityIsolation bool
}

// Parse reads the eviction settings of kc: evictionHard, evictionSoft,
// evictionSoftGracePeriod, evictionMinimumReclaim, evictionMaxPodGracePeriod,
// evictionPressureTransitionPeriod, enforceNodeAllocatable and
// localStorageCapacityIsolation, as the kubelet does. kc should be defaulted already
// (evictionHard's defaults in particular); Parse applies no defaults but the kubelet's
// for the transition period and local storage isolation.
//
// A threshold of exactly "0%" or "100%" is ignored, as the kubelet ignores it (it would
// never or always be crossed). With "pods" in enforceNodeAllocatable the hard
// memory.available threshold is copied onto allocatableMemory.available. Every soft
// threshold needs a grace period. The error names the field and key, e.g.
// `evictionHard[memory.available]: "abc" is neither a quantity nor a percentage`.
func Parse(kc *kubeletconfigv1beta1.KubeletConfiguration) (Config, error) {
	if kc == nil {
		return Config{}, fmt.Errorf("no kubelet configuration")
	}
	cfg := Config{
		MaxPodGracePeriod:             int64(kc.EvictionMaxPodGracePeriod),
		TransitionPeriod:              kc.EvictionPressureTransitionPeriod.Duration,
		MonitoringPeriod:              MonitoringPeriod,
		LocalStorageCapacityIsolation: kc.LocalStorageCapacityIsolation == nil || *kc.LocalStorageCapacityIsolation,
	}
	if cfg.MaxPodGracePeriod < 0 {
		return Config{}, fmt.Errorf("evictionMaxPodGracePeriod: %d must not be negative", cfg.MaxPodGracePeriod)
	}
	switch {
	case cfg.TransitionPeriod < 0:
		return Config{}, fmt.Errorf("evictionPressureTransitionPeriod: %v must not be negative", cfg.TransitionPeriod)
	case cfg.TransitionPeriod == 0:
		cfg.TransitionPeriod = DefaultTransitionPeriod
	}

	hard, err := parseThresholds("evictionHard", kc.EvictionHard, false)
	if err != nil {
		return Config{}, err
	}
	soft, err := parseThresholds("evictionSoft", kc.EvictionSoft, true)
	if err != nil {
		return Config{}, err
	}
	grace, err := parseGracePeriods(kc.EvictionSoftGracePeriod)
	if err != nil {
		return Config{}, err
	}
	minReclaim, err := parseMinReclaims(kc.EvictionMinimumReclaim)
	if err != nil {
		return Config{}, err
	}
	for i := range soft {
		g, ok := grace[soft[i].Signal]
		if !ok {
			return Config{}, fmt.Errorf("evictionSoftGracePeriod[%s]: missing: the soft eviction threshold evictionSoft[%s] needs a grace period", soft[i].Signal, soft[i].Signal)
		}
		soft[i].GracePeriod = g
	}
	all := slices.Concat(hard, soft)
	for i := range all {
		if v, ok := minReclaim[all[i].Signal]; ok {
			all[i].MinReclaim = &v
		}
	}
	if slices.Contains(kc.EnforceNodeAllocatable, nodeAllocatablePods) {
		for _, t := range all {
			if !t.Soft && t.Signal == SignalMemoryAvailable {
				all = append(all, Threshold{
					Signal:      SignalAllocatableMemoryAvailable,
					Value:       t.Value,
					MinReclaim:  t.MinReclaim,
					Raw:         t.Raw,
					DerivedFrom: SignalMemoryAvailable,
				})
			}
		}
	}
	sortThresholds(all)
	cfg.Thresholds = all
	return cfg, nil
}

// sortThresholds orders hard before soft, then by signal, a configured threshold before
// a derived one.
func sortThresholds(ts []Threshold) {
	slices.SortStableFunc(ts, func(a, b Threshold) int {
		if a.Soft != b.Soft {
			if a.Soft {
				return 1
			}
			return -1
		}
		if c := cmp.Compare(a.Signal, b.Signal); c != 0 {
			return c
		}
		return cmp.Compare(a.DerivedFrom, b.DerivedFrom)
	})
}

// sortedKeys is m's keys in order, so that errors do not depend on map order.
func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// parseSignal checks that name is a known signal.
func parseSignal(field, name string) (Signal, error) {
	s := Signal(name)
	if !s.Valid() {
		return "", fmt.Errorf("%s: unsupported eviction signal %q", fieldKey(field, name), name)
	}
	return s, nil
}

// fieldKey names a key of a map field, as field[key], quoting a key that would not print
// plainly on one line.
func fieldKey(field, key string) string {
	if q := strconv.Quote(key); q[1:len(q)-1] != key || key == "" || strings.ContainsAny(key, "[]") {
		return field + "[" + q + "]"
	}
	return field + "[" + key + "]"
}

// parsePercentage reads "10%" as 0.1, as the kubelet does (every trailing % dropped, a
// 32-bit float), refusing what is not a finite number.
func parsePercentage(field string, s Signal, raw string) (float32, error) {
	f, err := strconv.ParseFloat(strings.TrimRight(raw, "%"), 32)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("%s[%s]: %q is not a percentage", field, s, raw)
	}
	return float32(f) / 100, nil
}

// parseThresholds reads evictionHard or evictionSoft.
func parseThresholds(field string, m map[string]string, soft bool) ([]Threshold, error) {
	var out []Threshold
	for _, name := range sortedKeys(m) {
		s, err := parseSignal(field, name)
		if err != nil {
			return nil, err
		}
		raw := m[name]
		t := Threshold{Signal: s, Soft: soft, Raw: raw}
		if strings.HasSuffix(raw, "%") {
			if raw == "0%" || raw == "100%" {
				continue
			}
			p, err := parsePercentage(field, s, raw)
			if err != nil {
				return nil, err
			}
			if p < 0 {
				return nil, fmt.Errorf("%s[%s]: %q must be >= 0%%", field, s, raw)
			}
			if p > 1 {
				return nil, fmt.Errorf("%s[%s]: %q must be <= 100%%", field, s, raw)
			}
			t.Value = Value{Percentage: p, Raw: raw}
		} else {
			q, err := resource.ParseQuantity(raw)
			if err != nil {
				return nil, fmt.Errorf("%s[%s]: %q is neither a quantity nor a percentage", field, s, raw)
			}
			if q.Sign() <= 0 {
				return nil, fmt.Errorf("%s[%s]: %q must be positive", field, s, raw)
			}
			t.Value = Value{Quantity: &q, Raw: raw}
		}
		out = append(out, t)
	}
	return out, nil
}

// parseGracePeriods reads evictionSoftGracePeriod.
func parseGracePeriods(m map[string]string) (map[Signal]time.Duration, error) {
	const field = "evictionSoftGracePeriod"
	out := map[Signal]time.Duration{}
	for _, name := range sortedKeys(m) {
		s, err := parseSignal(field, name)
		if err != nil {
			return nil, err
		}
		d, err := time.ParseDuration(m[name])
		if err != nil {
			return nil, fmt.Errorf("%s[%s]: %q is not a duration such as 1m30s", field, s, m[name])
		}
		if d < 0 {
			return nil, fmt.Errorf("%s[%s]: %q must not be negative", field, s, m[name])
		}
		out[s] = d
	}
	return out, nil
}

// parseMinReclaims reads evictionMinimumReclaim.
func parseMinReclaims(m map[string]string) (map[Signal]Value, error) {
	const field = "evictionMinimumReclaim"
	out := map[Signal]Value{}
	for _, name := range sortedKeys(m) {
		s, err := parseSignal(field, name)
		if err != nil {
			return nil, err
		}
		raw := m[name]
		if strings.HasSuffix(raw, "%") {
			p, err := parsePercentage(field, s, raw)
			if err != nil {
				return nil, err
			}
			if p <= 0 {
				return nil, fmt.Errorf("%s[%s]: %q must be a positive percentage", field, s, raw)
			}
			out[s] = Value{Percentage: p, Raw: raw}
			continue
		}
		q, err := resource.ParseQuantity(raw)
		if err != nil {
			return nil, fmt.Errorf("%s[%s]: %q is neither a quantity nor a percentage", field, s, raw)
		}
		if q.Sign() < 0 {
			return nil, fmt.Errorf("%s[%s]: %q must not be negative", field, s, raw)
		}
		out[s] = Value{Quantity: &q, Raw: raw}
	}
	return out, nil
}

// ForLayout is c with its containerfs thresholds made to match the filesystem layout, as
// the kubelet does once it knows the layout: containerfs stands for nodefs on one
// filesystem or when the writable layers are split from the images, and for imagefs when
// the runtime has one filesystem for both. The containerfs thresholds are then copies of
// that filesystem's (value, grace period and minimum reclaim), replacing any configured
// ones; when that filesystem has no threshold of a kind, containerfs has none either.
// With a split layout but no dedicated image filesystem (which the kubelet never sees)
// the configured containerfs thresholds are kept. Call it before Evaluate, when the
// layout is known.
func (c Config) ForLayout(layout FsLayout) Config {
	var from map[Signal]Signal
	switch {
	case layout.DedicatedImageFs && !layout.SplitContainerFs:
		from = map[Signal]Signal{SignalContainerFsAvailable: SignalImageFsAvailable, SignalContainerFsInodesFree: SignalImageFsInodesFree}
	case layout.DedicatedImageFs == layout.SplitContainerFs:
		from = map[Signal]Signal{SignalContainerFsAvailable: SignalNodeFsAvailable, SignalContainerFsInodesFree: SignalNodeFsInodesFree}
	default:
		return c
	}
	var out []Threshold
	for _, t := range c.Thresholds {
		if _, derived := from[t.Signal]; !derived {
			out = append(out, t)
		}
	}
	for _, t := range c.Thresholds {
		for to, src := range from {
			if t.Signal == src && t.DerivedFrom == "" {
				t.Signal, t.DerivedFrom = to, src
				out = append(out, t)
			}
		}
	}
	sortThresholds(out)
	c.Thresholds = out
	return c
}
