package prober

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the kubelet's prober metrics, under the kubelet's names and labels.
type metrics struct {
	total    *prometheus.CounterVec   // prober_probe_total
	duration *prometheus.HistogramVec // prober_probe_duration_seconds
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: "prober",
			Name:      "probe_total",
			Help:      "Cumulative number of a liveness, readiness or startup probe for a container by result.",
		}, []string{"probe_type", "result", "container", "pod", "namespace", "pod_uid"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: "prober",
			Name:      "probe_duration_seconds",
			Help:      "Duration in seconds for a probe response.",
			Buckets:   prometheus.DefBuckets,
		}, []string{"probe_type", "container", "pod", "namespace"}),
	}
	if reg == nil {
		return m, nil
	}
	var err error
	m.total, err = register(reg, m.total)
	if err != nil {
		return m, err
	}
	m.duration, err = register(reg, m.duration)
	return m, err
}

// register registers c, or returns the collector already registered under its name
// (a second Manager on one registry shares the series).
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	if err == nil {
		return c, nil
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, err
}
