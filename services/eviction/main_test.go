package eviction

import (
	"context"
	"log/slog"
	"testing"
	"time"
)

// Without kernelMemcgNotification memory pressure is seen every monitoring period only:
// the notification loop asks the source for nothing and ends with ctx.
func TestMemoryNotificationsOffWaits(t *testing.T) {
	loop := memoryNotifications(false, nil, nil, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
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
