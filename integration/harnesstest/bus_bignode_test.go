package harnesstest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	podsyncv1 "github.com/unitlet/unitlet/proto/unitlet/podsync/v1"
	"github.com/unitlet/unitlet/shared/bus"
)

// TestBusCarriesABigNode: 250 pods with 60 KiB of annotations each, about 15 MiB of pods,
// well over gRPC's 4 MiB default, run on the node. unitletctl pods (ListPodsStream), a
// WatchPods subscriber (the snapshot in parts) and the node API's /pods (unitlet-status
// over ListPodsStream) each see all of them; their statuses reach the API server through
// unitlet-status's watch; status and volumes restarted read every pod again (a watch
// snapshot, a reconcile list); and no log of podsync, status or volumes has a
// message-size error. The one-message ListPods, kept for older clients, is what fails
// past 4 MiB.
func TestBusCarriesABigNode(t *testing.T) {
	// Serial: 250 pods on the node; restarts unitlet-status and unitlet-volumes.
	const n = 250
	registerNode(t)
	started := time.Now()
	c := benchClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	offsets := nodeLogOffsets(t)

	const label = "unitlet-test"
	blob := strings.Repeat("0123456789abcdef", 60<<10/16)
	var pods []*corev1.Pod
	for _, name := range podNames("bignode", n) {
		// sh waits on a sleep and leaves at once on SIGTERM: no CPU while running, quick
		// to stop.
		p := busyboxPod(name, "trap 'exit 0' TERM; sleep 3600 & wait")
		p.Labels = map[string]string{label: "bignode"}
		p.Annotations = map[string]string{"unitlet.test/blob": blob}
		pods = append(pods, p)
	}
	selector := metav1.ListOptions{LabelSelector: label + "=bignode"}
	t.Cleanup(func() { deleteBigNodePods(t, selector) })
	if _, err := createAtOnce(ctx, c, pods); err != nil {
		t.Fatal(err)
	}
	t.Logf("created %d pods in %s", n, time.Since(started).Round(time.Second))

	// The statuses reach the API server: every pod Running there.
	stack.WaitFor(t, 12*time.Minute, fmt.Sprintf("%d pods Running in the API server", n), func(ctx context.Context) (bool, string) {
		list, err := c.CoreV1().Pods("default").List(ctx, selector)
		if err != nil {
			return false, err.Error()
		}
		phases := map[corev1.PodPhase]int{}
		for _, p := range list.Items {
			phases[p.Status.Phase]++
		}
		return phases[corev1.PodRunning] == n, fmt.Sprint(phases)
	})
	t.Logf("all %d Running in the API server after %s", n, time.Since(started).Round(time.Second))

	// unitletctl pods, over ListPodsStream.
	out, err := stack.Exec(podsyncNode, []string{"unitletctl", "pods", "-o", "json"}).Output()
	var rows []struct{ Name, Phase string }
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		err = fmt.Errorf("%w: %s", err, exit.Stderr)
	} else if err == nil {
		err = json.Unmarshal(out, &rows)
	}
	if err != nil {
		t.Errorf("unitletctl pods -o json: %v\n%.2000s", err, out)
	} else if got := countBigNode(len(rows), func(i int) (string, bool) { return rows[i].Name, rows[i].Phase == "Running" }); got != n {
		t.Errorf("unitletctl pods lists %d of the %d pods Running", got, n)
	}

	conn, err := bus.Dial(stack.NodeSocketDir(podsyncNode), "podsync")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := podsyncv1.NewPodSyncServiceClient(conn)

	// A WatchPods subscriber gets the snapshot in parts, each under gRPC's limit.
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	ws, err := client.WatchPods(wctx, &podsyncv1.WatchPodsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var snapshot []*podsyncv1.Pod
	parts := 0
	for more := true; more; {
		m, err := ws.Recv()
		if err != nil {
			t.Errorf("WatchPods, after %d parts: %v", parts, err)
			break
		}
		if parts == 0 && !m.Snapshot {
			t.Fatalf("WatchPods: the first message is not a snapshot")
		}
		parts++
		snapshot = append(snapshot, m.Pods...)
		more = m.SnapshotContinues
	}
	stop()
	if got := countBigNode(len(snapshot), func(i int) (string, bool) {
		return snapshot[i].Name, statusOf(snapshot[i]).Phase == corev1.PodRunning
	}); got != n {
		t.Errorf("the WatchPods snapshot has %d of the %d pods Running", got, n)
	}
	if parts < 2 {
		t.Errorf("the WatchPods snapshot of %d pods came in %d message(s), want parts", len(snapshot), parts)
	}
	t.Logf("WatchPods: a snapshot of %d pods in %d parts", len(snapshot), parts)

	// The node API's /pods: unitlet-status lists podsync's pods.
	code, body := getStatus(t, adminNodeAPIClient(t, time.Minute), nodeAPI(t)+"/pods", "")
	var list corev1.PodList
	if code != http.StatusOK || json.Unmarshal([]byte(body), &list) != nil {
		t.Errorf("GET /pods: %d %.300s", code, body)
	} else if got := countBigNode(len(list.Items), func(i int) (string, bool) {
		return list.Items[i].Name, list.Items[i].Annotations["unitlet.test/blob"] == blob
	}); got != n {
		t.Errorf("the node API's /pods has %d of the %d pods with their annotations", got, n)
	}

	// Older clients: ListPods is one message, over the default limit.
	if _, err := client.ListPods(ctx, &podsyncv1.ListPodsRequest{}); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("ListPods with %d pods of 60 KiB: %v, want RESOURCE_EXHAUSTED at a client with gRPC's default limit", n, err)
	}

	// Restarted, unitlet-status opens its watch afresh (a snapshot of every pod, in parts)
	// and unitlet-volumes reconciles at once (a list of every pod). The clean-up then
	// needs status's watch: it deletes each pod from the API once podsync reports it
	// terminated.
	for _, svc := range []string{"status", "volumes"} {
		if err := stack.StopService(podsyncNode, svc); err != nil {
			t.Fatal(err)
		}
		if err := stack.StartService(ctx, podsyncNode, svc); err != nil {
			t.Fatalf("start unitlet-%s again: %v", svc, err)
		}
	}
	waitNodeReady(t, time.Minute)
	time.Sleep(10 * time.Second)
	checkNoMessageSizeErrors(t, offsets)
	t.Logf("done in %s (without the clean-up)", time.Since(started).Round(time.Second))
}

