package status

import (
	"context"
	"sync"
	"testing"
	"time"

	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/clock"

	podsyncv1 "github.com/unitlet/unitlet/proto/unitlet/podsync/v1"
)

type fakeHealth struct {
	mu   sync.Mutex
	down bool
}

func (f *fakeHealth) RuntimeHealth(context.Context) (*podsyncv1.RuntimeHealth, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &podsyncv1.RuntimeHealth{NodeShuttingDown: f.down}, nil
}

// TestShutdownWakesTheStatusLoop: podsync's graceful node shutdown wakes the node status
// loop within a poll (the Node turns not ready at once), and so does its end; nothing
// else does.
func TestShutdownWakesTheStatusLoop(t *testing.T) {
	h := &fakeHealth{}
	wake := make(chan struct{}, 1)
	kc := &kubeletconfigv1beta1.KubeletConfiguration{}
	kc.ShutdownGracePeriod.Duration = 30 * time.Second
	w := newShutdownWatch(kc, h, clock.RealClock{}, wake)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = w.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	select {
	case <-wake:
		t.Fatalf("woken while the node runs")
	case <-time.After(2500 * time.Millisecond):
	}
	h.mu.Lock()
	h.down = true
	h.mu.Unlock()
	select {
	case <-wake:
	case <-time.After(3 * time.Second):
		t.Fatalf("the status loop was not woken when the node began shutting down")
	}
	h.mu.Lock()
	h.down = false
	h.mu.Unlock()
	select {
	case <-wake:
	case <-time.After(3 * time.Second):
		t.Fatalf("the status loop was not woken when the shutdown was cancelled")
	}
}

// Without graceful node shutdown in the configuration the watch asks podsync nothing and
// its loop ends with ctx; either setting turns it on.
func TestShutdownWatchOffWithoutGracefulShutdown(t *testing.T) {
	kc := &kubeletconfigv1beta1.KubeletConfiguration{}
	w := newShutdownWatch(kc, nil, clock.RealClock{}, make(chan struct{}, 1))
	endsWithCtx(t, w.Run)
	kc.ShutdownGracePeriodByPodPriority = []kubeletconfigv1beta1.ShutdownGracePeriodByPodPriority{{Priority: 0, ShutdownGracePeriodSeconds: 10}}
	if !newShutdownWatch(kc, nil, clock.RealClock{}, nil).on {
		t.Error("shutdownGracePeriodByPodPriority: the watch is off")
	}
}
