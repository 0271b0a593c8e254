package volumes

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	volumesv1 "github.com/unitlet/unitlet/proto/unitlet/volumes/v1"
	"github.com/unitlet/unitlet/shared/payload"
)

// Server is the bus API of unitlet-volumes.
type Server struct {
	volumesv1.UnimplementedVolumesServiceServer
	m       *Manager
	metrics *metrics
}

// NewServer serves m over the bus.
func NewServer(m *Manager, mt *metrics) *Server { return &Server{m: m, metrics: mt} }

// PrepareVolumes makes a pod's volumes ready and returns its containers' mounts, or one
// container's, its subPaths resolved again, when the request names it.
func (s *Server) PrepareVolumes(ctx context.Context, req *volumesv1.PrepareVolumesRequest) (*volumesv1.PrepareVolumesResponse, error) {
	pod := &corev1.Pod{}
	if err := payload.VolumesPod.DecodeJSON(req.GetPodSchema(), req.GetPod(), pod); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if pod.UID == "" {
		return nil, status.Error(codes.InvalidArgument, "pod: metadata.uid is required")
	}
	prepare := s.m.Prepare
	if c := req.GetContainer(); c != "" {
		if !hasContainer(pod, c) {
			return nil, status.Errorf(codes.InvalidArgument, "container: pod %s/%s has no container %q", pod.Namespace, pod.Name, c)
		}
		prepare = func(ctx context.Context, pod *corev1.Pod) ([]*volumesv1.ContainerMounts, error) {
			return s.m.PrepareContainer(ctx, pod, c)
		}
	}
	start := time.Now()
	mounts, err := prepare(ctx, pod)
	s.metrics.prepareDuration.Observe(time.Since(start).Seconds())
	var pe *ErrPrepare
	switch {
	case errors.As(err, &pe):
		s.metrics.prepares.WithLabelValues("failed").Inc()
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	case err != nil:
		s.metrics.prepares.WithLabelValues("error").Inc()
		return nil, status.Error(codes.Internal, err.Error())
	}
	s.metrics.prepares.WithLabelValues("ok").Inc()
	return &volumesv1.PrepareVolumesResponse{Containers: mounts}, nil
}

// ReleaseVolumes tears down a terminated pod's volumes.
func (s *Server) ReleaseVolumes(ctx context.Context, req *volumesv1.ReleaseVolumesRequest) (*volumesv1.ReleaseVolumesResponse, error) {
	if req.GetPodUid() == "" {
		return nil, status.Error(codes.InvalidArgument, "pod_uid: required")
	}
	if err := s.m.Release(ctx, types.UID(req.GetPodUid())); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &volumesv1.ReleaseVolumesResponse{}, nil
}

// ListVolumes returns the prepared volumes with their usage, and the attached volumes in
// use.
func (s *Server) ListVolumes(context.Context, *volumesv1.ListVolumesRequest) (*volumesv1.ListVolumesResponse, error) {
	inUse, known := s.m.VolumesInUse()
	return &volumesv1.ListVolumesResponse{Volumes: s.m.List(), VolumesInUse: inUse, VolumesInUseKnown: known}, nil
}

func toProto(uid types.UID, pod *corev1.Pod, v *volume) *volumesv1.Volume {
	out := &volumesv1.Volume{
		PodUid: string(uid), Namespace: pod.Namespace, PodName: pod.Name, Name: v.name, Plugin: v.plugin,
		UsedBytes: v.used, InodesUsed: v.inodes,
	}
	if v.plugin != pluginHostPath {
		out.Path = v.path
	}
	if !v.measured.IsZero() {
		out.MeasureTime = timestamppb.New(v.measured)
	}
	out.Size = v.size
	if c := v.condition; c != nil {
		out.Condition = &volumesv1.VolumeCondition{Abnormal: c.Abnormal, Message: c.Message}
	}
	return out
}
