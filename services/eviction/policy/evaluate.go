package policy

import (
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Observation is one signal as observed: what is available of what capacity, and when
// it was measured. Build byte quantities with resource.BinarySI and counts (inodes, PIDs)
// with resource.DecimalSI, as the kubelet does, so that messages print them as it does.
// A zero Time means the measurement time is unknown.
type Observation struct {
	Available, Capacity resource.Quantity
	Time                time.Time
}

// Observations are the signals observed in one round. A signal that could not be
// observed is left out.
type Observations map[Signal]Observation

// crossed tells whether obs is below t, or with minReclaim below t plus its minimum
// reclaim: the kubelet's test, threshold > available.
func crossed(t Threshold, obs Observation, minReclaim bool) bool {
	q := t.Resolve(obs.Capacity)
	if minReclaim && t.MinReclaim != nil {
		q.Add(t.MinReclaim.Resolve(obs.Capacity))
	}
	return q.Cmp(obs.Available) > 0
}

// State is what Evaluate carries from one round to the next, and what must survive a
// restart: the caller checkpoints it as JSON. The zero State is the state of a node
// never evaluated.
type State struct {
	// FirstCrossed is when each soft threshold (by ThresholdKey) was first seen crossed
	// in the current run of crossings; its grace period counts from there. An entry goes
	// when the threshold is no longer crossed (nor held by its minimum reclaim).
	FirstCrossed map[string]time.Time `json:"firstCrossed,omitempty"`
	// ConditionLastObserved is, for each pressure condition, the last time one of its
	// thresholds was crossed (or held by its minimum reclaim).
	ConditionLastObserved map[corev1.NodeConditionType]time.Time `json:"conditionLastObserved,omitempty"`
	// Met are the keys of the thresholds met in the last round: each stays met until its
	// signal recovers past the threshold plus its minimum reclaim.
	Met []string `json:"met,omitempty"`
	// LastObserved is when each signal was measured in the last round, so that a
	// threshold met on a measurement already acted on is not acted on twice.
	LastObserved map[Signal]time.Time `json:"lastObserved,omitempty"`
}

// Result is what Evaluate decided.
type Result struct {
	// Crossed are the thresholds whose signal is below them now, hard or soft, in
	// configuration order.
	Crossed []Threshold
	// Met are the thresholds that drive reclaim and eviction: crossed now, or met in the
	// last round and not yet recovered past their minimum reclaim; a soft one only once it
	// has been so for its whole grace period. They are in the kubelet's eviction priority:
	// memory signals first, then the others in configuration order.
	Met []Threshold
	// Actionable are those of Met whose signal was measured anew since the last round
	// (or at an unknown time), in the same order. The kubelet reclaims and evicts only for
	// these, and for the first of them: Actionable[0] is the threshold to reclaim.
	Actionable []Threshold
	// Conditions holds MemoryPressure, DiskPressure and PIDPressure, each true while one of
	// its thresholds was crossed (or held by its minimum reclaim) within the transition
	// period. A soft threshold raises its condition as soon as it is crossed, before its
	// grace period ends.
	Conditions map[corev1.NodeConditionType]bool
}

// PressureConditions are the pressure conditions in the order Result.ConditionList gives
// them.
var PressureConditions = []corev1.NodeConditionType{corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure}

// ConditionList is the true conditions of r, in the order of PressureConditions: the
// list Admit takes.
func (r Result) ConditionList() []corev1.NodeConditionType {
	var out []corev1.NodeConditionType
	for _, c := range PressureConditions {
		if r.Conditions[c] {
			out = append(out, c)
		}
	}
	return out
}

// Evaluate decides, from the signals observed at now, which thresholds of cfg are
// crossed and met and which pressure conditions hold, as the kubelet's eviction manager
// does in one round, and updates st for the next round (a nil st is taken as the zero
// State and the update lost). A signal missing from obs crosses nothing.
//
// The kubelet's rules: a threshold is crossed when the signal's available amount is below
// it. A threshold met in the last round stays in play until the signal is at least the
// threshold plus its minimum reclaim. A hard threshold in play is met at once; a soft one
// when it has been in play for its grace period, counted from State.FirstCrossed, which a
// restart keeps. Every threshold in play, met or not, marks its condition observed now,
// and a condition is true while it was observed less than cfg.TransitionPeriod ago.
func Evaluate(cfg Config, obs Observations, st *State, now time.Time) Result {
	if st == nil {
		st = &State{}
	}
	prevMet := map[string]bool{}
	for _, k := range st.Met {
		prevMet[k] = true
	}

	var res Result
	var inPlay []Threshold
	seen := map[string]bool{}
	for _, t := range cfg.Thresholds {
		o, ok := obs[t.Signal]
		if !ok || !crossed(t, o, false) {
			continue
		}
		res.Crossed = append(res.Crossed, t)
		if k := ThresholdKey(t); !seen[k] {
			seen[k] = true
			inPlay = append(inPlay, t)
		}
	}
	for _, t := range cfg.Thresholds {
		k := ThresholdKey(t)
		if !prevMet[k] || seen[k] {
			continue
		}
		if o, ok := obs[t.Signal]; ok && crossed(t, o, true) {
			seen[k] = true
			inPlay = append(inPlay, t)
		}
	}

	firstCrossed := map[string]time.Time{}
	lastObserved := map[corev1.NodeConditionType]time.Time{}
	for c, at := range st.ConditionLastObserved {
		lastObserved[c] = at
	}
	var met []Threshold
	for _, t := range inPlay {
		if c := ConditionFor(t.Signal); c != "" {
			lastObserved[c] = now
		}
		if t.hard() {
			met = append(met, t)
			if !t.Soft {
				continue
			}
		}
		k := ThresholdKey(t)
		at, ok := st.FirstCrossed[k]
		if !ok {
			at = now
		}
		firstCrossed[k] = at
		if !t.hard() && now.Sub(at) >= t.GracePeriod {
			met = append(met, t)
		}
	}
	// Memory first, as the kubelet ranks thresholds for reclaim; the rest keep their order.
	slices.SortStableFunc(met, func(a, b Threshold) int {
		switch am, bm := isMemory(a.Signal), isMemory(b.Signal); {
		case am && !bm:
			return -1
		case bm && !am:
			return 1
		}
		return 0
	})
	res.Met = met

	for _, t := range met {
		o := obs[t.Signal]
		last, ok := st.LastObserved[t.Signal]
		if !ok || o.Time.IsZero() || o.Time.After(last) {
			res.Actionable = append(res.Actionable, t)
		}
	}

	res.Conditions = map[corev1.NodeConditionType]bool{}
	for _, c := range PressureConditions {
		at, ok := lastObserved[c]
		res.Conditions[c] = ok && now.Sub(at) < cfg.TransitionPeriod
	}

	st.FirstCrossed = firstCrossed
	st.ConditionLastObserved = lastObserved
	st.Met = nil
	for _, t := range met {
		st.Met = append(st.Met, ThresholdKey(t))
	}
	st.LastObserved = map[Signal]time.Time{}
	for s, o := range obs {
		st.LastObserved[s] = o.Time
	}
	return res
}

// Reclaimed tells, after node-level reclaim, whether the signal is back at or above t
// plus its minimum reclaim, so that t no longer calls for eviction.
func Reclaimed(t Threshold, obs Observation) bool {
	return !crossed(t, obs, true)
}

// ReclaimedAll is the kubelet's test after node-level reclaim: eviction is still needed
// unless every threshold of cfg, hard or soft and whatever its grace period, has its
// signal at or above the threshold plus its minimum reclaim in obs (a signal missing from
// obs counts as recovered). The kubelet makes this test only when NodeReclaim had
// something to free; otherwise it evicts at once.
func ReclaimedAll(cfg Config, obs Observations) bool {
	for _, t := range cfg.Thresholds {
		if o, ok := obs[t.Signal]; ok && !Reclaimed(t, o) {
			return false
		}
	}
	return true
}
