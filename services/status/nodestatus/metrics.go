package nodestatus

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Results of a status write or lease renewal, the values of the result label.
const (
	resultSuccess = "success"
	resultError   = "error"
)

type metrics struct {
	statusUpdates *prometheus.CounterVec
	leaseRenewals *prometheus.CounterVec
	nodeName      *prometheus.GaugeVec
}

// newMetrics builds the collectors and registers them with reg when it is not nil.
func newMetrics(reg prometheus.Registerer, nodeName string) (*metrics, error) {
	m := &metrics{
		statusUpdates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "unitlet_status_node_status_updates_total",
			Help: "Writes of the node's status to the API server, by result (success, error).",
		}, []string{"result"}),
		leaseRenewals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "unitlet_status_lease_renewals_total",
			Help: "Creations and renewals of the node's lease, by result (success, error).",
		}, []string{"result"}),
		// The kubelet's kubelet_node_name: always 1, the node's name in the label.
		nodeName: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kubelet_node_name",
			Help: "The node's name. The count is always 1.",
		}, []string{"node"}),
	}
	for _, r := range []string{resultSuccess, resultError} {
		m.statusUpdates.WithLabelValues(r)
		m.leaseRenewals.WithLabelValues(r)
	}
	m.nodeName.WithLabelValues(nodeName).Set(1)
	if reg == nil {
		return m, nil
	}
	for _, col := range []prometheus.Collector{m.statusUpdates, m.leaseRenewals, m.nodeName} {
		if err := reg.Register(col); err != nil {
			return nil, fmt.Errorf("register node status metrics: %w", err)
		}
	}
	return m, nil
}

func result(err error) string {
	if err != nil {
		return resultError
	}
	return resultSuccess
}
