package podsync

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"

	podsyncv1 "github.com/unitlet/unitlet/proto/unitlet/podsync/v1"
	"github.com/unitlet/unitlet/services/podsync/relist"
)

// fakeStatuser is a runtime whose Status answers ready, or err when it is set (under mu
// when a test changes it while calls run).
type fakeStatuser struct {
	mu  sync.Mutex
	err error
}

func (f *fakeStatuser) Version(context.Context, *runtimeapi.VersionRequest, ...grpc.CallOption) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{RuntimeName: "fake", RuntimeVersion: "1"}, nil
}

func (f *fakeStatuser) Status(context.Context, *runtimeapi.StatusRequest, ...grpc.CallOption) (*runtimeapi.StatusResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	return &runtimeapi.StatusResponse{Status: &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{
		{Type: runtimeapi.RuntimeReady, Status: true},
		{Type: runtimeapi.NetworkReady, Status: true},
	}}}, nil
}

// A Status call that fails (a starved node's runtime answering late) leaves the last answer
// standing for runtimeDownAfter, as the kubelet does; the runtime is down after that, and
// at once when it never answered.
func TestRuntimeDownOnlyAfterItFailedForThirtySeconds(t *testing.T) {
	ctx := context.Background()
	rt := &fakeStatuser{}
	now := time.Unix(1_000_000, 0)
	h := &runtimeHealth{rt: rt, now: func() time.Time { return now }}
	late := status.Error(codes.DeadlineExceeded, "context deadline exceeded")
	state := func() (bool, string) {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.last.GetRuntimeReady(), h.last.GetMessage()
	}

	h.poll(ctx)
	if ready, msg := state(); !ready || msg != "" {
		t.Fatalf("answering runtime: ready %v %q, want ready", ready, msg)
	}
	rt.err = late
	for _, after := range []time.Duration{5 * time.Second, 25 * time.Second, runtimeDownAfter - time.Millisecond} {
		now = time.Unix(1_000_000, 0).Add(after)
		h.poll(ctx)
		if ready, msg := state(); !ready || msg != "" {
			t.Errorf("%s after its last answer: ready %v %q, want the last answer (ready)", after, ready, msg)
		}
	}
	now = time.Unix(1_000_000, 0).Add(runtimeDownAfter)
	h.poll(ctx)
	if ready, msg := state(); ready || !strings.HasPrefix(msg, "container runtime is down: ") {
		t.Errorf("%s after its last answer: ready %v %q, want container runtime is down", runtimeDownAfter, ready, msg)
	}
	rt.err = nil
	h.poll(ctx)
	if ready, msg := state(); !ready || msg != "" {
		t.Errorf("answering again: ready %v %q, want ready", ready, msg)
	}

	// A runtime that never answered this podsync: down runtimeDownAfter after its start.
	start := time.Unix(2_000_000, 0)
	now = start.Add(runtimeDownAfter - time.Millisecond)
	never := &runtimeHealth{rt: &fakeStatuser{err: late}, now: func() time.Time { return now }, started: start}
	never.poll(ctx)
	if never.last != nil {
		t.Errorf("a runtime that has not answered a podsync started %s ago: %q, want no report yet", runtimeDownAfter-time.Millisecond, never.last.GetMessage())
	}
	now = start.Add(runtimeDownAfter)
	never.poll(ctx)
	if msg := never.last.GetMessage(); !strings.HasPrefix(msg, "container runtime is down: ") {
		t.Errorf("a runtime that never answered a podsync started %s ago: %q, want container runtime is down", runtimeDownAfter, msg)
	}
}

// A podsync that has just started (an upgrade's restart) and whose first Status call is
// late does not report the runtime down: a health call waits for the first answer, and
// fails as a call that ran out of time (DeadlineExceeded, which unitlet-status counts as
// a restart under way) when it does not come within the caller's deadline. The upgrade
// test on the vm node saw the node NotReady for 8 s ("container runtime is down: context
// deadline exceeded") right after podsync's restart.
func TestAJustStartedPodsyncWaitsForTheRuntimesFirstAnswer(t *testing.T) {
	rt := &fakeStatuser{err: status.Error(codes.DeadlineExceeded, "context deadline exceeded")}
	h := newRuntimeHealth(rt, relist.New(newFakeCRI(), time.Second, clock.RealClock{}, nil, slog.New(slog.DiscardHandler), nil), func() bool { return false })

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	got, err := h.RuntimeHealth(ctx)
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("health before the runtime's first answer: %v, %v; want no report and DeadlineExceeded", got, err)
	}
	if h.lastStatus() != nil {
		t.Errorf("a late first answer was kept as %q", h.lastStatus().GetMessage())
	}

	// The runtime answers: the waiting call gets its status.
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	done := make(chan error, 1)
	var health atomic.Pointer[podsyncv1.RuntimeHealth]
	go func() {
		got, err := h.RuntimeHealth(ctx)
		health.Store(got)
		done <- err
	}()
	time.Sleep(300 * time.Millisecond)
	rt.mu.Lock()
	rt.err = nil
	rt.mu.Unlock()
	if err := <-done; err != nil || !health.Load().GetRuntimeReady() {
		t.Errorf("health once the runtime answered: %v, %v; want runtime ready", health.Load(), err)
	}
}

// TestRuntimeHealthReportsNodeShutdown: the health report carries a graceful node shutdown
// under way, which unitlet-status turns into the Node's NotReady.
func TestRuntimeHealthReportsNodeShutdown(t *testing.T) {
	down := false
	h := newRuntimeHealth(&fakeStatuser{}, relist.New(newFakeCRI(), time.Second, clock.RealClock{}, nil, slog.New(slog.DiscardHandler), nil), func() bool { return down })
	if got, _ := h.RuntimeHealth(context.Background()); got.GetNodeShuttingDown() {
		t.Errorf("shutting down before the shutdown")
	}
	down = true
	if got, _ := h.RuntimeHealth(context.Background()); !got.GetNodeShuttingDown() {
		t.Errorf("node_shutting_down not set during the shutdown")
	}
}
