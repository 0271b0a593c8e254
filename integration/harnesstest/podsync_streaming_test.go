package harnesstest

import (
	"bytes"
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"

	podsyncv1 "github.com/unitlet/unitlet/proto/unitlet/podsync/v1"
	"github.com/unitlet/unitlet/shared/bus"
)

// TestPodsyncStreamingExec gets an exec URL over the bus and runs a command through the
// runtime's streaming server, as the node API's /exec will.
func TestPodsyncStreamingExec(t *testing.T) {
	t.Parallel()
	p := createPod(t, busyboxPod("exec-target", "while true; do sleep 1; done"))
	waitPod(t, time.Minute, "default/exec-target", "running", func(_ *podsyncv1.Pod, st corev1.PodStatus) bool { return st.Phase == corev1.PodRunning })
	conn, err := bus.Dial(stack.NodeSocketDir(podsyncNode), "podsync")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := podsyncv1.NewPodSyncServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := client.GetStreamingURL(ctx, &podsyncv1.GetStreamingURLRequest{
		PodUid: string(p.UID), Container: "main", Kind: podsyncv1.StreamKind_STREAM_KIND_EXEC,
		Command: []string{"sh", "-c", "echo hello from $(hostname)"}, Stdout: true, Stderr: true,
	})
	if err != nil {
		t.Fatalf("GetStreamingURL: %v", err)
	}
	u, err := url.Parse(resp.GetUrl())
	if err != nil {
		t.Fatal(err)
	}
	exec, err := remotecommand.NewSPDYExecutor(&rest.Config{}, "POST", u)
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if err := exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr}); err != nil {
		t.Fatalf("exec through %s: %v (stderr %q)", u, err, stderr.String())
	}
	if got := strings.TrimSpace(stdout.String()); got != "hello from exec-target" {
		t.Errorf("exec output %q, want %q", got, "hello from exec-target")
	}
	// A container that does not exist is refused with a clear error.
	if _, err := client.GetStreamingURL(ctx, &podsyncv1.GetStreamingURLRequest{PodUid: string(p.UID), Container: "nope", Kind: podsyncv1.StreamKind_STREAM_KIND_EXEC, Command: []string{"true"}}); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("exec in a missing container: %v, want an error naming it", err)
	}
}
