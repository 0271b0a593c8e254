package podsync

import (
	"context"
	"time"

	"github.com/unitlet/unitlet/services/podsync/mirrorpod"
	"github.com/unitlet/unitlet/shared/kubeapi"
)

// mirrorResync is how often mirror pods are reconciled when nothing changed.
const mirrorResync = 10 * time.Second

// mirrorPods is the loop that keeps the mirror pods of static pods in the API for node
// nodeName (ReconcileMirrors). A standalone node (client nil) has none: the loop only
// waits for ctx to end.
func (s *Service) mirrorPods(client kubeapi.Interface, nodeName string) func(context.Context) error {
	if client == nil {
		return untilDone
	}
	m := mirrorpod.NewManager(client, nodeName, s.log.With("component", "mirror"))
	return func(ctx context.Context) error { return s.ReconcileMirrors(ctx, m) }
}

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
