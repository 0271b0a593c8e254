package volumes

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	volumesv1 "github.com/unitlet/unitlet/proto/unitlet/volumes/v1"
	"github.com/unitlet/unitlet/shared/payload"
)

func TestPrepareVolumesTakesThePodSchemaOrNoneAndRefusesAnUnknownOne(t *testing.T) {
	m, _ := newTestManager(t, &fakePayloads{content: "x"})
	s := NewServer(m, newMetrics(prometheus.NewRegistry(), m))
	b, err := json.Marshal(testPod("uid-1", nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	for _, schema := range []string{"", payload.SchemaPod} {
		if _, err := s.PrepareVolumes(context.Background(), &volumesv1.PrepareVolumesRequest{Pod: b, PodSchema: schema}); err != nil {
			t.Errorf("pod_schema %q: %v", schema, err)
		}
	}
	_, err = s.PrepareVolumes(context.Background(), &volumesv1.PrepareVolumesRequest{Pod: b, PodSchema: "core/v2.Pod"})
	want := `unitlet.volumes.v1.PrepareVolumesRequest.pod: unknown schema "core/v2.Pod" in pod_schema; this reader understands "core/v1.Pod"`
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), want) {
		t.Errorf("pod_schema core/v2.Pod: %v; want INVALID_ARGUMENT: %s", err, want)
	}
}
