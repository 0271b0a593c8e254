package watch

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

func newTestHub(start uint64, keep int) (*Hub[string], *string) {
	state := "initial"
	h := NewHub(start, keep, func() string { return "snapshot:" + state })
	return h, &state
}

func publish(h *Hub[string], state *string, v string) uint64 {
	return h.Publish(func(seq uint64) string {
		*state = v
		return fmt.Sprintf("%s@%d", v, seq)
	})
}

func drain[T any](t *testing.T, s *Subscription[T], n int) []Event[T] {
	t.Helper()
	var got []Event[T]
	for len(got) < n {
		select {
		case ev, ok := <-s.Events():
			if !ok {
				t.Fatalf("subscription closed after %d of %d events", len(got), n)
			}
			got = append(got, ev)
		case <-time.After(time.Second):
			t.Fatalf("got %d of %d events", len(got), n)
		}
	}
	select {
	case ev, ok := <-s.Events():
		if ok {
			t.Fatalf("unexpected extra event %+v", ev)
		}
	default:
	}
	return got
}

func TestSubscribeReplaysWhatWasMissed(t *testing.T) {
	h, st := newTestHub(0, 8)
	for _, v := range []string{"a", "b", "c"} {
		publish(h, st, v)
	}
	s := h.Subscribe(1)
	defer s.Close()
	got := drain(t, s, 2)
	if got[0].Value != "b@2" || got[1].Value != "c@3" || got[0].Snapshot {
		t.Fatalf("replay = %+v", got)
	}
	publish(h, st, "d")
	if got := drain(t, s, 1); got[0].Seq != 4 || got[0].Value != "d@4" {
		t.Fatalf("live = %+v", got)
	}
}

func TestSubscribeUpToDateGetsOnlyNewEvents(t *testing.T) {
	h, st := newTestHub(0, 8)
	publish(h, st, "a")
	s := h.Subscribe(1)
	defer s.Close()
	drain(t, s, 0)
	publish(h, st, "b")
	drain(t, s, 1)
}

func TestSubscribeTooFarBehindGetsSnapshot(t *testing.T) {
	h, st := newTestHub(0, 2)
	for _, v := range []string{"a", "b", "c", "d"} {
		publish(h, st, v)
	}
	for _, after := range []uint64{0, 1, 99} { // 99: ahead of the hub, as after a restart
		s := h.Subscribe(after)
		got := drain(t, s, 1)
		if !got[0].Snapshot || got[0].Seq != 4 || got[0].Value != "snapshot:d" {
			t.Fatalf("after %d: got %+v, want a snapshot at 4", after, got)
		}
		s.Close()
	}
	s := h.Subscribe(2) // history still holds 3 and 4
	if got := drain(t, s, 2); got[0].Seq != 3 || got[0].Snapshot {
		t.Fatalf("after 2: got %+v", got)
	}
}

func TestHubContinuesNumberingAfterStart(t *testing.T) {
	h, st := newTestHub(41, 0)
	if seq := publish(h, st, "x"); seq != 42 {
		t.Fatalf("seq = %d, want 42", seq)
	}
}

func TestSlowSubscriberIsCutOffOthersAreNot(t *testing.T) {
	h, st := newTestHub(0, 0)
	slow := h.Subscribe(0)
	fast := h.Subscribe(0)
	// The fast subscriber takes each event before the next is published (in lockstep, so
	// whatever the machine's speed); the slow one takes none.
	got := make(chan struct{})
	go func() {
		for range fast.Events() {
			got <- struct{}{}
		}
		close(got)
	}()
	for i := 0; i < 100; i++ {
		publish(h, st, "v")
		if _, ok := <-got; !ok {
			t.Fatalf("fast subscriber cut off after %d events: %v", i, fast.Err())
		}
	}
	// The slow one was closed once its buffer filled.
	n := 0
	for range slow.Events() {
		n++
	}
	if !errors.Is(slow.Err(), ErrLagged) || n == 0 || n >= 100 {
		t.Fatalf("slow: %d events, err %v", n, slow.Err())
	}
	fast.Close()
	fast.Close() // twice is fine
	if h.Subscribers() != 0 {
		t.Fatalf("%d subscribers left", h.Subscribers())
	}
}

func TestServeEndsOnContextAndLag(t *testing.T) {
	h, st := newTestHub(0, 0)
	ctx, cancel := context.WithCancel(context.Background())
	sub := h.Subscribe(0)
	errc := make(chan error, 1)
	var sent []uint64
	go func() {
		errc <- Serve(ctx, sub, func(ev Event[string]) error { sent = append(sent, ev.Seq); return nil })
	}()
	publish(h, st, "a")
	time.Sleep(20 * time.Millisecond)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("Serve = %v", err)
	}
	if len(sent) != 1 || h.Subscribers() != 0 {
		t.Fatalf("sent %v, %d subscribers", sent, h.Subscribers())
	}

	block := make(chan struct{})
	sub = h.Subscribe(h.Seq())
	go func() {
		errc <- Serve(context.Background(), sub, func(Event[string]) error { <-block; return nil })
	}()
	for i := 0; i < 100; i++ {
		publish(h, st, "b")
	}
	close(block)
	if err := <-errc; !errors.Is(err, ErrLagged) {
		t.Fatalf("Serve of a lagging subscriber = %v", err)
	}
}
