package certs

import (
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the kubelet's certificate manager metrics, by their kubelet names, and
// unitlet-certs's rotation count.
type metrics struct {
	clientRenewErrors prometheus.Counter
	serverRenewErrors prometheus.Counter
	serverRotation    prometheus.Histogram
	rotations         *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	mt := &metrics{
		clientRenewErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kubelet_certificate_manager_client_expiration_renew_errors",
			Help: "Counter of certificate renewal errors for the client certificate.",
		}),
		serverRenewErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kubelet_server_expiration_renew_errors",
			Help: "Counter of certificate renewal errors for the serving certificate.",
		}),
		serverRotation: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "kubelet_certificate_manager_server_rotation_seconds",
			Help: "Histogram of the age of the serving certificates that were replaced, in seconds.",
			// From ten minutes (the shortest lifetime a CSR may ask for) to a year.
			Buckets: []float64{600, 1800, 3600, 4 * 3600, 24 * 3600, 7 * 24 * 3600, 30 * 24 * 3600, 90 * 24 * 3600, 180 * 24 * 3600, 365 * 24 * 3600},
		}),
		rotations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "unitlet_certs_rotations_total",
			Help: "Certificates installed by a rotation, by kind (client, serving).",
		}, []string{"kind"}),
	}
	reg.MustRegister(mt.clientRenewErrors, mt.serverRenewErrors, mt.serverRotation, mt.rotations)
	return mt
}

func (mt *metrics) forKind(k Kind) rotatorMetrics {
	if k == KindServing {
		return rotatorMetrics{renewErrors: mt.serverRenewErrors, rotations: mt.rotations.WithLabelValues(k.String()), replacedAge: mt.serverRotation}
	}
	return rotatorMetrics{renewErrors: mt.clientRenewErrors, rotations: mt.rotations.WithLabelValues(k.String())}
}

// registerTTL exports the time left on each certificate in use, computed when scraped:
// +Inf when there is none, negative once expired, as the kubelet reports it.
func registerTTL(reg prometheus.Registerer, m *Manager, now func() time.Time) {
	ttl := func(k Kind) func() float64 {
		return func() float64 {
			for _, c := range m.List() {
				if c.Kind == k && c.Leaf != nil {
					return c.Leaf.NotAfter.Sub(now()).Seconds()
				}
			}
			return math.Inf(1)
		}
	}
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "kubelet_certificate_manager_client_ttl_seconds",
			Help: "Seconds until the client certificate expires (negative once expired, +Inf when there is none).",
		}, ttl(KindClient)),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "kubelet_certificate_manager_server_ttl_seconds",
			Help: "Seconds until the serving certificate expires (negative once expired, +Inf when there is none).",
		}, ttl(KindServing)),
	)
}
