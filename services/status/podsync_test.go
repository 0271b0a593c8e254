package status

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	podsyncv1 "github.com/unitlet/unitlet/proto/unitlet/podsync/v1"
	statusv1 "github.com/unitlet/unitlet/proto/unitlet/status/v1"
	"github.com/unitlet/unitlet/shared/payload"
)

// fakePodsync answers ListPodsStream (with pods in parts of two, or UNIMPLEMENTED as a
// podsync that predates it unless parts is set), ListPods, GetRuntimeHealth and
// GetStreamingURL.
type fakePodsync struct {
	podsyncv1.PodSyncServiceClient
	pods      []*podsyncv1.Pod
	parts     bool
	err       error
	streamErr error
	// listed counts ListPods calls.
	listed int
}

func (f *fakePodsync) ListPods(context.Context, *podsyncv1.ListPodsRequest, ...grpc.CallOption) (*podsyncv1.ListPodsResponse, error) {
	f.listed++
	return &podsyncv1.ListPodsResponse{Pods: f.pods}, f.err
}

func (f *fakePodsync) ListPodsStream(context.Context, *podsyncv1.ListPodsStreamRequest, ...grpc.CallOption) (grpc.ServerStreamingClient[podsyncv1.ListPodsStreamResponse], error) {
	s := &fakeListStream{err: io.EOF}
	switch {
	case f.err != nil:
		s.err = f.err
	case !f.parts:
		s.err = grpcstatus.Error(codes.Unimplemented, "unknown method ListPodsStream")
	default:
		for i := 0; i < len(f.pods); i += 2 {
			s.parts = append(s.parts, &podsyncv1.ListPodsStreamResponse{Pods: f.pods[i:min(i+2, len(f.pods))]})
		}
	}
	return s, nil
}

type fakeListStream struct {
	grpc.ClientStream
	parts []*podsyncv1.ListPodsStreamResponse
	err   error
}

func (s *fakeListStream) Recv() (*podsyncv1.ListPodsStreamResponse, error) {
	if len(s.parts) == 0 {
		return nil, s.err
	}
	m := s.parts[0]
	s.parts = s.parts[1:]
	return m, nil
}

// TestPodsFromStreamOrOlderPodsync: the pods come from ListPodsStream's parts, or from
// ListPods when podsync predates ListPodsStream.
func TestPodsFromStreamOrOlderPodsync(t *testing.T) {
	var all []*podsyncv1.Pod
	for i := range 5 {
		p := busPod(t)
		p.Uid, p.Name = fmt.Sprint("u", i), fmt.Sprint("web-", i)
		all = append(all, p)
	}
	for _, parts := range []bool{true, false} {
		f := &fakePodsync{pods: all, parts: parts}
		pods, err := podsyncClient{c: f}.Pods(context.Background())
		if err != nil || len(pods) != 5 {
			t.Errorf("parts %v: %d pods, %v; want 5", parts, len(pods), err)
		}
		if want := map[bool]int{true: 0, false: 1}[parts]; f.listed != want {
			t.Errorf("parts %v: ListPods called %d times, want %d", parts, f.listed, want)
		}
	}
}

func (f *fakePodsync) GetRuntimeHealth(context.Context, *podsyncv1.GetRuntimeHealthRequest, ...grpc.CallOption) (*podsyncv1.GetRuntimeHealthResponse, error) {
	if f.err != nil {
		return nil, f.err
	}
	return &podsyncv1.GetRuntimeHealthResponse{Health: &podsyncv1.RuntimeHealth{RuntimeReady: true}}, nil
}

func (f *fakePodsync) GetStreamingURL(context.Context, *podsyncv1.GetStreamingURLRequest, ...grpc.CallOption) (*podsyncv1.GetStreamingURLResponse, error) {
	if f.streamErr != nil {
		return nil, f.streamErr
	}
	return &podsyncv1.GetStreamingURLResponse{Url: "http://127.0.0.1:1/exec/x"}, nil
}

func busPod(t *testing.T) *podsyncv1.Pod {
	t.Helper()
	obj, _ := json.Marshal(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "main", Image: "busybox"}}}})
	st, _ := json.Marshal(&corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.88.0.5",
		ContainerStatuses: []corev1.ContainerStatus{{Name: "main", RestartCount: 2}}})
	return &podsyncv1.Pod{Uid: "u1", Namespace: "default", Name: "web", Source: "api", Pod: obj, Status: st,
		Containers: []*podsyncv1.Container{{Name: "main", Id: "c1", LogPath: "/var/log/pods/default_web_u1/main/2.log"}}}
}

