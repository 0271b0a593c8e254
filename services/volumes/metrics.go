package volumes

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are unitlet-volumes's own; the kubelet has no metric for this work by name.
type metrics struct {
	prepares        *prometheus.CounterVec
	prepareDuration prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer, m *Manager) *metrics {
	mt := &metrics{
		prepares: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "unitlet_volumes_prepares_total",
			Help: "PrepareVolumes calls by result (ok, failed: a volume cannot be made ready, error).",
		}, []string{"result"}),
		prepareDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "unitlet_volumes_prepare_duration_seconds",
			Help:    "How long PrepareVolumes took for a pod.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}),
	}
	reg.MustRegister(mt.prepares, mt.prepareDuration, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "unitlet_volumes_prepared",
		Help: "Volumes prepared for pods on this node.",
	}, func() float64 { return float64(len(m.List())) }))
	return mt
}
