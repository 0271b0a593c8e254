package status

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

// A standalone node writes nothing to the API: every loop of the writes only waits, and
// the bus API reports the node standalone.
func TestStandaloneWritesNothing(t *testing.T) {
	w, err := parts{}.apiWrites()
	if err != nil {
		t.Fatal(err)
	}
	for name, loop := range map[string]func(context.Context) error{
		"node status": w.NodeStatus, "node lease": w.Lease, "pod statuses": w.PodStatuses,
		"pressure conditions": w.Pressure, "node shutdown": w.Shutdown,
	} {
		t.Run(name, func(t *testing.T) { endsWithCtx(t, loop) })
	}
	resp, err := w.server("n", "[::]:10250").GetNodeStatus(context.Background(), nil)
	if err != nil || !resp.GetStatus().GetStandalone() {
		t.Errorf("GetNodeStatus = %v, %v; want a standalone node", resp, err)
	}
}
