package nodestatus

import (
	"context"
	"strings"
	"testing"
	"time"

	podsyncv1 "github.com/unitlet/unitlet/proto/unitlet/podsync/v1"
	"github.com/unitlet/unitlet/shared/liveness"
)

// stuckRuntime never answers until released: a status round that hangs.
type stuckRuntime struct {
	entered chan struct{}
	release chan struct{}
}

func (s stuckRuntime) RuntimeHealth(ctx context.Context) (*podsyncv1.RuntimeHealth, error) {
	select {
	case s.entered <- struct{}{}:
	default:
	}
	select {
	case <-s.release:
	case <-ctx.Done():
	}
	return healthy(), nil
}

func TestAStuckStatusLoopFailsTheHealthCheck(t *testing.T) {
	rt := stuckRuntime{entered: make(chan struct{}, 1), release: make(chan struct{})}
	var loops *liveness.Loops
	h := newHarness(t, func(o *Options) {
		o.Runtime = rt
		loops = liveness.New(func() time.Time { return o.Clock.Now() })
		o.Loops = loops
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- h.c.Run(ctx) }()
	<-rt.entered // registered; the status round hangs on the runtime

	h.clock.Step(4 * time.Minute)
	if err := loops.Check(); err != nil && strings.Contains(err.Error(), loopStatus) {
		t.Fatalf("4 minutes into a round: %v, want the status loop still counted as turning", err)
	}
	h.clock.Step(2 * time.Minute)
	err := loops.Check()
	if err == nil || !strings.Contains(err.Error(), loopStatus+" has not turned") {
		t.Fatalf("6 minutes stuck: %v, want the status loop named", err)
	}
	close(rt.release) // the round ends; the next one, an update period later, beats
	waitFor(t, "the status loop turning again", func() bool {
		h.clock.Step(time.Second)
		err := loops.Check()
		return err == nil || !strings.Contains(err.Error(), loopStatus)
	})
	cancel()
	<-done
}

// Every lease round beats, the ones that update the lease they hold without a Get too.
func TestLeaseRoundsBeat(t *testing.T) {
	var loops *liveness.Loops
	h := newHarness(t, func(o *Options) {
		loops = liveness.New(func() time.Time { return o.Clock.Now() })
		o.Loops = loops
	})
	h.c.renewInterval = 20 * time.Millisecond
	node, err := h.c.tryRegister(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	h.c.setRegistered(node, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = h.c.RunLease(ctx) }()
	waitFor(t, "the lease", func() bool { return h.lease() != nil })
	for i := range 5 {
		h.clock.Step(time.Minute) // past the lease loop's bound, unless a round beats
		renewed := t0.Add(time.Duration(i+1) * time.Minute)
		waitFor(t, "a renewal", func() bool {
			l := h.lease()
			return l != nil && !l.Spec.RenewTime.Time.Before(renewed)
		})
		if err := loops.Check(); err != nil && strings.Contains(err.Error(), loopLease) {
			t.Fatalf("after renewal %d: %v", i+1, err)
		}
	}
}
