package podsync

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/procfs"
	"k8s.io/apimachinery/pkg/types"

	"github.com/unitlet/unitlet/services/podsync/podworker"
)

type metrics struct {
	badManifests  *prometheus.CounterVec
	rejected      *prometheus.CounterVec
	runningPods   prometheus.Gauge
	containers    *prometheus.GaugeVec
	startDuration prometheus.Histogram
	startSLI      prometheus.Histogram

	mu      sync.Mutex
	running map[types.UID]int // running containers per pod
	started map[types.UID]bool
}

var podStartBuckets = []float64{0.5, 1, 2, 3, 4, 5, 6, 8, 10, 20, 30, 45, 60, 120, 180, 240, 300, 360, 480, 600, 900, 1200, 1800, 2700, 3600}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		badManifests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "unitlet_podsync_bad_manifests_total",
			Help: "Static pod manifests skipped because they are invalid, by source (file, http).",
		}, []string{"source"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "unitlet_podsync_admission_rejections_total",
			Help: "Pods rejected by admission, by the kubelet's reason.",
		}, []string{"reason"}),
		runningPods: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "kubelet_running_pods",
			Help: "Number of pods that have a running pod sandbox",
		}),
		containers: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kubelet_running_containers",
			Help: "Number of containers currently running",
		}, []string{"container_state"}),
		startDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "kubelet_pod_start_duration_seconds",
			Help:    "Duration in seconds from the node agent seeing a pod for the first time to the pod starting to run",
			Buckets: podStartBuckets,
		}),
		startSLI: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "kubelet_pod_start_sli_duration_seconds",
			Help:    "Duration in seconds to start a pod, excluding time to pull images and run init containers, measured from pod creation timestamp to when all its containers are reported as started and observed via watch",
			Buckets: podStartBuckets,
		}),
		running: map[types.UID]int{},
		started: map[types.UID]bool{},
	}
	if reg != nil {
		reg.MustRegister(m.badManifests, m.rejected, m.runningPods, m.containers, m.startDuration, m.startSLI)
	}
	return m
}

// observe updates the running gauges and, the first time all of a pod's containers run,
// the start durations.
func (m *metrics) observe(ob podworker.Observed) {
	m.mu.Lock()
	defer m.mu.Unlock()
	uid := ob.Pod.UID
	if ob.Removed {
		delete(m.running, uid)
		delete(m.started, uid)
	} else {
		n, all := 0, len(ob.Status.ContainerStatuses) > 0
		for _, cs := range ob.Status.ContainerStatuses {
			if cs.State.Running != nil {
				n++
			} else {
				all = false
			}
		}
		m.running[uid] = n
		if all && !m.started[uid] {
			m.started[uid] = true
			var last time.Time
			for _, cs := range ob.Status.ContainerStatuses {
				if t := cs.State.Running.StartedAt.Time; t.After(last) {
					last = t
				}
			}
			m.startDuration.Observe(last.Sub(ob.FirstSeen).Seconds())
			if created := ob.Pod.CreationTimestamp.Time; !created.IsZero() {
				m.startSLI.Observe(last.Sub(created).Seconds())
			}
		}
	}
	pods, ctrs := 0, 0
	for _, n := range m.running {
		if n > 0 {
			pods++
		}
		ctrs += n
	}
	m.runningPods.Set(float64(pods))
	m.containers.WithLabelValues("running").Set(float64(ctrs))
}

// processStartTime is process_start_time_seconds: when this process started, in seconds
// since the epoch, from /proc.
func processStartTime() prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "process_start_time_seconds",
		Help: "Start time of the process since unix epoch in seconds.",
	}, func() float64 {
		p, err := procfs.Self()
		if err != nil {
			return 0
		}
		st, err := p.Stat()
		if err != nil {
			return 0
		}
		t, err := st.StartTime()
		if err != nil {
			return 0
		}
		return t
	})
}
