package podsync

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/apimachinery/pkg/types"

	podsyncv1 "github.com/unitlet/unitlet/proto/unitlet/podsync/v1"
	"github.com/unitlet/unitlet/services/podsync/relist"
	"github.com/unitlet/unitlet/shared/daemon"
	"github.com/unitlet/unitlet/shared/peercred"
	"github.com/unitlet/unitlet/shared/watch"
)

var errUnknownPod = errors.New("no such pod on this node")

// RuntimeStatus reports the runtime's readiness (the CRI Status call), kept by the service.
type RuntimeStatus interface {
	RuntimeHealth(ctx context.Context) (*podsyncv1.RuntimeHealth, error)
}

// Streamer gets streaming URLs (exec, attach, port-forward) from the runtime.
type Streamer interface {
	StreamingURL(ctx context.Context, req *podsyncv1.GetStreamingURLRequest) (string, error)
}

// DiskReclaimer frees disk for unitlet-eviction: dead containers and sandboxes, and
// with images every unused image.
type DiskReclaimer interface {
	Reclaim(ctx context.Context, images bool) (Reclaimed, error)
}

// maxPartBytes bounds the encoded pods of one message of ListPodsStream and of one part
// of a WatchPods snapshot: a quarter of gRPC's default 4 MiB receive limit, so that no
// message grows with the node's pods. One pod is bounded by the API server's own limits
// (an object under etcd's 1.5 MiB request limit; annotations at most 256 KiB).
const maxPartBytes = 1 << 20

// Server is the bus API of unitlet-podsync.
type Server struct {
	podsyncv1.UnimplementedPodSyncServiceServer
	svc       *Service
	runtime   RuntimeStatus
	streamer  Streamer
	reclaimer DiskReclaimer
	// partBytes is maxPartBytes but in tests.
	partBytes int
}

// NewServer serves svc over the bus.
func NewServer(svc *Service, rt RuntimeStatus, st Streamer, dr DiskReclaimer) *Server {
	return &Server{svc: svc, runtime: rt, streamer: st, reclaimer: dr, partBytes: maxPartBytes}
}

// serveBus registers s on d's bus server. The calls that stop pods, reach into containers
// or remove images (KillPod, GetStreamingURL, ReclaimDisk) are root's only.
func serveBus(d *daemon.Daemon, s *Server) {
	podsyncv1.RegisterPodSyncServiceServer(d.Server(), s)
	for _, m := range []string{"KillPod", "GetStreamingURL", "ReclaimDisk"} {
		d.Authorizer().Allow("/"+podsyncv1.PodSyncService_ServiceDesc.ServiceName+"/"+m, peercred.Root())
	}
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

// ListPods returns every pod in one message (callers that predate ListPodsStream).
func (s *Server) ListPods(context.Context, *podsyncv1.ListPodsRequest) (*podsyncv1.ListPodsResponse, error) {
	pods, seq := s.svc.List()
	return &podsyncv1.ListPodsResponse{Pods: pods, Sequence: seq}, nil
}

// ListPodsStream sends every pod of one view in messages of at most partBytes.
func (s *Server) ListPodsStream(_ *podsyncv1.ListPodsStreamRequest, stream podsyncv1.PodSyncService_ListPodsStreamServer) error {
	pods, seq := s.svc.List()
	for _, part := range split(pods, s.partBytes) {
		if err := stream.Send(&podsyncv1.ListPodsStreamResponse{Pods: part, Sequence: seq}); err != nil {
			return err
		}
	}
	return nil
}

// WatchPods streams a snapshot unless the caller is current, then every change.
func (s *Server) WatchPods(req *podsyncv1.WatchPodsRequest, stream podsyncv1.PodSyncService_WatchPodsServer) error {
	first, sub := s.svc.Subscribe(req.GetAfterSequence())
	send := func(ev watch.Event[[]*podsyncv1.Pod]) error {
		for _, m := range watchMessages(ev, s.partBytes) {
			if err := stream.Send(m); err != nil {
				return err
			}
		}
		return nil
	}
	if first != nil {
		if err := send(*first); err != nil {
			sub.Close()
			return err
		}
	}
	return watch.Serve(stream.Context(), sub, send)
}

// watchMessages are the messages of one event: a change as it is, a snapshot in parts of
// at most partBytes. The first part is the snapshot (snapshot set), the later ones are
// not; all but the last continue (snapshot_continues) and carry sequence 0, the last
// carries the snapshot's. A subscriber that knows nothing of parts takes the later ones
// as changes, and resumes from 0 (a new snapshot) if the stream breaks between parts.
func watchMessages(ev watch.Event[[]*podsyncv1.Pod], partBytes int) []*podsyncv1.WatchPodsResponse {
	if !ev.Snapshot {
		return []*podsyncv1.WatchPodsResponse{{Sequence: ev.Seq, Pods: ev.Value}}
	}
	parts := split(ev.Value, partBytes)
	out := make([]*podsyncv1.WatchPodsResponse, len(parts))
	for i, part := range parts {
		last := i == len(parts)-1
		out[i] = &podsyncv1.WatchPodsResponse{Snapshot: i == 0, SnapshotContinues: !last, Pods: part}
		if last {
			out[i].Sequence = ev.Seq
		}
	}
	return out
}

// split cuts pods, in order, into parts whose encoding as a repeated field takes at most
// maxBytes; a pod larger than that is a part of its own. There is always one part, empty
// when there are no pods.
func split(pods []*podsyncv1.Pod, maxBytes int) [][]*podsyncv1.Pod {
	parts := [][]*podsyncv1.Pod{nil}
	size := 0
	for _, p := range pods {
		// The field's tag (one byte for field numbers below 16), the length, the pod.
		n := proto.Size(p)
		n += 1 + protowire.SizeVarint(uint64(n))
		cur := &parts[len(parts)-1]
		if len(*cur) > 0 && size+n > maxBytes {
			parts = append(parts, nil)
			cur, size = &parts[len(parts)-1], 0
		}
		*cur = append(*cur, p)
		size += n
	}
	return parts
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

// ReclaimDisk frees disk as the kubelet's eviction manager does under disk pressure.
func (s *Server) ReclaimDisk(ctx context.Context, req *podsyncv1.ReclaimDiskRequest) (*podsyncv1.ReclaimDiskResponse, error) {
	if s.reclaimer == nil {
		return nil, status.Error(codes.Unimplemented, "disk reclaim is not set up")
	}
	r, err := s.reclaimer.Reclaim(ctx, req.GetImages())
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	return &podsyncv1.ReclaimDiskResponse{
		ContainersRemoved: uint32(r.Containers), SandboxesRemoved: uint32(r.Sandboxes),
		ImagesRemoved: uint32(r.Images), ImageBytesFreed: r.ImageBytes,
	}, nil
}

// GetRuntimeHealth reports the runtime's and the relist's health.
func (s *Server) GetRuntimeHealth(ctx context.Context, _ *podsyncv1.GetRuntimeHealthRequest) (*podsyncv1.GetRuntimeHealthResponse, error) {
	h, err := s.runtime.RuntimeHealth(ctx)
	if err != nil {
		return nil, err
	}
	return &podsyncv1.GetRuntimeHealthResponse{Health: h}, nil
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
