package volumes

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

func TestMeasureEveryStopsWithItsContext(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1_000_000, 0))
	m := NewManager(ManagerOptions{PodsDir: filepath.Join(t.TempDir(), "pods"), Clock: clk, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- m.MeasureEvery(ctx, time.Minute) }()
	// It measured once at start and waits for the period on the clock.
	for !clk.HasWaiters() {
		time.Sleep(time.Millisecond)
	}
	clk.Step(time.Minute)
	for !clk.HasWaiters() {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("MeasureEvery returned %v", err)
	}
}
