package status

import (
	"context"
	"time"

	"k8s.io/utils/clock"

	podsyncv1 "github.com/unitlet/unitlet/proto/unitlet/podsync/v1"
)

// shutdownPoll is how often podsync is asked whether the node shuts down, while graceful
// node shutdown is configured: an answer from podsync's memory, over the local socket.
const shutdownPoll = time.Second

// runtimeHealther is podsync's health report (podsyncClient).
type runtimeHealther interface {
	RuntimeHealth(ctx context.Context) (*podsyncv1.RuntimeHealth, error)
}

// shutdownWatch wakes the node status loop when podsync starts (or stops) a graceful node
// shutdown, so the Node turns not ready within a second rather than at the next status
// round (nodeStatusUpdateFrequency), as the kubelet writes its node status the moment its
// shutdown manager sees logind's PrepareForShutdown. The Ready condition itself comes
// from the same report in the status loop (nodestatus).
type shutdownWatch struct {
	health runtimeHealther
	clk    clock.WithTicker
	wake   chan<- struct{}
	last   bool
}

// Run polls until ctx ends.
func (w *shutdownWatch) Run(ctx context.Context) error {
	tick := w.clk.NewTicker(shutdownPoll)
	defer tick.Stop()
	for {
		if h, err := w.health.RuntimeHealth(ctx); err == nil && h.GetNodeShuttingDown() != w.last {
			w.last = h.GetNodeShuttingDown()
			select {
			case w.wake <- struct{}{}:
			default:
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C():
		}
	}
}
