package eviction

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/unitlet/unitlet/services/eviction/observe"
	"github.com/unitlet/unitlet/services/eviction/policy"
)

// metrics are unitlet-eviction's metrics: the kubelet's eviction metrics by their names,
// and a gauge per signal and threshold.
type metrics struct {
	evictions *prometheus.CounterVec
	statsAgeH *prometheus.HistogramVec
	available *prometheus.GaugeVec
	capacity  *prometheus.GaugeVec
	threshold *prometheus.GaugeVec
	reclaims  *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		evictions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kubelet_evictions",
			Help: "Cumulative number of pod evictions by eviction signal.",
		}, []string{"eviction_signal"}),
		statsAgeH: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "kubelet_eviction_stats_age_seconds",
			Help:    "Time between when stats are collected, and when pod is evicted based on those stats by eviction signal.",
			Buckets: prometheus.DefBuckets,
		}, []string{"eviction_signal"}),
		available: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "unitlet_eviction_signal_available",
			Help: "What an eviction signal last measured as available: bytes, inodes or PIDs.",
		}, []string{"signal"}),
		capacity: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "unitlet_eviction_signal_capacity",
			Help: "The capacity an eviction signal was last measured against: bytes, inodes or PIDs.",
		}, []string{"signal"}),
		threshold: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "unitlet_eviction_threshold",
			Help: "An eviction threshold in its signal's units for the last measured capacity, by kind (hard or soft).",
		}, []string{"signal", "kind"}),
		reclaims: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "unitlet_eviction_reclaimed_total",
			Help: "What node-level reclaim removed before evicting for disk pressure: containers, sandboxes, images.",
		}, []string{"what"}),
	}
	reg.MustRegister(m.evictions, m.statsAgeH, m.available, m.capacity, m.threshold, m.reclaims)
	return m
}

func (m *metrics) observed(n observe.Node, cfg policy.Config) {
	if m == nil {
		return
	}
	obs := observations(n)
	for s, o := range obs {
		m.available.WithLabelValues(string(s)).Set(o.Available.AsApproximateFloat64())
		m.capacity.WithLabelValues(string(s)).Set(o.Capacity.AsApproximateFloat64())
	}
	for _, t := range cfg.Thresholds {
		o, ok := obs[t.Signal]
		if !ok {
			continue
		}
		r := t.Resolve(o.Capacity)
		m.threshold.WithLabelValues(string(t.Signal), kind(t)).Set(r.AsApproximateFloat64())
	}
}

func (m *metrics) evicted(signal string) {
	if m != nil {
		m.evictions.WithLabelValues(signal).Inc()
	}
}

func (m *metrics) statsAge(s policy.Signal, age time.Duration) {
	if m != nil {
		m.statsAgeH.WithLabelValues(string(s)).Observe(age.Seconds())
	}
}

func (m *metrics) reclaimed(r Reclaimed) {
	if m == nil {
		return
	}
	m.reclaims.WithLabelValues("containers").Add(float64(r.Containers))
	m.reclaims.WithLabelValues("sandboxes").Add(float64(r.Sandboxes))
	m.reclaims.WithLabelValues("images").Add(float64(r.Images))
}

func kind(t policy.Threshold) string {
	if t.Soft {
		return "soft"
	}
	return "hard"
}
