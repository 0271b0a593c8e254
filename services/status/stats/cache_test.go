package stats

import (
	"context"
	"errors"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// newCache is a Cache collecting every minute from the cluster() runtime.
func newCache(t *testing.T) (*Cache, *fakeRuntime, *clocktesting.FakeClock) {
	h := newHost(t, false)
	rt := cluster()
	rt.imageFs = imageFs(h.root)
	clk := clocktesting.NewFakeClock(t0)
	return NewCache(newProvider(h, rt, clk), time.Minute), rt, clk
}

func TestCacheServesTheLastCollection(t *testing.T) {
	c, rt, _ := newCache(t)
	ctx := context.Background()

	// Before any collection a request collects one itself.
	first, err := c.Summary(ctx, false)
	if err != nil {
		t.Fatalf("Summary: %v", err)
	}
	if len(first.Pods) != 1 || first.Node.Fs == nil || first.Pods[0].Containers[0].Rootfs == nil {
		t.Fatalf("first summary = %+v, want the web pod with filesystems", first)
	}

	// A pod gone from the runtime stays until the next collection.
	rt.containerStats = nil
	second, err := c.Summary(ctx, false)
	if err != nil {
		t.Fatalf("Summary: %v", err)
	}
	if second != first {
		t.Fatalf("a request before the next collection got a new summary")
	}
	c.collect(ctx)
	if s, _ := c.Summary(ctx, false); len(s.Pods) != 0 {
		t.Fatalf("after a collection pods = %+v, want none", s.Pods)
	}
}

func TestCacheOnlyCPUAndMemoryLeavesTheSnapshotAlone(t *testing.T) {
	c, _, _ := newCache(t)
	ctx := context.Background()

	only, err := c.Summary(ctx, true)
	if err != nil {
		t.Fatalf("Summary: %v", err)
	}
	if only.Node.Fs != nil || only.Node.Runtime != nil || only.Node.Rlimit != nil || only.Pods[0].EphemeralStorage != nil || only.Pods[0].Containers[0].Rootfs != nil {
		t.Fatalf("only_cpu_and_memory kept filesystems: %+v", only)
	}
	if only.Node.CPU == nil || only.Node.Memory == nil || only.Pods[0].Containers[0].CPU == nil {
		t.Fatalf("only_cpu_and_memory lost CPU or memory: %+v", only)
	}
	full, _ := c.Summary(ctx, false)
	if full.Node.Fs == nil || full.Pods[0].Containers[0].Rootfs == nil {
		t.Fatalf("an only_cpu_and_memory request changed the cached summary: %+v", full)
	}
}

func TestCacheFailsAfterStaleCollections(t *testing.T) {
	c, rt, clk := newCache(t)
	ctx := context.Background()
	c.collect(ctx)

	rt.imageFsErr = errors.New("runtime down")
	clk.Step(time.Minute)
	c.collect(ctx)
	if _, err := c.Summary(ctx, false); err != nil {
		t.Fatalf("a summary one period old was not served: %v", err)
	}
	clk.Step(staleAfter * time.Minute)
	c.collect(ctx)
	if _, err := c.Summary(ctx, false); err == nil {
		t.Fatalf("a summary %d periods old was served while collections fail", staleAfter+1)
	}
}

func TestCacheRunStopsWithItsContext(t *testing.T) {
	c, _, _ := newCache(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not stop")
	}
}

// Nobody reading the summaries: no background collection; a request after an idle spell
// collects afresh rather than serve an old summary.
func TestCacheIdlesWhileNobodyAsks(t *testing.T) {
	c, rt, clk := newCache(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { _ = c.Run(ctx); close(done) }()
	for range 3 {
		for !clk.HasWaiters() {
			time.Sleep(time.Millisecond)
		}
		clk.Step(time.Minute)
	}
	c.mu.Lock()
	collected := c.last != nil
	c.mu.Unlock()
	if collected {
		t.Fatal("collected a summary nobody asked for")
	}
	first, err := c.Summary(ctx, false)
	if err != nil || len(first.Pods) != 1 {
		t.Fatalf("Summary = %+v, %v", first, err)
	}
	rt.containerStats = nil
	clk.Step(3 * time.Minute) // idle: older than two periods
	if s, err := c.Summary(ctx, false); err != nil || len(s.Pods) != 0 {
		t.Fatalf("after an idle spell Summary = %+v, %v; want a fresh one without the pod", s, err)
	}
	cancel()
	clk.Step(time.Minute)
	<-done
}
