package podsync

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"

	podsyncv1 "github.com/unitlet/unitlet/proto/unitlet/podsync/v1"
	"github.com/unitlet/unitlet/shared/watch"
)

func busPods(n, annotationBytes int) []*podsyncv1.Pod {
	pods := make([]*podsyncv1.Pod, n)
	for i := range pods {
		pods[i] = &podsyncv1.Pod{Uid: fmt.Sprintf("uid-%d", i), Namespace: "default", Name: fmt.Sprintf("p-%03d", i),
			Pod: []byte(strings.Repeat("x", annotationBytes))}
	}
	return pods
}

func TestSplitBoundsEachPart(t *testing.T) {
	const budget = 100 << 10
	for _, tc := range []struct {
		name      string
		pods      []*podsyncv1.Pod
		wantParts int
	}{
		{"no pods: one empty part", nil, 1},
		{"small pods: one part", busPods(10, 1<<10), 1},
		{"250 pods of 60 KiB", busPods(250, 60<<10), 250 / (budget / (60<<10 + 64))},
		{"a pod over the budget goes alone", append(busPods(1, 10), append(busPods(1, 2*budget), busPods(1, 10)...)...), 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parts := split(tc.pods, budget)
			if len(parts) != tc.wantParts {
				t.Errorf("%d parts, want %d", len(parts), tc.wantParts)
			}
			var all []*podsyncv1.Pod
			for i, part := range parts {
				size := proto.Size(&podsyncv1.WatchPodsResponse{Pods: part})
				if size > budget && len(part) > 1 {
					t.Errorf("part %d: %d pods in %d bytes, over the budget of %d", i, len(part), size, budget)
				}
				if len(tc.pods) > 0 && len(part) == 0 {
					t.Errorf("part %d is empty", i)
				}
				all = append(all, part...)
			}
			if len(all) != len(tc.pods) {
				t.Fatalf("the parts hold %d pods, want %d", len(all), len(tc.pods))
			}
			for i := range all {
				if all[i] != tc.pods[i] {
					t.Fatalf("pod %d is %s, want %s: the parts keep the order", i, all[i].Name, tc.pods[i].Name)
				}
			}
		})
	}
}

func TestWatchMessagesMarkTheSnapshotsParts(t *testing.T) {
	pods := busPods(10, 1000)
	// A change is one message, as it is.
	if ms := watchMessages(watch.Event[[]*podsyncv1.Pod]{Seq: 7, Value: pods[:1]}, 1500); len(ms) != 1 || ms[0].Snapshot || ms[0].SnapshotContinues || ms[0].Sequence != 7 {
		t.Errorf("a change: %v", ms)
	}
	// A small snapshot is the one message an old podsync sent.
	ms := watchMessages(watch.Event[[]*podsyncv1.Pod]{Seq: 7, Snapshot: true, Value: pods}, 1<<20)
	if len(ms) != 1 || !ms[0].Snapshot || ms[0].SnapshotContinues || ms[0].Sequence != 7 || len(ms[0].Pods) != 10 {
		t.Errorf("a small snapshot: %v", ms)
	}
	// A large one: the first part is the snapshot, the others are not; all continue but the
	// last, which alone carries the sequence number.
	ms = watchMessages(watch.Event[[]*podsyncv1.Pod]{Seq: 7, Snapshot: true, Value: pods}, 2500)
	if len(ms) != 5 {
		t.Fatalf("%d parts, want 5 (two pods each)", len(ms))
	}
	for i, m := range ms {
		last := i == len(ms)-1
		if m.Snapshot != (i == 0) || m.SnapshotContinues == last || (m.Sequence == 7) != last || (!last && m.Sequence != 0) {
			t.Errorf("part %d: snapshot %v, continues %v, sequence %d", i, m.Snapshot, m.SnapshotContinues, m.Sequence)
		}
	}
}

