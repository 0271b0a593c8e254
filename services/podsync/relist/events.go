package relist

import (
	"context"
	"errors"
	"io"
	"math"
	"slices"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// EventedInterval is how often the relist runs while container events are followed: a
// safety net for an event the runtime dropped (containerd drops them for a subscriber
// that falls behind). The kubelet's evented PLEG waits 300 s; 30 s heals a missed change
// within the time a probe or a grace period is counted in, costs a thirtieth of the
// relisting every second, and stays well inside HealthyThreshold, so the health check
// needs no second threshold.
const EventedInterval = 30 * time.Second

// EventSource is the part of the CRI runtime service that streams container events.
type EventSource interface {
	GetContainerEvents(ctx context.Context, in *runtimeapi.GetEventsRequest, opts ...grpc.CallOption) (runtimeapi.RuntimeService_GetContainerEventsClient, error)
}

// eventFollower is the relister's state for following container events.
type eventFollower struct {
	// interval is the relist period while events are in use (EventedInterval).
	interval time.Duration
	// settle is how long a new stream must stay open, or deliver an event, before it counts
	// as working: a runtime without the call answers Unimplemented on the first read.
	settle time.Duration
	// backoff paces reconnecting after a stream breaks; unimplementedRetry is how long to
	// wait before asking again a runtime that does not offer events (it may be upgraded).
	backoff            wait.Backoff
	unimplementedRetry time.Duration

	inUse     atomic.Bool
	relistNow chan struct{}

	connErrors prometheus.Counter
	connOK     prometheus.Counter
	latency    prometheus.Histogram
	inUseGauge prometheus.Gauge
}

func newEventFollower(reg prometheus.Registerer) *eventFollower {
	f := &eventFollower{
		interval:           EventedInterval,
		settle:             time.Second,
		backoff:            wait.Backoff{Duration: time.Second, Factor: 2, Jitter: 0.1, Steps: math.MaxInt32, Cap: 30 * time.Second},
		unimplementedRetry: 5 * time.Minute,
		relistNow:          make(chan struct{}, 1),
		connErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kubelet_evented_pleg_connection_error_count",
			Help: "The number of errors encountered during the establishment of streaming connection with the CRI runtime.",
		}),
		connOK: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kubelet_evented_pleg_connection_success_count",
			Help: "The number of times a streaming client was obtained to receive CRI Events.",
		}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "kubelet_evented_pleg_connection_latency_seconds",
			Help:    "The latency of streaming connection with the CRI runtime, measured in seconds.",
			Buckets: prometheus.DefBuckets,
		}),
		inUseGauge: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "unitlet_podsync_container_events_in_use",
			Help: "1 while podsync follows the runtime's container events (the relist is then the safety net every 30 s), 0 while it relists every second.",
		}),
	}
	if reg != nil {
		reg.MustRegister(f.connErrors, f.connOK, f.latency, f.inUseGauge)
	}
	return f
}

// EventsInUse reports whether the relister follows container events now.
func (r *Relister) EventsInUse() bool { return r.events.inUse.Load() }

// setEventsInUse switches between following events and relisting every interval; a switch
// relists at once (going live: what changed before the stream opened; falling back: what
// changed while it was breaking).
func (r *Relister) setEventsInUse(on bool) {
	if r.events.inUse.Swap(on) == on {
		return
	}
	if on {
		r.events.inUseGauge.Set(1)
	} else {
		r.events.inUseGauge.Set(0)
	}
	r.relistSoon()
}

// relistSoon asks the relist loop for a relist now.
func (r *Relister) relistSoon() {
	select {
	case r.events.relistNow <- struct{}{}:
	default:
	}
}

// FollowEvents follows the runtime's container events until ctx ends: while a stream is
// open, each event re-reads its pod and reports it changed at once, and the relist slows
// to EventedInterval. A broken stream falls back to relisting every interval at once and
// is opened again with backoff. A runtime that does not offer events (containerd 1.6)
// keeps the relist every interval; it is asked again every few minutes.
func (r *Relister) FollowEvents(ctx context.Context, src EventSource) error {
	f := r.events
	backoff := f.backoff
	told := false
	for {
		live, err := r.follow(ctx, src)
		if ctx.Err() != nil {
			r.setEventsInUse(false)
			return nil
		}
		r.setEventsInUse(false)
		f.connErrors.Inc()
		if live {
			backoff = f.backoff
		}
		var wait time.Duration
		switch {
		case status.Code(err) == codes.Unimplemented:
			wait = f.unimplementedRetry
			if !told {
				r.log.Info("the container runtime offers no container events: relisting every "+r.interval.String(), "err", err)
				told = true
			}
		case live:
			wait = backoff.Step()
			r.log.Warn("the container events stream broke: relisting every "+r.interval.String()+" until it is back", "err", err, "retryIn", wait.Round(time.Millisecond))
		default:
			wait = backoff.Step()
			r.log.Warn("open the container events stream", "err", err, "retryIn", wait.Round(time.Millisecond))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-r.clk.After(wait):
		}
	}
}

