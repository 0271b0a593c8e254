package podsync

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"

	"github.com/unitlet/unitlet/services/podsync/relist"
)

// fakeStatuser is a runtime whose Status answers ready, or err when it is set.
type fakeStatuser struct{ err error }

func (f *fakeStatuser) Version(context.Context, *runtimeapi.VersionRequest, ...grpc.CallOption) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{RuntimeName: "fake", RuntimeVersion: "1"}, nil
}

func (f *fakeStatuser) Status(context.Context, *runtimeapi.StatusRequest, ...grpc.CallOption) (*runtimeapi.StatusResponse, error) {
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

	never := &runtimeHealth{rt: &fakeStatuser{err: late}, now: time.Now}
	never.poll(ctx)
	if msg := never.last.GetMessage(); !strings.HasPrefix(msg, "container runtime is down: ") {
		t.Errorf("a runtime that never answered: %q, want container runtime is down", msg)
	}
}

// TestRuntimeHealthReportsNodeShutdown: the health report carries a graceful node shutdown
// under way, which unitlet-status turns into the Node's NotReady.
func TestRuntimeHealthReportsNodeShutdown(t *testing.T) {
	down := false
	h := &runtimeHealth{rt: &fakeStatuser{}, now: time.Now, shuttingDown: func() bool { return down },
		relister: relist.New(newFakeCRI(), time.Second, clock.RealClock{}, nil, slog.New(slog.DiscardHandler), nil)}
	if h.RuntimeHealth(context.Background()).GetNodeShuttingDown() {
		t.Errorf("shutting down before the shutdown")
	}
	down = true
	if !h.RuntimeHealth(context.Background()).GetNodeShuttingDown() {
		t.Errorf("node_shutting_down not set during the shutdown")
	}
}