func TestPodsDecodeObjectAndStatus(t *testing.T) {
	removed := busPod(t)
	removed.Uid, removed.Removed = "gone", true
	p := podsyncClient{c: &fakePodsync{pods: []*podsyncv1.Pod{busPod(t), removed}}}
	pods, err := p.Pods(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(pods) != 1 {
		t.Fatalf("Pods = %d pods, want 1 (removed pods are left out)", len(pods))
	}
	got := pods[0]
	if got.UID != "u1" || got.Kind != "Pod" || got.Labels["app"] != "web" || got.Spec.NodeName != "node-1" || got.Status.PodIP != "10.88.0.5" {
		t.Errorf("Pods[0] = %+v, want the object with its spec, labels and observed status", got)
	}
}

func TestPodsLeaveOutAPodInAnUnknownSchema(t *testing.T) {
	newerPod, newerStatus, current := busPod(t), busPod(t), busPod(t)
	newerPod.Uid, newerPod.Name, newerPod.PodSchema = "u2", "newer-pod", "core/v2.Pod"
	newerStatus.Uid, newerStatus.Name, newerStatus.StatusSchema = "u3", "newer-status", "core/v2.PodStatus"
	current.Uid, current.PodSchema, current.StatusSchema = "u4", payload.SchemaPod, payload.SchemaPodStatus
	var logged strings.Builder
	p := podsyncClient{c: &fakePodsync{pods: []*podsyncv1.Pod{busPod(t), newerPod, newerStatus, current}}, log: slog.New(slog.NewTextHandler(&logged, nil))}
	pods, err := p.Pods(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(pods) != 2 || pods[0].UID != "u1" || pods[1].UID != "u4" || pods[1].Status.PodIP != "10.88.0.5" {
		t.Errorf("Pods = %d pods, want u1 (no schema) and u4 (the current ones) with their status", len(pods))
	}
	for _, want := range []string{`pod=default/newer-pod`, `unknown schema \"core/v2.Pod\" in pod_schema`, `pod=default/newer-status`, `unknown schema \"core/v2.PodStatus\" in status_schema`} {
		if !strings.Contains(logged.String(), want) {
			t.Errorf("log lacks %s:\n%s", want, logged.String())
		}
	}
	if _, err := p.Container(context.Background(), "default", "newer-status", "main"); !apierrors.IsServiceUnavailable(err) || !strings.Contains(err.Error(), `unknown schema "core/v2.PodStatus"`) {
		t.Errorf("Container of a pod whose status is in an unknown schema: %v, want ServiceUnavailable naming it", err)
	}
}

func TestContainerLogLocation(t *testing.T) {
	p := podsyncClient{c: &fakePodsync{pods: []*podsyncv1.Pod{busPod(t)}}}
	cl, err := p.Container(context.Background(), "default", "web", "main")
	if err != nil {
		t.Fatal(err)
	}
	if cl.PodUID != "u1" || cl.ContainerID != "c1" || cl.RestartCount != 2 || cl.Path != "/var/log/pods/default_web_u1/main/2.log" {
		t.Errorf("Container = %+v", cl)
	}
	if _, err := p.Container(context.Background(), "default", "nope", "main"); !apierrors.IsNotFound(err) {
		t.Errorf("unknown pod: %v, want NotFound", err)
	}
	if _, err := p.Container(context.Background(), "default", "web", "sidecar"); !apierrors.IsBadRequest(err) {
		t.Errorf("unknown container: %v, want BadRequest", err)
	}
	if uid, err := p.PodUID(context.Background(), "default", "web"); err != nil || uid != "u1" {
		t.Errorf("PodUID = %q, %v", uid, err)
	}
}

func TestPodsyncErrorsBecomeAPIErrors(t *testing.T) {
	down := podsyncClient{c: &fakePodsync{err: grpcstatus.Error(codes.Unavailable, "connection refused")}}
	if _, err := down.Pods(context.Background()); !apierrors.IsServiceUnavailable(err) {
		t.Errorf("Pods with podsync down: %v, want ServiceUnavailable", err)
	}
	if _, err := down.RuntimeHealth(context.Background()); err == nil || err.Error() != "unitlet-podsync unreachable: connection refused" {
		t.Errorf("RuntimeHealth with podsync down: %v, want it named", err)
	}
	for code, is := range map[codes.Code]func(error) bool{codes.NotFound: apierrors.IsNotFound, codes.FailedPrecondition: apierrors.IsBadRequest, codes.Internal: apierrors.IsServiceUnavailable} {
		p := podsyncClient{c: &fakePodsync{streamErr: grpcstatus.Error(code, "x")}}
		if _, err := p.StreamingURL(context.Background(), &podsyncv1.GetStreamingURLRequest{PodUid: "u1"}); !is(err) {
			t.Errorf("StreamingURL with %s: %v", code, err)
		}
	}
}

type fixedNode struct{}

func (fixedNode) Status() *statusv1.NodeStatus {
	return &statusv1.NodeStatus{Registered: true, Conditions: []*statusv1.Condition{{Type: "Ready", Status: "True"}}}
}

type fixedWrites struct{}

func (fixedWrites) Stats() (uint64, int) { return 7, 2 }

func TestGetNodeStatus(t *testing.T) {
	standalone := NewServer("n", "[::]:10250", nil, nil)
	resp, err := standalone.GetNodeStatus(context.Background(), nil)
	if err != nil || !resp.Status.Standalone || resp.Status.NodeApiAddress != "[::]:10250" || resp.Status.NodeName != "n" {
		t.Errorf("standalone: %v %v", resp, err)
	}
	s := NewServer("n", "[::]:10250", fixedNode{}, fixedWrites{})
	resp, err = s.GetNodeStatus(context.Background(), nil)
	st := resp.GetStatus()
	if err != nil || st.Standalone || !st.Registered || st.PodStatusWrites != 7 || st.PodStatusPending != 2 || st.NodeName != "n" || len(st.Conditions) != 1 {
		t.Errorf("registered: %v %v", st, err)
	}
}