// countBigNode counts the items named bignode-* for which ok holds.
func countBigNode(n int, item func(i int) (name string, ok bool)) int {
	count := 0
	for i := range n {
		if name, ok := item(i); ok && strings.HasPrefix(name, "bignode-") {
			count++
		}
	}
	return count
}

// deleteBigNodePods deletes the test's pods and waits until the API server has none
// (unitlet-status deletes each for good once podsync stopped it). After a failure, when
// the node may not get that far, they are deleted at once (grace period 0) and podsync
// stops them afterwards.
func deleteBigNodePods(t *testing.T, selector metav1.ListOptions) {
	c := benchClient(t)
	start := time.Now()
	opts := metav1.DeleteOptions{}
	if t.Failed() {
		opts = deleteNow()
	}
	if err := c.CoreV1().Pods("default").DeleteCollection(context.Background(), opts, selector); err != nil {
		t.Errorf("delete the pods: %v", err)
		return
	}
	stack.WaitFor(t, 10*time.Minute, "the pods gone from the API server", func(ctx context.Context) (bool, string) {
		list, err := c.CoreV1().Pods("default").List(ctx, selector)
		if err != nil {
			return false, err.Error()
		}
		return len(list.Items) == 0, fmt.Sprintf("%d left", len(list.Items))
	})
	t.Logf("deleted in %s", time.Since(start).Round(time.Second))
}

// nodeLogOffsets are the sizes of the node's logs (its machine's console, where the units
// copy their output, and its host services'), to read only what comes after.
func nodeLogOffsets(t *testing.T) map[string]int64 {
	t.Helper()
	offsets := map[string]int64{}
	root := filepath.Join(stack.Dir(), "logs")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".log") {
			return err
		}
		if rel, _ := filepath.Rel(root, path); strings.HasPrefix(rel, podsyncNode) {
			if fi, err := d.Info(); err == nil {
				offsets[path] = fi.Size()
			}
		}
		return nil
	})
	if err != nil || len(offsets) == 0 {
		t.Fatalf("the node's logs under %s: %v (found %d)", root, err, len(offsets))
	}
	return offsets
}

// messageSizeError is how gRPC reports a message over a limit, in Go's and the wire's
// spellings.
var messageSizeError = regexp.MustCompile(`(?i)ResourceExhausted|RESOURCE_EXHAUSTED|larger than max|message too large`)

// checkNoMessageSizeErrors fails on any line the node's logs gained since offsets that
// reports a message over a gRPC limit.
func checkNoMessageSizeErrors(t *testing.T, offsets map[string]int64) {
	t.Helper()
	for path, off := range offsets {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Errorf("read %s: %v", path, err)
			continue
		}
		if int64(len(b)) < off {
			off = 0
		}
		for _, line := range strings.Split(string(b[off:]), "\n") {
			if messageSizeError.MatchString(line) {
				t.Errorf("%s: %.500s", filepath.Base(path), line)
			}
		}
	}
}
