package podstatus

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Results of a status write, the label of unitlet_status_pod_status_writes_total.
const (
	resultSuccess  = "success"
	resultConflict = "conflict"
	resultNotFound = "not_found"
	resultError    = "error"
)

type metrics struct {
	writes    *prometheus.CounterVec
	pending   prometheus.Gauge
	deletions prometheus.Counter
	// syncDuration is the kubelet's: from a change of a pod's status until the API has it.
	syncDuration prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	return &metrics{
		writes: f.NewCounterVec(prometheus.CounterOpts{
			Name: "unitlet_status_pod_status_writes_total",
			Help: "Pod status writes to the API server, by result (success, conflict, not_found, error).",
		}, []string{"result"}),
		pending: f.NewGauge(prometheus.GaugeOpts{
			Name: "unitlet_status_pod_status_pending",
			Help: "Pods whose newest status is not yet confirmed in the API server.",
		}),
		deletions: f.NewCounter(prometheus.CounterOpts{
			Name: "unitlet_status_pod_deletions_total",
			Help: "Terminated pods deleted from the API server (grace period 0).",
		}),
		syncDuration: f.NewHistogram(prometheus.HistogramOpts{
			Name:    "kubelet_pod_status_sync_duration_seconds",
			Help:    "Duration in seconds from a change of a pod's status until the API server has it.",
			Buckets: []float64{0.010, 0.050, 0.100, 0.500, 1, 5, 10, 20, 30, 45, 60},
		}),
	}
}
