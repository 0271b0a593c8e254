package harnesstest

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// BenchmarkPodStart creates 1, 30 and 100 pods at once through the API server and measures,
// per pod, the time from its create call until CRI reports its container running; then
// the time until every sandbox and container is gone after the pods are deleted; at 100
// pods also podsync's RSS and CPU while the pods run. `make bench` runs it once per size.
// The measuring helpers are in podbench_test.go.
func BenchmarkPodStart(b *testing.B) {
	for _, n := range []int{1, 30, 100} {
		b.Run(fmt.Sprintf("pods=%d", n), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				benchPodStart(b, n, fmt.Sprintf("bench-%d-%d", n, i))
			}
		})
	}
}

func benchPodStart(b *testing.B, n int, prefix string) {
	registerNode(b)
	c := benchClient(b)
	rt, err := stack.CRI()
	if err != nil {
		b.Fatal(err)
	}
	defer rt.Close()
	ctx := context.Background()

	names := podNames(prefix, n)
	pods := make([]*corev1.Pod, n)
	for i, name := range names {
		pods[i] = busyboxPod(name, "while true; do sleep 1; done")
	}
	start := time.Now()
	created, err := createAtOnce(ctx, c, pods)
	if err != nil {
		b.Fatal(err)
	}
	running, err := runningByCRI(ctx, rt, names, 5*time.Minute)
	if err != nil {
		b.Fatalf("%v\n%s", err, stack.Logs(30))
	}
	start2run := since(created, running)
	b.ReportMetric(latest(running).Sub(start).Seconds(), "all-running-s")
	b.ReportMetric(start2run.percentile(50).Seconds(), "start-p50-s")
	b.ReportMetric(start2run.percentile(99).Seconds(), "start-p99-s")

	if n >= 100 {
		rss, cores, err := usageOver([]int{podsyncPID(b)}, 10*time.Second)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(rss/(1<<20), "podsync-rss-MiB")
		b.ReportMetric(cores*100, "podsync-cpu-%")
	}

	// Delete them all (grace 0: no unitlet-status finishes graceful deletions yet) and wait
	// until the runtime has none of their sandboxes and containers.
	delStart := time.Now()
	if err := deleteAtOnce(ctx, c, names, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		b.Fatal(err)
	}
	gone, err := goneFromCRI(ctx, rt, prefix, 5*time.Minute)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(gone.Sub(delStart).Seconds(), "all-deleted-s")
}
