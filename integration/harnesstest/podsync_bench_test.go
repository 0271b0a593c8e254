package harnesstest

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"
)

// BenchmarkPodStart creates 1, 30 and 100 pods at once through the API server and measures,
// per pod, the time from its create call until CRI reports its container running; then
// the time until every container is gone after the pods are deleted; at 100 pods also
// podsync's RSS and CPU while the pods run. `make bench` runs it once per size.
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
	c := admin(b)
	rt, err := stack.CRI()
	if err != nil {
		b.Fatal(err)
	}
	defer rt.Close()
	ctx := context.Background()

	created := make([]time.Time, n)
	names := make([]string, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	start := time.Now()
	for i := 0; i < n; i++ {
		names[i] = fmt.Sprintf("%s-%03d", prefix, i)
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			created[i] = time.Now()
			p := busyboxPod(names[i], "while true; do sleep 1; done")
			if _, err := c.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
				errs <- err
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}

	// Poll CRI for the containers of the pods, by the kubelet's pod name label.
	want := map[string]int{}
	for i, name := range names {
		want[name] = i
	}
	running := make([]time.Duration, n)
	seen := 0
	deadline := time.Now().Add(5 * time.Minute)
	for seen < n {
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d pods running after 5 minutes\n%s", seen, n, stack.Logs(30))
		}
		resp, err := rt.Runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING}}})
		if err != nil {
			b.Fatal(err)
		}
		now := time.Now()
		for _, ctr := range resp.Containers {
			if i, ok := want[ctr.Labels["io.kubernetes.pod.name"]]; ok && running[i] == 0 {
				running[i] = now.Sub(created[i])
				seen++
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	all := time.Since(start)
	sort.Slice(running, func(i, j int) bool { return running[i] < running[j] })
	p50, p99 := running[n/2], running[(n*99)/100]
	if n == 1 {
		p50, p99 = running[0], running[0]
	}
	b.ReportMetric(all.Seconds(), "all-running-s")
	b.ReportMetric(p50.Seconds(), "start-p50-s")
	b.ReportMetric(p99.Seconds(), "start-p99-s")

	if n >= 100 {
		rss, cpu := podsyncUsage(b, 10*time.Second)
		b.ReportMetric(rss/(1<<20), "podsync-rss-MiB")
		b.ReportMetric(cpu*100, "podsync-cpu-%")
	}

	// Delete them all (grace 0: no unitlet-status finishes graceful deletions yet) and wait
	// until the runtime has none of their containers.
	delStart := time.Now()
	for _, name := range names {
		wg.Add(1)
		go func(name string) {
			defer wg.Done()
			_ = c.CoreV1().Pods("default").Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		}(name)
	}
	wg.Wait()
	for {
		resp, err := rt.Runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
		if err != nil {
			b.Fatal(err)
		}
		left := 0
		for _, ctr := range resp.Containers {
			if strings.HasPrefix(ctr.Labels["io.kubernetes.pod.name"], prefix+"-") {
				left++
			}
		}
		if left == 0 {
			break
		}
		if time.Since(delStart) > 5*time.Minute {
			b.Fatalf("%d containers left 5 minutes after the delete", left)
		}
		time.Sleep(100 * time.Millisecond)
	}
	b.ReportMetric(time.Since(delStart).Seconds(), "all-deleted-s")
}

// podsyncUsage is podsync's resident memory (bytes) and its CPU use over window (cores).
func podsyncUsage(b *testing.B, window time.Duration) (rss, cores float64) {
	pid := podsyncPID(b)
	ticks := func() float64 {
		s, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			b.Fatal(err)
		}
		f := strings.Fields(string(s[strings.LastIndexByte(string(s), ')')+2:]))
		ut, _ := strconv.ParseFloat(f[11], 64)
		st, _ := strconv.ParseFloat(f[12], 64)
		return (ut + st) / 100 // USER_HZ
	}
	t0, c0 := time.Now(), ticks()
	time.Sleep(window)
	cores = (ticks() - c0) / time.Since(t0).Seconds()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			kb, _ := strconv.ParseFloat(strings.Fields(line)[1], 64)
			rss = kb * 1024
		}
	}
	return rss, cores
}
