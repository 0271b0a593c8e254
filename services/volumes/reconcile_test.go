package volumes

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	podsyncv1 "github.com/unitlet/unitlet/proto/unitlet/podsync/v1"
	"github.com/unitlet/unitlet/shared/payload"
)

// fakeLister serves ListPodsStream from parts, then ends with end (io.EOF: the whole
// list); ListPods answers all at once.
type fakeLister struct {
	parts [][]*podsyncv1.Pod
	end   error
	all   []*podsyncv1.Pod
}

func (f *fakeLister) ListPodsStream(context.Context, *podsyncv1.ListPodsStreamRequest, ...grpc.CallOption) (grpc.ServerStreamingClient[podsyncv1.ListPodsStreamResponse], error) {
	return &fakeListStream{parts: f.parts, end: f.end}, nil
}

func (f *fakeLister) ListPods(context.Context, *podsyncv1.ListPodsRequest, ...grpc.CallOption) (*podsyncv1.ListPodsResponse, error) {
	return &podsyncv1.ListPodsResponse{Pods: f.all}, nil
}

type fakeListStream struct {
	grpc.ClientStream
	parts [][]*podsyncv1.Pod
	end   error
}

func (s *fakeListStream) Recv() (*podsyncv1.ListPodsStreamResponse, error) {
	if len(s.parts) == 0 {
		return nil, s.end
	}
	m := &podsyncv1.ListPodsStreamResponse{Pods: s.parts[0]}
	s.parts = s.parts[1:]
	return m, nil
}

// TestListPodsIsWholeOrAnError: the reconciler's list is every part of ListPodsStream, or
// ListPods from a podsync that predates it; a stream that breaks between parts is an
// error, never the pods it brought so far (the others would look like orphans).
func TestListPodsIsWholeOrAnError(t *testing.T) {
	a, b, c := &podsyncv1.Pod{Uid: "a"}, &podsyncv1.Pod{Uid: "b"}, &podsyncv1.Pod{Uid: "c"}
	parts := [][]*podsyncv1.Pod{{a, b}, {c}}
	for _, tc := range []struct {
		name    string
		lister  *fakeLister
		want    int
		wantErr bool
	}{
		{"every part", &fakeLister{parts: parts, end: io.EOF}, 3, false},
		{"an older podsync", &fakeLister{end: grpcstatus.Error(codes.Unimplemented, "unknown method ListPodsStream"), all: []*podsyncv1.Pod{a, b, c}}, 3, false},
		{"broken between parts", &fakeLister{parts: parts, end: grpcstatus.Error(codes.Unavailable, "connection reset")}, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pods, err := listPods(context.Background(), tc.lister)
			if (err != nil) != tc.wantErr || len(pods) != tc.want {
				t.Fatalf("%d pods, %v; want %d (error %v)", len(pods), err, tc.want, tc.wantErr)
			}
		})
	}
}

// TestOrphanNeedsTwoRounds: after a restart, a pod whose volumes are on disk but that
// neither podsync nor the runtime has yet (its first sync in flight) is kept at the first
// round, and released only if the next round still finds no one who has it.
func TestOrphanNeedsTwoRounds(t *testing.T) {
	m, clk := newTestManager(t, &fakePayloads{content: "x"})
	vols := []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	for _, uid := range []string{"syncing", "gone"} {
		if _, err := m.Prepare(context.Background(), testPod(uid, vols, nil)); err != nil {
			t.Fatal(err)
		}
	}
	m2 := NewManager(ManagerOptions{PodsDir: m.podsDir, Payloads: m.payloads, Clock: clk, Log: m.log})
	r := &reconciler{m: m2, log: m.log}
	clk.Step(time.Minute)
	if got := m2.CleanupOrphans(context.Background(), r.confirmOrphans(map[types.UID]bool{}), clk.Now()); len(got) != 0 {
		t.Fatalf("first round released %v, want none", got)
	}
	// Next round: podsync now has the pod whose first sync reported; the other is gone.
	clk.Step(time.Minute)
	got := m2.CleanupOrphans(context.Background(), r.confirmOrphans(map[types.UID]bool{"syncing": true}), clk.Now())
	if len(got) != 1 || got[0] != "gone" {
		t.Errorf("second round released %v, want only gone", got)
	}
	if _, err := os.Stat(filepath.Join(m.podsDir, "syncing", "volumes")); err != nil {
		t.Errorf("the syncing pod's volumes were touched: %v", err)
	}
}

