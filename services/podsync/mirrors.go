package podsync

import (
	"context"
	"time"

	"github.com/unitlet/unitlet/services/podsync/mirrorpod"
)

// mirrorResync is how often mirror pods are reconciled when nothing changed.
const mirrorResync = 10 * time.Second

// ReconcileMirrors keeps the mirror pods of static pods in the API, when static pods or
// mirror pods change and every mirrorResync, until ctx ends.
func (s *Service) ReconcileMirrors(ctx context.Context, m *mirrorpod.Manager) error {
	t := s.clk.NewTicker(mirrorResync)
	defer t.Stop()
	var lastErr string
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.staticChanged:
		case <-t.C():
		}
		static, mirrors, ok := s.StaticPods()
		if !ok {
			continue
		}
		if err := m.Reconcile(ctx, static, mirrors); err != nil && err.Error() != lastErr {
			s.log.Warn("mirror pods", "err", err)
			lastErr = err.Error()
		} else if err == nil {
			lastErr = ""
		}
	}
}
