package volumes

import (
	"context"
	"time"
)

// freshDelay is how soon newly set-up volumes are measured: a moment, so that the volumes
// of pods started together are measured in one pass.
const freshDelay = 2 * time.Second

// MeasureEvery measures every prepared volume's usage (Measure) at once and then every
// period, until ctx ends; volumes set up in between are measured within freshDelay, not
// at the next period (their stats and kubelet_volume_stats_* are there from the start).
func (m *Manager) MeasureEvery(ctx context.Context, period time.Duration) error {
	for {
		m.Measure()
		next := m.clk.After(period)
	wait:
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-next:
				break wait
			case <-m.fresh:
				select {
				case <-ctx.Done():
					return nil
				case <-m.clk.After(freshDelay):
				}
				m.measure(func(v *volume) bool { return v.measured.IsZero() })
			}
		}
	}
}