// A unitlet-volumes restarted more often than its reconcile period has no earlier round
// to confirm an orphan by: a pod nobody has whose volumes are older than orphanAge goes at
// the first round; one set up recently still waits for the next.
func TestOrphanOlderThanTwoPeriodsGoesAtTheFirstRound(t *testing.T) {
	m, clk := newTestManager(t, &fakePayloads{content: "x"})
	vols := []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	for _, uid := range []string{"gone-long-ago", "just-set-up"} {
		if _, err := m.Prepare(context.Background(), testPod(uid, vols, nil)); err != nil {
			t.Fatal(err)
		}
	}
	for uid, at := range map[string]time.Time{"gone-long-ago": clk.Now().Add(-3 * time.Minute), "just-set-up": clk.Now().Add(-10 * time.Second)} {
		if err := os.Chtimes(filepath.Join(m.podsDir, uid, "volumes"), at, at); err != nil {
			t.Fatal(err)
		}
	}
	// A new process: no memory of either pod.
	m2 := NewManager(ManagerOptions{PodsDir: m.podsDir, Payloads: m.payloads, Clock: clk, Log: m.log})
	r := &reconciler{m: m2, log: m.log, orphanAge: orphanAge(time.Minute)}
	got := m2.CleanupOrphans(context.Background(), r.confirmOrphans(map[types.UID]bool{}), clk.Now())
	if len(got) != 1 || got[0] != "gone-long-ago" {
		t.Errorf("first round released %v, want only gone-long-ago", got)
	}
	if _, err := os.Stat(filepath.Join(m.podsDir, "just-set-up", "volumes")); err != nil {
		t.Errorf("the recent pod's volumes were touched: %v", err)
	}
	if got := orphanAge(5 * time.Minute); got != 10*time.Minute {
		t.Errorf("orphanAge(5m) = %s, want two periods", got)
	}
}

// failingSandboxes is a runtime that does not answer: a round releases nothing.
type failingSandboxes struct{}

func (failingSandboxes) ListPodSandbox(context.Context, *runtimeapi.ListPodSandboxRequest, ...grpc.CallOption) (*runtimeapi.ListPodSandboxResponse, error) {
	return nil, grpcstatus.Error(codes.Unavailable, "no runtime")
}

// TestReconcileSkipsAPodInAnUnknownSchema: a round rewrites the configMap of the pods in
// the original schema (named or not) and leaves alone, with a warning naming it, one in a
// schema this build does not know.
func TestReconcileSkipsAPodInAnUnknownSchema(t *testing.T) {
	payloads := &fakePayloads{content: "v1"}
	m, _ := newTestManager(t, payloads)
	vols := []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{}}}}
	var listed []*podsyncv1.Pod
	for uid, schema := range map[string]string{"old": "", "current": payload.SchemaPod, "newer": "core/v2.Pod"} {
		pod := testPod(uid, vols, nil)
		if _, err := m.Prepare(context.Background(), pod); err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(pod)
		if err != nil {
			t.Fatal(err)
		}
		listed = append(listed, &podsyncv1.Pod{Uid: uid, Namespace: pod.Namespace, Name: pod.Name, Pod: b, PodSchema: schema})
	}
	payloads.content = "v2"
	var logged strings.Builder
	r := &reconciler{m: m, pods: &fakeLister{parts: [][]*podsyncv1.Pod{listed}, end: io.EOF}, sandboxes: failingSandboxes{}, log: slog.New(slog.NewTextHandler(&logged, nil))}
	r.once(context.Background())
	for uid, want := range map[string]string{"old": "v2:config", "current": "v2:config", "newer": "v1:config"} {
		files, _ := filepath.Glob(filepath.Join(m.podsDir, uid, "volumes", "*", "config", "key"))
		if len(files) != 1 {
			t.Fatalf("pod %s: configMap files %v, want one", uid, files)
		}
		if got, err := os.ReadFile(files[0]); err != nil || string(got) != want {
			t.Errorf("pod %s: configMap holds %q (%v), want %q", uid, got, err, want)
		}
	}
	for _, want := range []string{"pod=default/pod-newer", `unknown schema \"core/v2.Pod\" in pod_schema`} {
		if !strings.Contains(logged.String(), want) {
			t.Errorf("log lacks %s:\n%s", want, logged.String())
		}
	}
}
