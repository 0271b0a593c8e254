package nodeshutdown

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/unitlet/unitlet/shared/checkpoint"
)

// StateStore keeps the last shutdown's times across restarts and reboots
// (checkpoint.Store).
type StateStore interface {
	ReadJSON(name string, v any) error
	WriteJSON(name string, v any) error
}

// stateName is the checkpoint of the last shutdown's times.
const stateName = "state"

// state is when the last graceful shutdown began and ended, kept so that the node's
// metrics still say so after the reboot, as the kubelet keeps graceful_node_shutdown_state.
type state struct {
	StartTime time.Time `json:"startTime"`
	EndTime   time.Time `json:"endTime,omitzero"`
}

// metrics are the kubelet's graceful shutdown gauges.
type metrics struct {
	start, end prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		start: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "kubelet_graceful_shutdown_start_time_seconds",
			Help: "Last graceful shutdown start time since unix epoch in seconds",
		}),
		end: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "kubelet_graceful_shutdown_end_time_seconds",
			Help: "Last graceful shutdown end time since unix epoch in seconds",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.start, m.end)
	}
	return m
}

func seconds(t time.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return float64(t.UnixNano()) / float64(time.Second)
}

// loadState sets the gauges from the last shutdown the store kept.
func (m *Manager) loadState() {
	if m.o.State == nil {
		return
	}
	var st state
	if err := m.o.State.ReadJSON(stateName, &st); err != nil {
		if !errors.Is(err, checkpoint.ErrNotFound) {
			m.o.Log.Warn("graceful node shutdown: read the last shutdown's times", "err", err)
		}
		return
	}
	m.metrics.start.Set(seconds(st.StartTime))
	m.metrics.end.Set(seconds(st.EndTime))
}

// saveState keeps st and sets the gauges from it.
func (m *Manager) saveState(st state) {
	m.metrics.start.Set(seconds(st.StartTime))
	m.metrics.end.Set(seconds(st.EndTime))
	if m.o.State == nil {
		return
	}
	if err := m.o.State.WriteJSON(stateName, st); err != nil {
		m.o.Log.Warn("graceful node shutdown: keep the shutdown's times", "err", err)
	}
}
