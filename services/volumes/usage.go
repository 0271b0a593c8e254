package volumes

import (
	"context"
	"time"
)

// MeasureEvery measures every prepared volume's usage (Measure) at once and then every
// period, until ctx ends.
func (m *Manager) MeasureEvery(ctx context.Context, period time.Duration) error {
	for {
		m.Measure()
		select {
		case <-ctx.Done():
			return nil
		case <-m.clk.After(period):
		}
	}
}
