package podworker

import (
	"context"
	"errors"

	"k8s.io/client-go/util/flowcontrol"
)

// ErrPullQPSExceeded is a pull refused by registryPullQPS, in the kubelet's words; the
// pull backs off and is tried again.
var ErrPullQPSExceeded = errors.New("pull QPS exceeded")

// PullLimits are the kubelet configuration's limits on image pulls.
type PullLimits struct {
	// QPS and Burst are registryPullQPS and registryBurst: pulls started per second, and
	// at once after a quiet spell. QPS 0 is no limit.
	QPS   float32
	Burst int
	// Parallel is how many pulls may run at once: 1 with serializeImagePulls,
	// maxParallelImagePulls otherwise; 0 is no limit.
	Parallel int
}

// pullLimiter holds pulls to PullLimits, as the kubelet's image puller does: a pull
// waits for a free slot, then takes a token or fails at once.
type pullLimiter struct {
	tokens flowcontrol.RateLimiter // nil: no rate limit
	slots  chan struct{}           // nil: no limit on parallel pulls
}

func newPullLimiter(l PullLimits) *pullLimiter {
	p := &pullLimiter{}
	if l.QPS > 0 {
		p.tokens = flowcontrol.NewTokenBucketRateLimiter(l.QPS, max(l.Burst, 1))
	}
	if l.Parallel > 0 {
		p.slots = make(chan struct{}, l.Parallel)
	}
	return p
}

// do runs pull within the limits.
func (p *pullLimiter) do(ctx context.Context, pull func() error) error {
	if p.slots != nil {
		select {
		case p.slots <- struct{}{}:
			defer func() { <-p.slots }()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if p.tokens != nil && !p.tokens.TryAccept() {
		return ErrPullQPSExceeded
	}
	return pull()
}