// follow opens one stream and handles its events until it ends; live reports whether it
// worked (stayed open for settle or delivered an event).
func (r *Relister) follow(ctx context.Context, src EventSource) (live bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := src.GetContainerEvents(ctx, &runtimeapi.GetEventsRequest{})
	if err != nil {
		return false, err
	}
	events, ended := make(chan *runtimeapi.ContainerEventResponse, 256), make(chan error, 1)
	go func() {
		for {
			ev, err := stream.Recv()
			if err != nil {
				if errors.Is(err, io.EOF) {
					err = errors.New("the runtime ended the stream")
				}
				ended <- err
				return
			}
			select {
			case events <- ev:
			case <-ctx.Done():
				return
			}
		}
	}()
	settled := r.clk.After(r.events.settle)
	goLive := func() {
		if !live {
			live = true
			r.events.connOK.Inc()
			r.setEventsInUse(true)
			r.log.Info("following the container runtime's container events: relisting every " + r.events.interval.String() + " as a safety net")
		}
	}
	for {
		var batch []*runtimeapi.ContainerEventResponse
		select {
		case err := <-ended:
			return live, err
		case <-settled:
			goLive()
			continue
		case ev := <-events:
			batch = append(batch, ev)
		}
		goLive()
		// Events that came meanwhile join the batch, so a pod is read once for several.
	drain:
		for {
			select {
			case ev := <-events:
				batch = append(batch, ev)
			default:
				break drain
			}
		}
		r.handle(ctx, batch)
	}
}

// handle re-reads the pods of a batch of events and reports those that changed.
//
// An event only names the pod to look at: the pod is read afresh rather than built from
// the event's statuses. A read shows the runtime as it is, so events that arrive late or
// out of order (a STARTED after the STOPPED of the same container) cannot bring back a
// state that has passed; the read fills every detail the relist fills (sandbox IPs,
// termination-message mounts, every sandbox of the pod, not only the event's); and reads
// are ordered among themselves and with the relist (see Relister.readAt).
func (r *Relister) handle(ctx context.Context, batch []*runtimeapi.ContainerEventResponse) {
	now := r.clk.Now()
	var uids []types.UID
	for _, ev := range batch {
		if ev.CreatedAt > 0 {
			r.events.latency.Observe(now.Sub(time.Unix(0, ev.CreatedAt)).Seconds())
		}
		uid := r.podOf(ev)
		if uid == "" {
			// The runtime could not say whose container it was (its sandbox is gone): a
			// relist finds out.
			r.log.Debug("container event without its pod: relisting", "container", ev.ContainerId, "type", ev.ContainerEventType)
			r.relistSoon()
			continue
		}
		if !slices.Contains(uids, uid) {
			uids = append(uids, uid)
		}
	}
	var changed []types.UID
	for _, uid := range uids {
		ok, err := r.refresh(ctx, uid)
		if err != nil {
			if ctx.Err() == nil {
				r.log.Warn("read a pod after a container event: relisting", "pod", uid, "err", err)
				r.relistSoon()
			}
			continue
		}
		if ok {
			changed = append(changed, uid)
		}
	}
	if len(changed) > 0 && r.changed != nil {
		r.changed(changed)
	}
}

// podOf is the pod of an event's container: from the event's sandbox, else from the view.
func (r *Relister) podOf(ev *runtimeapi.ContainerEventResponse) types.UID {
	if uid := ev.GetPodSandboxStatus().GetMetadata().GetUid(); uid != "" {
		return types.UID(uid)
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	for uid, p := range r.pods {
		for _, s := range p.Sandboxes {
			if s.ID == ev.ContainerId {
				return uid
			}
		}
		for _, c := range p.Containers {
			if c.ID == ev.ContainerId {
				return uid
			}
		}
	}
	return ""
}
