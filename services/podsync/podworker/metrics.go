package podworker

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	workers        prometheus.Gauge
	workerDuration *prometheus.HistogramVec
	startPhase     *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		workers: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "unitlet_podsync_pod_workers",
			Help: "Pods with a worker: desired pods and pods still being stopped.",
		}),
		workerDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "kubelet_pod_worker_duration_seconds",
			Help:    "Duration in seconds to sync a single pod. Broken down by operation type: create, update, or sync",
			Buckets: prometheus.DefBuckets,
		}, []string{"operation_type"}),
		startPhase: newStartPhaseMetric(),
	}
	if reg != nil {
		reg.MustRegister(m.workers, m.workerDuration, m.startPhase)
	}
	return m
}
