// Package watch fans sequenced events out to streaming subscribers that may disconnect and
// come back. Every event has a sequence number; a subscriber passes the last one it saw and
// receives what it missed while the hub still remembers it, or else one snapshot of the whole
// state. A subscriber that cannot keep up is cut off instead of slowing everyone down; it
// reconnects and catches up the same way.
package watch

import (
	"errors"
	"sync"
)

// ErrLagged ends a subscription whose consumer fell too far behind.
var ErrLagged = errors.New("subscriber fell behind; reconnect with the last sequence number seen")

// Event is one value with its sequence number.
type Event[T any] struct {
	Seq uint64
	// Snapshot means Value is the whole state at Seq, sent in place of events the hub no
	// longer has.
	Snapshot bool
	Value    T
}

// Hub keeps the last events and the subscribers.
type Hub[T any] struct {
	mu       sync.Mutex
	seq      uint64
	history  []Event[T] // the newest events, oldest first
	keep     int
	buffer   int
	snapshot func() T
	subs     map[*Subscription[T]]struct{}
}

// NewHub returns a hub that continues the sequence after start, remembers the last keep
// events, and describes the whole state with snapshot (called with the hub's lock held: it
// must not call back into the hub).
func NewHub[T any](start uint64, keep int, snapshot func() T) *Hub[T] {
	return &Hub[T]{
		seq:      start,
		keep:     max(keep, 0),
		buffer:   max(keep, 16),
		snapshot: snapshot,
		subs:     map[*Subscription[T]]struct{}{},
	}
}

// Seq is the sequence number of the newest event.
func (h *Hub[T]) Seq() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.seq
}

// Publish gives the next sequence number to make(seq)'s value and sends it to every
// subscriber. make runs under the hub's lock, so values and numbers are in the same order.
func (h *Hub[T]) Publish(make func(seq uint64) T) uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seq++
	ev := Event[T]{Seq: h.seq, Value: make(h.seq)}
	if h.keep > 0 {
		if len(h.history) == h.keep {
			copy(h.history, h.history[1:])
			h.history = h.history[:h.keep-1]
		}
		h.history = append(h.history, ev)
	}
	for s := range h.subs {
		select {
		case s.c <- ev:
		default:
			s.lagged = true
			h.dropLocked(s)
		}
	}
	return h.seq
}

// Subscribe starts a subscription for a consumer that has seen everything up to after
// (0: nothing). It first receives the events after that point, or a snapshot when the hub no
// longer has them all (or after is ahead of the hub, as after a restart of the hub's process
// that lost its numbering), then every new event.
func (h *Hub[T]) Subscribe(after uint64) *Subscription[T] {
	h.mu.Lock()
	defer h.mu.Unlock()
	var backlog []Event[T]
	switch {
	case after == h.seq:
	case after < h.seq && len(h.history) > 0 && h.history[0].Seq <= after+1:
		for _, ev := range h.history {
			if ev.Seq > after {
				backlog = append(backlog, ev)
			}
		}
	default:
		backlog = []Event[T]{{Seq: h.seq, Snapshot: true, Value: h.snapshot()}}
	}
	s := &Subscription[T]{hub: h, c: make(chan Event[T], h.buffer+len(backlog))}
	for _, ev := range backlog {
		s.c <- ev
	}
	h.subs[s] = struct{}{}
	return s
}

func (h *Hub[T]) dropLocked(s *Subscription[T]) {
	if _, ok := h.subs[s]; ok {
		delete(h.subs, s)
		close(s.c)
	}
}

// Subscribers is the number of live subscriptions.
func (h *Hub[T]) Subscribers() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs)
}

// Subscription is one consumer's feed.
type Subscription[T any] struct {
	hub    *Hub[T]
	c      chan Event[T]
	lagged bool
}

// Events delivers the events; it is closed when the subscription ends.
func (s *Subscription[T]) Events() <-chan Event[T] { return s.c }

// Err is ErrLagged when the hub cut the subscription off, nil otherwise.
func (s *Subscription[T]) Err() error {
	s.hub.mu.Lock()
	defer s.hub.mu.Unlock()
	if s.lagged {
		return ErrLagged
	}
	return nil
}

// Close ends the subscription. It is safe to call more than once.
func (s *Subscription[T]) Close() {
	s.hub.mu.Lock()
	defer s.hub.mu.Unlock()
	s.hub.dropLocked(s)
}
