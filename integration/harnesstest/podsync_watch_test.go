package harnesstest

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	podsyncv1 "github.com/unitlet/unitlet/proto/unitlet/podsync/v1"
	"github.com/unitlet/unitlet/shared/bus"
)

// TestPodsyncWatchPodsResumes: a watcher gets a snapshot, then the changes of a new pod
// until it runs; reconnecting with the last sequence number it saw gives only what came
// after, not a second snapshot.
func TestPodsyncWatchPodsResumes(t *testing.T) {
	t.Parallel()
	registerNode(t)
	conn, err := bus.Dial(stack.NodeSocketDir(podsyncNode), "podsync")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := podsyncv1.NewPodSyncServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	wctx, stop := context.WithCancel(ctx)
	stream, err := client.WatchPods(wctx, &podsyncv1.WatchPodsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	first, err := stream.Recv()
	if err != nil || !first.Snapshot {
		t.Fatalf("first message: %v %v, want a snapshot", first, err)
	}
	created := createPod(t, busyboxPod("watched", "while true; do sleep 1; done"))
	var last uint64
	for running := false; !running; {
		msg, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if msg.Sequence <= last && last != 0 {
			t.Errorf("sequence went from %d to %d", last, msg.Sequence)
		}
		last = msg.Sequence
		for _, p := range msg.Pods {
			running = running || p.Uid == string(created.UID) && statusOf(p).Phase == corev1.PodRunning
		}
	}
	stop()

	// Reconnect where we left off; then a change (deleting the pod) arrives as an event.
	stream, err = client.WatchPods(ctx, &podsyncv1.WatchPodsRequest{AfterSequence: last})
	if err != nil {
		t.Fatal(err)
	}
	if err := admin(t).CoreV1().Pods("default").Delete(ctx, "watched", deleteNow()); err != nil {
		t.Fatal(err)
	}
	for gone := false; !gone; {
		msg, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if msg.Snapshot {
			t.Fatalf("a resumed watch got a snapshot at %d (resumed after %d)", msg.Sequence, last)
		}
		if msg.Sequence <= last {
			t.Fatalf("a resumed watch repeated sequence %d (resumed after %d)", msg.Sequence, last)
		}
		for _, p := range msg.Pods {
			gone = gone || p.Uid == string(created.UID) && p.Removed
		}
	}
}
