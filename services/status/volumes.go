package status

import (
	"context"
	"fmt"

	grpcstatus "google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	volumesv1 "github.com/unitlet/unitlet/proto/unitlet/volumes/v1"
	"github.com/unitlet/unitlet/services/status/stats"
)

// volumesClient adapts unitlet-volumes' bus API to what the stats summary reads.
type volumesClient struct {
	c volumesv1.VolumesServiceClient
}

// List is every prepared volume with its last measured usage.
func (v volumesClient) List(ctx context.Context) ([]stats.Volume, error) {
	resp, err := v.c.ListVolumes(ctx, &volumesv1.ListVolumesRequest{})
	if err != nil {
		return nil, fmt.Errorf("unitlet-volumes: %s", grpcstatus.Convert(err).Message())
	}
	out := make([]stats.Volume, 0, len(resp.GetVolumes()))
	for _, vol := range resp.GetVolumes() {
		sv := stats.Volume{
			PodUID: vol.GetPodUid(), Name: vol.GetName(), Plugin: vol.GetPlugin(), Path: vol.GetPath(),
			UsedBytes: uint64(max(vol.GetUsedBytes(), 0)), InodesUsed: uint64(max(vol.GetInodesUsed(), 0)),
		}
		if vol.GetMeasureTime() != nil {
			sv.Measured = vol.GetMeasureTime().AsTime()
		}
		if z := vol.GetSize(); z != nil {
			sv.Size = &stats.VolumeSize{
				CapacityBytes: uint64(max(z.GetCapacityBytes(), 0)), AvailableBytes: uint64(max(z.GetAvailableBytes(), 0)),
				Inodes: uint64(max(z.GetInodes(), 0)), InodesFree: uint64(max(z.GetInodesFree(), 0)),
			}
		}
		if c := vol.GetCondition(); c != nil {
			sv.Abnormal = ptr.To(c.GetAbnormal())
		}
		out = append(out, sv)
	}
	return out, nil
}

// InUse are the attached volumes the node's pods use, by unique name; an error when
// unitlet-volumes cannot tell (or predates the list), so that status keeps the Node's.
func (v volumesClient) InUse(ctx context.Context) ([]corev1.UniqueVolumeName, error) {
	resp, err := v.c.ListVolumes(ctx, &volumesv1.ListVolumesRequest{})
	if err != nil {
		return nil, fmt.Errorf("unitlet-volumes: %s", grpcstatus.Convert(err).Message())
	}
	if !resp.GetVolumesInUseKnown() {
		return nil, fmt.Errorf("unitlet-volumes does not report the volumes in use")
	}
	var out []corev1.UniqueVolumeName
	for _, name := range resp.GetVolumesInUse() {
		out = append(out, corev1.UniqueVolumeName(name))
	}
	return out, nil
}
