package status

import (
	"context"
	"time"

	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/clock"

	podsyncv1 "github.com/unitlet/unitlet/proto/unitlet/podsync/v1"
)

// shutdownPoll is how often podsync is asked whether the node shuts down, while graceful
// node shutdown is configured: an answer from podsync's memory, over the local socket.
const shutdownPoll = time.Second

// gracefulShutdownOn reports whether the configuration gives graceful node shutdown time:
// shutdownGracePeriod or shutdownGracePeriodByPodPriority.
func gracefulShutdownOn(kc *kubeletconfigv1beta1.KubeletConfiguration) bool {
	return kc.ShutdownGracePeriod.Duration > 0 || len(kc.ShutdownGracePeriodByPodPriority) > 0
}

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
	on     bool // graceful node shutdown is configured
	health runtimeHealther
	clk    clock.WithTicker
	wake   chan<- struct{}
	last   bool
}

// newShutdownWatch watches health (podsync's report) for a graceful node shutdown and
// wakes the status loop through wake. It is off when kc configures no graceful shutdown.
func newShutdownWatch(kc *kubeletconfigv1beta1.KubeletConfiguration, health runtimeHealther, clk clock.WithTicker, wake chan<- struct{}) *shutdownWatch {
	return &shutdownWatch{on: gracefulShutdownOn(kc), health: health, clk: clk, wake: wake}
}

// Run polls until ctx ends; off, it only waits for that.
func (w *shutdownWatch) Run(ctx context.Context) error {
	if !w.on {
		return untilDone(ctx)
	}
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
