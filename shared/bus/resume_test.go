package bus_test

import (
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/unitlet/unitlet/shared/bus"
)

// fakeStream yields events, then an error.
type fakeStream struct {
	events []uint64
	end    error
}

func (s *fakeStream) Recv() (uint64, error) {
	if len(s.events) == 0 {
		return 0, s.end
	}
	e := s.events[0]
	s.events = s.events[1:]
	return e, nil
}

func TestResumeReopensFromTheLastEventSeen(t *testing.T) {
	var mu sync.Mutex
	var opened []uint64
	var handled []uint64
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	open := func(ctx context.Context, after uint64) (bus.Stream[uint64], error) {
		mu.Lock()
		defer mu.Unlock()
		opened = append(opened, after)
		switch len(opened) {
		case 1:
			return &fakeStream{events: []uint64{1, 2, 3}, end: io.ErrUnexpectedEOF}, nil
		case 2:
			return nil, errors.New("connection refused")
		case 3:
			return &fakeStream{events: []uint64{4, 5}, end: io.EOF}, nil
		}
		cancel()
		return nil, ctx.Err()
	}
	err := bus.Resume(ctx, open, func(m uint64) uint64 { return m }, func(m uint64) error {
		handled = append(handled, m)
		return nil
	}, bus.ResumeOptions{After: 0, MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Resume returned %v, want context.Canceled", err)
	}
	if want := []uint64{0, 3, 3, 5}; !equal(opened, want) {
		t.Fatalf("opened after %v, want %v", opened, want)
	}
	if want := []uint64{1, 2, 3, 4, 5}; !equal(handled, want) {
		t.Fatalf("handled %v, want %v", handled, want)
	}
}

func TestResumeStopsOnHandlerErrorAndBacksOff(t *testing.T) {
	boom := errors.New("handler refused")
	err := bus.Resume(context.Background(), func(context.Context, uint64) (bus.Stream[uint64], error) {
		return &fakeStream{events: []uint64{1}}, nil
	}, func(m uint64) uint64 { return m }, func(uint64) error { return boom }, bus.ResumeOptions{})
	if !errors.Is(err, boom) {
		t.Fatalf("want the handler's error, got %v", err)
	}

	// A server that never answers is retried with growing, bounded waits: the waits Resume
	// chooses are checked, not how long they took.
	var waits []time.Duration
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_ = bus.Resume(ctx, func(context.Context, uint64) (bus.Stream[uint64], error) {
		return nil, errors.New("down")
	}, func(m uint64) uint64 { return m }, func(uint64) error { return nil }, bus.ResumeOptions{
		MinBackoff: 10 * time.Millisecond, MaxBackoff: 80 * time.Millisecond,
		OnDisconnect: func(err error, in time.Duration) {
			waits = append(waits, in)
			if len(waits) == 8 {
				cancel()
			}
		},
	})
	if len(waits) < 8 {
		t.Fatalf("only %d retries", len(waits))
	}
	for i, w := range waits {
		if w > 80*time.Millisecond || w < 5*time.Millisecond {
			t.Fatalf("wait %d = %s, outside [MinBackoff/2, MaxBackoff]", i, w)
		}
	}
	if waits[6] < 40*time.Millisecond {
		t.Fatalf("the backoff did not grow: %v", waits)
	}
}

func TestDialWaitsAtMostTheDeadline(t *testing.T) {
	conn, err := bus.Dial(t.TempDir(), "config")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	// Wait-for-ready keeps the call waiting for the socket; the deadline ends it.
	_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("call to a missing socket: %v, want DeadlineExceeded", err)
	}
}

func equal(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
