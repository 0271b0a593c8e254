package status

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"

	evictionv1 "github.com/unitlet/unitlet/proto/unitlet/eviction/v1"
	"github.com/unitlet/unitlet/shared/bus"
)

// pressureHold is how long the last pressure conditions stand after unitlet-eviction's
// stream broke: a restart (its checkpoint brings the same conditions back) does not flap
// the Node's conditions, while an eviction service that stays away is reported as not
// monitoring.
const pressureHold = 30 * time.Second

// pressureWatch follows unitlet-eviction's pressure conditions for the node status.
type pressureWatch struct {
	client evictionv1.EvictionServiceClient
	clk    clock.Clock
	wake   chan struct{}

	mu        sync.Mutex
	conds     []corev1.NodeCondition
	connected bool
	lost      time.Time
}

func newPressureWatch(c evictionv1.EvictionServiceClient, clk clock.Clock) *pressureWatch {
	return &pressureWatch{client: c, clk: clk, wake: make(chan struct{}, 1)}
}

var errNoEviction = errors.New("unitlet-eviction's pressure conditions are not available")

// Pressure is the conditions as unitlet-eviction last sent them.
func (w *pressureWatch) Pressure(context.Context) ([]corev1.NodeCondition, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.conds == nil || !w.connected && w.clk.Since(w.lost) > pressureHold {
		return nil, errNoEviction
	}
	return slices.Clone(w.conds), nil
}

// Run follows the conditions until ctx ends.
func (w *pressureWatch) Run(ctx context.Context) error {
	open := func(ctx context.Context, after uint64) (bus.Stream[*evictionv1.WatchConditionsResponse], error) {
		return w.client.WatchConditions(ctx, &evictionv1.WatchConditionsRequest{AfterSequence: after})
	}
	err := bus.Resume(ctx, open,
		func(r *evictionv1.WatchConditionsResponse) uint64 { return r.GetSequence() },
		func(r *evictionv1.WatchConditionsResponse) error { w.take(r.GetConditions()); return nil },
		bus.ResumeOptions{OnDisconnect: func(error, time.Duration) { w.disconnected() }})
	if ctx.Err() != nil {
		return nil
	}
	return err
}

func (w *pressureWatch) take(in []*evictionv1.Condition) {
	conds := make([]corev1.NodeCondition, 0, len(in))
	for _, c := range in {
		conds = append(conds, corev1.NodeCondition{Type: corev1.NodeConditionType(c.GetType()), Status: corev1.ConditionStatus(c.GetStatus()), Reason: c.GetReason(), Message: c.GetMessage()})
	}
	w.mu.Lock()
	changed := !w.connected && w.clk.Since(w.lost) > pressureHold || !slices.Equal(conds, w.conds)
	w.conds, w.connected = conds, true
	w.mu.Unlock()
	if changed {
		w.poke()
	}
}

func (w *pressureWatch) disconnected() {
	w.mu.Lock()
	if w.connected {
		w.connected, w.lost = false, w.clk.Now()
	}
	w.mu.Unlock()
}

func (w *pressureWatch) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}
