package status

import (
	"context"
	"fmt"

	grpcstatus "google.golang.org/grpc/status"

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
		out = append(out, sv)
	}
	return out, nil
}
