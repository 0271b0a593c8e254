package harnesstest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/unitlet/unitlet/integration/harness"
)

// What the pod benchmarks (BenchmarkPodStart, BenchmarkPodsVsKubelet) share: creating and
// deleting many pods at once, seeing them run and go through CRI or through a watch on the
// API server, percentiles, and the CPU and memory of processes.

// benchClient is an admin client without client-go's default rate limit (5 requests a
// second, bursts of 10), which would hold back the create calls of a round by seconds and
// count the wait as the node's.
func benchClient(tb testing.TB) kubernetes.Interface {
	tb.Helper()
	cfg, err := harness.RESTConfig(stack.AdminKubeconfig())
	if err != nil {
		tb.Fatal(err)
	}
	cfg.QPS, cfg.Burst = 1000, 1000
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// podNames are the pods of one benchmark round: <prefix>-000, <prefix>-001, ...
func podNames(prefix string, n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%03d", prefix, i)
	}
	return names
}

// createAtOnce creates the pods concurrently and returns when each create call began, by
// pod name.
func createAtOnce(ctx context.Context, c kubernetes.Interface, pods []*corev1.Pod) (map[string]time.Time, error) {
	var mu sync.Mutex
	created := make(map[string]time.Time, len(pods))
	var wg sync.WaitGroup
	errs := make(chan error, len(pods))
	for _, p := range pods {
		wg.Go(func() {
			start := time.Now()
			mu.Lock()
			created[p.Name] = start
			mu.Unlock()
			if _, err := c.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
				errs <- fmt.Errorf("create pod %s: %w", p.Name, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	return created, errors.Join(all...)
}

// deleteAtOnce deletes the pods of namespace default concurrently.
func deleteAtOnce(ctx context.Context, c kubernetes.Interface, names []string, opts metav1.DeleteOptions) error {
	var wg sync.WaitGroup
	errs := make(chan error, len(names))
	for _, name := range names {
		wg.Go(func() {
			if err := c.CoreV1().Pods("default").Delete(ctx, name, opts); err != nil {
				errs <- fmt.Errorf("delete pod %s: %w", name, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	return errors.Join(all...)
}

// runningByCRI polls the runtime (every 50 ms) until each named pod has a running
// container, by the kubelet's pod name label, and returns when each was first seen so.
func runningByCRI(ctx context.Context, rt *harness.CRIClient, names []string, within time.Duration) (map[string]time.Time, error) {
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	running := map[string]time.Time{}
	deadline := time.Now().Add(within)
	for len(running) < len(names) {
		if time.Now().After(deadline) {
			return running, fmt.Errorf("%d of %d pods running after %s (CRI)", len(running), len(names), within)
		}
		resp, err := rt.Runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING}}})
		if err != nil {
			return running, fmt.Errorf("list containers: %w", err)
		}
		now := time.Now()
		for _, ctr := range resp.Containers {
			if name := ctr.Labels["io.kubernetes.pod.name"]; want[name] {
				if _, seen := running[name]; !seen {
					running[name] = now
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return running, nil
}

// goneFromCRI polls the runtime (every 100 ms) until it has no pod sandbox and no container
// of a pod whose name starts with prefix, and returns when.
func goneFromCRI(ctx context.Context, rt *harness.CRIClient, prefix string, within time.Duration) (time.Time, error) {
	deadline := time.Now().Add(within)
	for {
		sandboxes, err := rt.Runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
		if err != nil {
			return time.Time{}, fmt.Errorf("list pod sandboxes: %w", err)
		}
		containers, err := rt.Runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
		if err != nil {
			return time.Time{}, fmt.Errorf("list containers: %w", err)
		}
		now, left := time.Now(), 0
		for _, s := range sandboxes.Items {
			if strings.HasPrefix(s.GetMetadata().GetName(), prefix+"-") {
				left++
			}
		}
		for _, ctr := range containers.Containers {
			if strings.HasPrefix(ctr.Labels["io.kubernetes.pod.name"], prefix+"-") {
				left++
			}
		}
		if left == 0 {
			return now, nil
		}
		if now.After(deadline) {
			return time.Time{}, fmt.Errorf("%d pod sandboxes and containers of %s-* left after %s", left, prefix, within)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// podWatch watches the pods of namespace default bound to one node on the API server and
// records when each first had all its containers running, and when it was gone.
type podWatch struct {
	mu      sync.Mutex
	running map[string]time.Time
	gone    map[string]time.Time
	store   cache.Store
	stop    context.CancelFunc
}

// watchNodePods starts a podWatch and returns once it has listed the node's pods.
func watchNodePods(ctx context.Context, c kubernetes.Interface, node string) (*podWatch, error) {
	w := &podWatch{running: map[string]time.Time{}, gone: map[string]time.Time{}}
	lw := cache.NewListWatchFromClient(c.CoreV1().RESTClient(), "pods", "default", fields.OneTermEqualSelector("spec.nodeName", node))
	inf := cache.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, cache.Indexers{})
	seen := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok || !allRunning(p) {
			return
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		if _, ok := w.running[p.Name]; !ok {
			w.running[p.Name] = time.Now()
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    seen,
		UpdateFunc: func(_, obj any) { seen(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if p, ok := obj.(*corev1.Pod); ok {
				w.mu.Lock()
				w.gone[p.Name] = time.Now()
				w.mu.Unlock()
			}
		},
	}); err != nil {
		return nil, err
	}
	ctx, w.stop = context.WithCancel(ctx)
	go inf.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		w.stop()
		return nil, fmt.Errorf("watch the pods of node %s: no first list", node)
	}
	w.store = inf.GetStore()
	return w, nil
}

// Stop ends the watch.
func (w *podWatch) Stop() { w.stop() }

// allRunning: the pod's status has every container of its spec running.
func allRunning(p *corev1.Pod) bool {
	if len(p.Status.ContainerStatuses) < len(p.Spec.Containers) {
		return false
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Running == nil {
			return false
		}
	}
	return true
}

// waitRunning waits until every named pod was seen with all containers running, and
// returns when each was first seen so.
func (w *podWatch) waitRunning(names []string, within time.Duration) (map[string]time.Time, error) {
	return w.wait(names, within, w.running, "running (API)")
}

// waitGone waits until every named pod was deleted from the API, and returns when each
// went.
func (w *podWatch) waitGone(names []string, within time.Duration) (map[string]time.Time, error) {
	return w.wait(names, within, w.gone, "gone from the API")
}

func (w *podWatch) wait(names []string, within time.Duration, seen map[string]time.Time, what string) (map[string]time.Time, error) {
	deadline := time.Now().Add(within)
	for {
		w.mu.Lock()
		out := map[string]time.Time{}
		for _, n := range names {
			if t, ok := seen[n]; ok {
				out[n] = t
			}
		}
		w.mu.Unlock()
		if len(out) == len(names) {
			return out, nil
		}
		if time.Now().After(deadline) {
			return out, fmt.Errorf("%d of %d pods %s after %s", len(out), len(names), what, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// latencies are per-pod durations, sorted.
type latencies []time.Duration

// since is, for each pod in to, to[pod] - from[pod], sorted.
func since(from, to map[string]time.Time) latencies {
	var l latencies
	for name, t := range to {
		l = append(l, t.Sub(from[name]))
	}
	sort.Slice(l, func(i, j int) bool { return l[i] < l[j] })
	return l
}

// percentile is the nearest-rank percentile p (0 < p <= 100): the smallest value with at
// least p% of the values at or below it.
func (l latencies) percentile(p float64) time.Duration {
	if len(l) == 0 {
		return 0
	}
	i := int(math.Ceil(p/100*float64(len(l)))) - 1
	return l[max(0, min(i, len(l)-1))]
}

func (l latencies) mean() time.Duration {
	if len(l) == 0 {
		return 0
	}
	var sum time.Duration
	for _, d := range l {
		sum += d
	}
	return sum / time.Duration(len(l))
}

func (l latencies) max() time.Duration {
	if len(l) == 0 {
		return 0
	}
	return l[len(l)-1]
}

// latest is the latest of the times.
func latest(ts map[string]time.Time) time.Time {
	var out time.Time
	for _, t := range ts {
		if t.After(out) {
			out = t
		}
	}
	return out
}

// procUsage is what processes have used: their resident memory now and their CPU time
// (user and system) since they started.
type procUsage struct {
	rssBytes   float64
	cpuSeconds float64
}

// readProcUsage sums the usage of pids from /proc (VmRSS of status, utime+stime of stat).
func readProcUsage(pids []int) (procUsage, error) {
	var u procUsage
	if len(pids) == 0 {
		return u, errors.New("no processes to measure")
	}
	for _, pid := range pids {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return u, err
		}
		// The fields after the command name, which is in parentheses and may hold spaces:
		// state is the first, utime the 12th, stime the 13th.
		f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+2:]))
		ut, _ := strconv.ParseFloat(f[11], 64)
		st, _ := strconv.ParseFloat(f[12], 64)
		u.cpuSeconds += (ut + st) / 100 // USER_HZ
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			return u, err
		}
		for _, line := range strings.Split(string(status), "\n") {
			if strings.HasPrefix(line, "VmRSS:") {
				kb, _ := strconv.ParseFloat(strings.Fields(line)[1], 64)
				u.rssBytes += kb * 1024
			}
		}
	}
	return u, nil
}

// usageOver is the processes' resident memory at the end of window and the share of a
// core they used during it.
func usageOver(pids []int, window time.Duration) (rssBytes, cores float64, err error) {
	t0 := time.Now()
	u0, err := readProcUsage(pids)
	if err != nil {
		return 0, 0, err
	}
	time.Sleep(window)
	u1, err := readProcUsage(pids)
	if err != nil {
		return 0, 0, err
	}
	return u1.rssBytes, (u1.cpuSeconds - u0.cpuSeconds) / time.Since(t0).Seconds(), nil
}
