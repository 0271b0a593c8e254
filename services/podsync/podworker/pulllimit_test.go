package podworker

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

func TestPullLimiterRunsPullsOneAtATimeWhenSerialized(t *testing.T) {
	p := newPullLimiter(PullLimits{Parallel: 1})
	var running, most atomic.Int32
	done := make(chan error, 3)
	for range 3 {
		go func() {
			done <- p.do(context.Background(), func() error {
				n := running.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				time.Sleep(20 * time.Millisecond)
				running.Add(-1)
				return nil
			})
		}()
	}
	for range 3 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if most.Load() != 1 {
		t.Errorf("%d pulls ran at once, want 1", most.Load())
	}

	// A pull waiting for its turn gives up with its context.
	hold, release := make(chan struct{}), make(chan struct{})
	go p.do(context.Background(), func() error { close(hold); <-release; return nil })
	<-hold
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := p.do(ctx, func() error { return nil }); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("waiting pull: %v, want its context's error", err)
	}
	close(release)
}

func TestPullLimiterRefusesPullsOverTheQPS(t *testing.T) {
	p := newPullLimiter(PullLimits{QPS: 0.001, Burst: 2})
	pulls := 0
	pull := func() error { pulls++; return nil }
	for i := range 2 {
		if err := p.do(context.Background(), pull); err != nil {
			t.Fatalf("pull %d within the burst: %v", i+1, err)
		}
	}
	if err := p.do(context.Background(), pull); !errors.Is(err, ErrPullQPSExceeded) || pulls != 2 {
		t.Errorf("third pull: %v after %d pulls, want %q without pulling", err, pulls, ErrPullQPSExceeded)
	}
	// No limits: nothing is held.
	free := newPullLimiter(PullLimits{})
	for range 100 {
		if err := free.do(context.Background(), pull); err != nil {
			t.Fatal(err)
		}
	}
}
