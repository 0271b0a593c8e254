package bus

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"
)

// Stream is the receiving side of a server-streaming call.
type Stream[M any] interface {
	Recv() (M, error)
}

// ResumeOptions tune Resume.
type ResumeOptions struct {
	// After is the last sequence number already seen; 0 for none.
	After uint64
	// MinBackoff and MaxBackoff bound the wait between reconnects (defaults 100ms, 5s).
	MinBackoff, MaxBackoff time.Duration
	// OnDisconnect, when set, learns why a stream ended before it is reopened.
	OnDisconnect func(err error, retryIn time.Duration)
}

// Resume keeps a resumable Watch open until ctx ends. open starts the stream for a consumer
// that has seen everything up to after; seq reads an event's sequence number; handle
// consumes each event in order. When the stream breaks, Resume reopens it with the last
// sequence number handled, so the server sends what was missed or a snapshot. It returns
// ctx's error, or handle's error, which ends it.
func Resume[M any](ctx context.Context, open func(ctx context.Context, after uint64) (Stream[M], error), seq func(M) uint64, handle func(M) error, o ResumeOptions) error {
	if o.MinBackoff <= 0 {
		o.MinBackoff = 100 * time.Millisecond
	}
	if o.MaxBackoff < o.MinBackoff {
		o.MaxBackoff = max(5*time.Second, o.MinBackoff)
	}
	after := o.After
	wait := o.MinBackoff
	for {
		received, err := receive(ctx, open, seq, handle, &after)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var herr handlerError
		if errors.As(err, &herr) {
			return herr.err
		}
		if received {
			wait = o.MinBackoff
		}
		d := wait/2 + rand.N(wait/2+1)
		if o.OnDisconnect != nil {
			o.OnDisconnect(err, d)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(d):
		}
		wait = min(wait*2, o.MaxBackoff)
	}
}

type handlerError struct{ err error }

func (e handlerError) Error() string { return e.err.Error() }

func receive[M any](ctx context.Context, open func(context.Context, uint64) (Stream[M], error), seq func(M) uint64, handle func(M) error, after *uint64) (received bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := open(ctx, *after)
	if err != nil {
		return false, err
	}
	for {
		m, err := stream.Recv()
		if err != nil {
			return received, err
		}
		received = true
		if err := handle(m); err != nil {
			return received, handlerError{err}
		}
		*after = seq(m)
	}
}
