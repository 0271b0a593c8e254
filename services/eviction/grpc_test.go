package eviction

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"

	evictionv1 "github.com/unitlet/unitlet/proto/unitlet/eviction/v1"
	podsyncv1 "github.com/unitlet/unitlet/proto/unitlet/podsync/v1"
	"github.com/unitlet/unitlet/shared/payload"
)

func TestServerStateAndVerdicts(t *testing.T) {
	f := newFixture(t)
	m := f.manager(t, &kubeletconfigv1beta1.KubeletConfiguration{
		EvictionHard:            map[string]string{"memory.available": "1Gi"},
		EvictionSoft:            map[string]string{"nodefs.available": "20%"},
		EvictionSoftGracePeriod: map[string]string{"nodefs.available": "1m"},
	})
	s := NewServer(m)
	f.obs.mem = 512 << 20
	f.round(m)

	resp, err := s.GetState(context.Background(), &evictionv1.GetStateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	st := resp.GetState()
	var mem, disk *evictionv1.Signal
	for _, sig := range st.GetSignals() {
		switch sig.GetName() {
		case "memory.available":
			mem = sig
		case "nodefs.available":
			disk = sig
		}
	}
	if mem == nil || mem.GetAvailable() != "512Mi" || len(mem.GetThresholds()) == 0 || !mem.GetThresholds()[0].GetMet() || mem.GetThresholds()[0].GetResolved() != "1Gi" {
		t.Errorf("memory.available %v: want 512Mi available, the 1Gi hard threshold met", mem)
	}
	if disk == nil || len(disk.GetThresholds()) != 1 || disk.GetThresholds()[0].GetKind() != "soft" || disk.GetThresholds()[0].GetGracePeriod() != "1m0s" || disk.GetThresholds()[0].GetCrossed() {
		t.Errorf("nodefs.available %v: want a soft 20%% threshold with its grace period, not crossed", disk)
	}
	if c := st.GetConditions()[0]; c.GetType() != "MemoryPressure" || c.GetStatus() != "True" || c.GetReason() != "KubeletHasInsufficientMemory" {
		t.Errorf("conditions %v", st.GetConditions())
	}
	if len(st.GetEvictions()) != 1 || st.GetEvictions()[0].GetName() != "low" {
		t.Errorf("evictions %v", st.GetEvictions())
	}

	v, err := s.AdmitPod(context.Background(), &evictionv1.AdmitPodRequest{Pod: []byte(`{"metadata":{"name":"p"},"spec":{"containers":[{"name":"c"}]}}`)})
	if err != nil || v.GetAdmit() || v.GetReason() != "Evicted" {
		t.Errorf("a BestEffort pod under memory pressure: %v, %v", v, err)
	}
	burstable := []byte(`{"metadata":{"name":"p"},"spec":{"containers":[{"name":"c","resources":{"requests":{"memory":"1Mi"}}}]}}`)
	v, err = s.AdmitPod(context.Background(), &evictionv1.AdmitPodRequest{Pod: burstable, PodSchema: payload.SchemaPod})
	if err != nil || !v.GetAdmit() {
		t.Errorf("a Burstable pod under memory pressure: %v, %v", v, err)
	}
	_, err = s.AdmitPod(context.Background(), &evictionv1.AdmitPodRequest{Pod: burstable, PodSchema: "core/v2.Pod"})
	want := `unitlet.eviction.v1.AdmitPodRequest.pod: unknown schema "core/v2.Pod" in pod_schema; this reader understands "core/v1.Pod"`
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), want) {
		t.Errorf("a pod in an unknown schema: %v, want InvalidArgument: %s", err, want)
	}
	if _, err := s.AdmitPod(context.Background(), &evictionv1.AdmitPodRequest{Pod: []byte(`{`)}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("a pod that is not JSON: %v, want InvalidArgument", err)
	}
}

func TestActivePodsSkipWhatIsInAnUnknownSchema(t *testing.T) {
	pod := func(name, schema, status, statusSchema string) *podsyncv1.Pod {
		return &podsyncv1.Pod{Namespace: "ns", Name: name, PodSchema: schema, Status: []byte(status), StatusSchema: statusSchema,
			Pod: []byte(`{"metadata":{"namespace":"ns","name":"` + name + `"},"spec":{"containers":[{"name":"c"}]}}`)}
	}
	var logged strings.Builder
	pods, err := activePods([]*podsyncv1.Pod{
		pod("old-failed", "", `{"phase":"Failed"}`, ""),
		pod("current", payload.SchemaPod, `{"phase":"Running"}`, payload.SchemaPodStatus),
		pod("newer-pod", "core/v2.Pod", `{"phase":"Running"}`, payload.SchemaPodStatus),
		pod("newer-status", payload.SchemaPod, `{"phase":"Failed"}`, "core/v2.PodStatus"),
	}, slog.New(slog.NewTextHandler(&logged, nil)))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range pods {
		names = append(names, p.Pod.Name)
	}
	// old-failed is Failed by its status (no schema: the original one); newer-status is
	// judged by its spec alone, its status unread.
	if !slices.Equal(names, []string{"current", "newer-status"}) {
		t.Errorf("active pods %v, want current and newer-status", names)
	}
	for _, want := range []string{`pod=ns/newer-pod`, `unknown schema \"core/v2.Pod\" in pod_schema`, `pod=ns/newer-status`, `unknown schema \"core/v2.PodStatus\" in status_schema`} {
		if !strings.Contains(logged.String(), want) {
			t.Errorf("log lacks %s:\n%s", want, logged.String())
		}
	}
}
