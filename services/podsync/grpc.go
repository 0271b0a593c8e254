package podsync

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/apimachinery/pkg/types"

	podsyncv1 "github.com/unitlet/unitlet/proto/unitlet/podsync/v1"
	"github.com/unitlet/unitlet/services/podsync/relist"
	"github.com/unitlet/unitlet/shared/watch"
)

var errUnknownPod = errors.New("no such pod on this node")

// RuntimeStatus reports the runtime's readiness (the CRI Status call), kept by the service.
type RuntimeStatus interface {
	RuntimeHealth(ctx context.Context) *podsyncv1.RuntimeHealth
}

// Streamer gets streaming URLs (exec, attach, port-forward) from the runtime.
type Streamer interface {
	StreamingURL(ctx context.Context, req *podsyncv1.GetStreamingURLRequest) (string, error)
}

// Server is the bus API of unitlet-podsync.
type Server struct {
	podsyncv1.UnimplementedPodSyncServiceServer
	svc      *Service
	runtime  RuntimeStatus
	streamer Streamer
}

// NewServer serves svc over the bus.
func NewServer(svc *Service, rt RuntimeStatus, st Streamer) *Server {
	return &Server{svc: svc, runtime: rt, streamer: st}
}

// GetStreamingURL returns the runtime's URL for one exec, attach or port-forward session.
func (s *Server) GetStreamingURL(ctx context.Context, req *podsyncv1.GetStreamingURLRequest) (*podsyncv1.GetStreamingURLResponse, error) {
	switch {
	case req.GetPodUid() == "":
		return nil, status.Error(codes.InvalidArgument, "pod_uid: required")
	case req.GetKind() == podsyncv1.StreamKind_STREAM_KIND_UNSPECIFIED:
		return nil, status.Error(codes.InvalidArgument, "kind: required (exec, attach or port-forward)")
	case req.GetKind() != podsyncv1.StreamKind_STREAM_KIND_PORT_FORWARD && req.GetContainer() == "":
		return nil, status.Error(codes.InvalidArgument, "container: required for exec and attach")
	case req.GetKind() == podsyncv1.StreamKind_STREAM_KIND_EXEC && len(req.GetCommand()) == 0:
		return nil, status.Error(codes.InvalidArgument, "command: required for exec")
	}
	url, err := s.streamer.StreamingURL(ctx, req)
	switch {
	case errors.Is(err, errUnknownPod):
		return nil, status.Error(codes.NotFound, err.Error())
	case errors.Is(err, errNotRunning):
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, errBadRequest):
		return nil, status.Error(codes.InvalidArgument, err.Error())
	case err != nil:
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	return &podsyncv1.GetStreamingURLResponse{Url: url}, nil
}

// ListPods returns every pod.
func (s *Server) ListPods(context.Context, *podsyncv1.ListPodsRequest) (*podsyncv1.ListPodsResponse, error) {
	pods, seq := s.svc.List()
	return &podsyncv1.ListPodsResponse{Pods: pods, Sequence: seq}, nil
}

// WatchPods streams a snapshot unless the caller is current, then every change.
func (s *Server) WatchPods(req *podsyncv1.WatchPodsRequest, stream podsyncv1.PodSyncService_WatchPodsServer) error {
	first, sub := s.svc.Subscribe(req.GetAfterSequence())
	send := func(ev watch.Event[[]*podsyncv1.Pod]) error {
		return stream.Send(&podsyncv1.WatchPodsResponse{Sequence: ev.Seq, Snapshot: ev.Snapshot, Pods: ev.Value})
	}
	if first != nil {
		if err := send(*first); err != nil {
			sub.Close()
			return err
		}
	}
	return watch.Serve(stream.Context(), sub, send)
}

// KillPod stops a pod with a reason.
func (s *Server) KillPod(_ context.Context, req *podsyncv1.KillPodRequest) (*podsyncv1.KillPodResponse, error) {
	if req.GetUid() == "" {
		return nil, status.Error(codes.InvalidArgument, "uid: required")
	}
	if req.GetReason() == "" {
		return nil, status.Error(codes.InvalidArgument, "reason: required (e.g. Evicted)")
	}
	var grace *int64
	if req.GracePeriodSeconds != nil {
		g := req.GetGracePeriodSeconds()
		if g < 0 {
			return nil, status.Error(codes.InvalidArgument, "grace_period_seconds: must not be negative")
		}
		grace = &g
	}
	if err := s.svc.Kill(types.UID(req.GetUid()), grace, req.GetReason(), req.GetMessage()); err != nil {
		if errors.Is(err, errUnknownPod) {
			return nil, status.Error(codes.NotFound, err.Error())
		}
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &podsyncv1.KillPodResponse{}, nil
}

// GetRuntimeHealth reports the runtime's and the relist's health.
func (s *Server) GetRuntimeHealth(ctx context.Context, _ *podsyncv1.GetRuntimeHealthRequest) (*podsyncv1.GetRuntimeHealthResponse, error) {
	return &podsyncv1.GetRuntimeHealthResponse{Health: s.runtime.RuntimeHealth(ctx)}, nil
}

func clonePod(p *podsyncv1.Pod) *podsyncv1.Pod { return proto.Clone(p).(*podsyncv1.Pod) }

// relistHealth fills the relist part of a health report.
func relistHealth(h *podsyncv1.RuntimeHealth, r *relist.Relister) {
	ok, last, err := r.Health()
	h.RelistHealthy = ok
	if !last.IsZero() {
		h.LastRelistTime = timestamppb.New(last)
	}
	if !ok && err != nil {
		h.Message = err.Error()
	}
}