// bigNode is a podsync with n pods of annotationBytes of annotations each, served over an
// in-memory gRPC connection with gRPC's default limits.
func bigNode(t *testing.T, n, annotationBytes int) (*serviceFixture, podsyncv1.PodSyncServiceClient) {
	t.Helper()
	f := newServiceFixture(t, 0)
	var pods []*corev1.Pod
	for i := range n {
		// Bound to another node: rejected, so published at once and never run.
		p := newPod(fmt.Sprintf("big-%03d", i), int64(i))
		p.Spec.NodeName = "node2"
		p.Annotations = map[string]string{"example.com/blob": strings.Repeat("a", annotationBytes)}
		pods = append(pods, p)
	}
	f.s.SetPods("file", pods)

	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	podsyncv1.RegisterPodSyncServiceServer(srv, NewServer(f.s, nil, nil, nil))
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("passthrough:///podsync",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return f, podsyncv1.NewPodSyncServiceClient(conn)
}

// TestBigNodeOverTheBus: 250 pods with 60 KiB of annotations each (15 MiB) reach a client
// with gRPC's default 4 MiB limit through ListPodsStream and WatchPods, in messages of at
// most about 1 MiB; ListPods, unchanged for old callers, does not.
func TestBigNodeOverTheBus(t *testing.T) {
	const n = 250
	f, c := bigNode(t, n, 60<<10)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, seq := f.s.List()

	_, err := c.ListPods(ctx, &podsyncv1.ListPodsRequest{})
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("ListPods of 15 MiB: %v, want RESOURCE_EXHAUSTED at a client with the default limit", err)
	}

	ls, err := c.ListPodsStream(ctx, &podsyncv1.ListPodsStreamRequest{})
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for {
		m, err := ls.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("ListPodsStream: %v", err)
		}
		checkPartSize(t, m)
		if m.Sequence != seq {
			t.Errorf("a part carries sequence %d, want %d", m.Sequence, seq)
		}
		for _, p := range m.Pods {
			listed[p.Uid] = true
		}
	}
	if len(listed) != n {
		t.Errorf("ListPodsStream gave %d pods, want %d", len(listed), n)
	}

	// A client that knows the parts gathers one snapshot; one that predates them (taking
	// a snapshot as a replacement and any other message as changes) ends with the same
	// pods.
	ws, err := c.WatchPods(ctx, &podsyncv1.WatchPodsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var gathered []*podsyncv1.Pod
	old := map[string]bool{"stale": true}
	parts := 0
	for done := false; !done; {
		m, err := ws.Recv()
		if err != nil {
			t.Fatalf("WatchPods: %v", err)
		}
		checkPartSize(t, m)
		if (parts == 0) != m.Snapshot {
			t.Fatalf("part %d: snapshot %v", parts, m.Snapshot)
		}
		parts++
		gathered = append(gathered, m.Pods...)
		if m.Snapshot {
			clear(old)
		}
		for _, p := range m.Pods {
			old[p.Uid] = true
		}
		if done = !m.SnapshotContinues; done && m.Sequence != seq {
			t.Errorf("the snapshot's end carries sequence %d, want %d", m.Sequence, seq)
		} else if !done && m.Sequence != 0 {
			t.Errorf("part %d carries sequence %d, want 0 (not a point to resume from)", parts, m.Sequence)
		}
	}
	if len(gathered) != n || len(old) != n {
		t.Errorf("the snapshot has %d pods in %d parts, an old client holds %d; want %d", len(gathered), parts, len(old), n)
	}
	if parts < 15 {
		t.Errorf("15 MiB in %d parts, want at least 15 of at most 1 MiB", parts)
	}
	// Then changes, one pod each.
	f.s.SetPods("file", nil)
	m, err := ws.Recv()
	if err != nil || m.Snapshot || m.SnapshotContinues || len(m.Pods) != 1 || m.Sequence != seq+1 {
		t.Errorf("after the snapshot: %v %v, want one change at %d", m, err, seq+1)
	}
}

