package podsync

import (
	"context"
	"testing"
	"time"
)

// endsWithCtx runs loop and checks that it keeps running until its ctx ends, and then
// returns nil: the loop of a part that is off.
func endsWithCtx(t *testing.T, loop func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- loop(ctx) }()
	select {
	case err := <-done:
		t.Fatalf("the loop ended before its ctx: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("the loop ended with %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the loop did not end with its ctx")
	}
}

// Standalone (no API client) the API's caches and mirror pods are off: their loops wait,
// the workers get no services (no service-link variables) and no RuntimeClasses (pods
// naming one do not run).
func TestStandalonePartsAreOff(t *testing.T) {
	services, classes := newServiceLister(nil), newRuntimeClasses(nil)
	if services.forWorkers() != nil {
		t.Error("standalone: the workers get services")
	}
	if classes.forWorkers() != nil {
		t.Error("standalone: the workers get RuntimeClasses")
	}
	endsWithCtx(t, services.Run)
	endsWithCtx(t, classes.Run)
	f := newServiceFixture(t, 10)
	endsWithCtx(t, f.s.mirrorPods(nil, "node1"))
}

// Without image pull records (the feature gate off) the prune loop only waits.
func TestPrunePullRecordsWaitsWithoutRecords(t *testing.T) {
	endsWithCtx(t, prunePullRecords(nil, nil, nil, quietLog()))
}