// TestSmallNodeUnchangedForOldClients: with few pods, every answer is what an older
// podsync gave: ListPods whole, a snapshot in one message with its sequence number.
func TestSmallNodeUnchangedForOldClients(t *testing.T) {
	f, c := bigNode(t, 20, 1<<10)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, seq := f.s.List()
	resp, err := c.ListPods(ctx, &podsyncv1.ListPodsRequest{})
	if err != nil || len(resp.Pods) != 20 || resp.Sequence != seq {
		t.Fatalf("ListPods: %d pods at %d, %v", len(resp.GetPods()), resp.GetSequence(), err)
	}
	ws, err := c.WatchPods(ctx, &podsyncv1.WatchPodsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := ws.Recv()
	if err != nil || !m.Snapshot || m.SnapshotContinues || len(m.Pods) != 20 || m.Sequence != seq {
		t.Errorf("first message: snapshot %v, continues %v, %d pods at %d (%v); want the whole snapshot at %d",
			m.GetSnapshot(), m.GetSnapshotContinues(), len(m.GetPods()), m.GetSequence(), err, seq)
	}
}

// checkPartSize fails when a message holding more than one pod exceeds the budget.
func checkPartSize(t *testing.T, m proto.Message) {
	t.Helper()
	if size := proto.Size(m); size > maxPartBytes+64 {
		t.Errorf("a message of %d bytes, over the budget of %d", size, maxPartBytes)
	}
}

// TestKillPodIsAnEviction: KillPod, unitlet-eviction's call, does what the kubelet's
// eviction does: a Warning event on the pod, then the pod stopped and Failed with the
// reason, the message and the condition DisruptionTarget=True, TerminationByKubelet.
func TestKillPodIsAnEviction(t *testing.T) {
	const msg = "The node was low on resource: ephemeral-storage. Threshold quantity: 1Gi, available: 10Mi. "
	f := newServiceFixture(t, 0)
	f.s.SetPods("api", []*corev1.Pod{newPod("victim", 1)})
	waitListed(t, f.s, "victim running", func(l map[string]*podsyncv1.Pod) bool { return running(t, l["victim"]) })
	srv := NewServer(f.s, nil, nil, nil)
	ctx := context.Background()

	if _, err := srv.KillPod(ctx, &podsyncv1.KillPodRequest{Uid: "uid-victim"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("KillPod without a reason: %v, want INVALID_ARGUMENT", err)
	}
	if _, err := srv.KillPod(ctx, &podsyncv1.KillPodRequest{Uid: "uid-nobody", Reason: "Evicted"}); status.Code(err) != codes.NotFound {
		t.Errorf("KillPod of an unknown pod: %v, want NOT_FOUND", err)
	}
	if _, err := srv.KillPod(ctx, &podsyncv1.KillPodRequest{Uid: "uid-victim", Reason: "Evicted", Message: msg, GracePeriodSeconds: proto.Int64(0)}); err != nil {
		t.Fatalf("KillPod: %v", err)
	}
	l := waitListed(t, f.s, "victim terminated", func(l map[string]*podsyncv1.Pod) bool { return l["victim"] != nil && l["victim"].Terminated })
	st := podStatus(t, l["victim"])
	if st.Phase != corev1.PodFailed || st.Reason != "Evicted" || st.Message != msg {
		t.Errorf("phase %s reason %q message %q, want Failed, Evicted, the message", st.Phase, st.Reason, st.Message)
	}
	found := false
	for _, c := range st.Conditions {
		if c.Type == corev1.DisruptionTarget {
			found = c.Status == corev1.ConditionTrue && c.Reason == corev1.PodReasonTerminationByKubelet && c.Message == msg
		}
	}
	if !found {
		t.Errorf("conditions %+v, want DisruptionTarget=True, TerminationByKubelet, the message", st.Conditions)
	}
	if evs := f.events.of("victim"); !slices.Contains(evs, "Warning Evicted: "+msg) {
		t.Errorf("events %q, want a Warning Evicted with the message", evs)
	}
	if got := f.cri.podsOf(); !slices.Equal(got, []string{"victim"}) {
		t.Errorf("the runtime has %v, want the evicted pod's dead containers kept", got)
	}
}
