package harnesstest

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	daemonv1 "github.com/unitlet/unitlet/proto/unitlet/daemon/v1"
	"github.com/unitlet/unitlet/shared/bus"
	"github.com/unitlet/unitlet/shared/daemon"
)

// memPodCounts are the numbers of running pods at which BenchmarkMemory measures. The pods
// are added to those already running, so one count's pods are the previous count's and more.
var memPodCounts = []int{0, 30, 100, 250}

// memSettle is how long the node is left alone once the pods of a count run, before it is
// measured: long enough for a GC cycle or two and for the status writes to finish.
const memSettle = 20 * time.Second

// BenchmarkMemory measures the resident memory of unitlet's services and of the real
// kubelet on the same control plane and containerd (the stack
// integration/stacks/bench-pods.yaml, which `make bench-memory` names in UNITLET_STACK)
// at 0, 30, 100 and 250 running busybox pods: per service its RSS and its Go heap in use
// (go_memstats_heap_inuse_bytes, read over the bus with GetMetrics), then their sum, and
// the kubelet's RSS. The last line is the ratio of the sums to the kubelet's.
//
// The two agents share the stack's containerd and each stops pods it did not start, so
// they take turns, as in BenchmarkPodsVsKubelet: unitlet's counts first with the kubelet
// stopped, then the kubelet's.
func BenchmarkMemory(b *testing.B) {
	unitletNode, kubeletNode := vsNodes(b)
	if err := stack.StopNode(kubeletNode); err != nil {
		b.Fatal(err)
	}
	registerNode(b)
	var services []string
	for _, n := range stack.Stack().Nodes {
		if n.Name == unitletNode {
			services = n.Services
		}
	}
	if !slices.Contains(services, "status") {
		b.Fatalf("node %s runs %v: BenchmarkMemory needs unitlet-status to see pods running through the API", unitletNode, services)
	}

	var unitlet, kubelet []memSample
	for range b.N {
		unitlet = memRounds(b, "unitlet", unitletNode, services)
		if err := stack.StopNode(unitletNode); err != nil {
			b.Fatal(err)
		}
		if err := stack.StartNode(context.Background(), kubeletNode); err != nil {
			b.Fatal(err)
		}
		kubelet = memRounds(b, "kubelet", kubeletNode, nil)
		if err := stack.StopNode(kubeletNode); err != nil {
			b.Fatal(err)
		}
		if err := stack.StartNode(context.Background(), unitletNode); err != nil {
			b.Fatal(err)
		}
	}
	printMemory(services, unitlet, kubelet)
}

// memSample is a node agent's memory at one count of running pods.
type memSample struct {
	pods int
	// rss is by service for unitlet; the kubelet's is under "kubelet".
	rss map[string]float64
	// heap is each service's Go heap in use, by service; unitlet only.
	heap map[string]float64
}

func (s memSample) total() float64 {
	var sum float64
	for _, v := range s.rss {
		sum += v
	}
	return sum
}

// memRounds runs memPodCounts' pods on node one count after the other, measuring the agent
// after each, then deletes them all and waits until they are gone.
func memRounds(b *testing.B, agent, node string, services []string) []memSample {
	b.Helper()
	ctx := context.Background()
	c, w := benchWatch(b, node)
	var all []string
	var out []memSample
	for _, n := range memPodCounts {
		names := podNames("mem-"+agent, n)[len(all):]
		pods := make([]*corev1.Pod, len(names))
		for i, name := range names {
			pods[i] = vsPod(node, name)
		}
		if _, err := createAtOnce(ctx, c, pods); err != nil {
			b.Fatal(err)
		}
		all = append(all, names...)
		if _, err := w.waitRunning(all, 15*time.Minute); err != nil {
			b.Fatalf("%s, %d pods: %v\n%s", agent, n, err, stack.Logs(30))
		}
		time.Sleep(memSettle)
		s := memSample{pods: n, rss: map[string]float64{}, heap: map[string]float64{}}
		if services == nil {
			u, err := readProcUsage(stack.NodeAgentPIDs(node))
			if err != nil {
				b.Fatalf("%s on %s: %v", agent, node, err)
			}
			s.rss[agent] = u.rssBytes
		}
		for _, svc := range services {
			pid, err := stack.ServicePID(node, svc)
			if err != nil {
				b.Fatal(err)
			}
			u, err := readProcUsage([]int{pid})
			if err != nil {
				b.Fatalf("unitlet-%s: %v", svc, err)
			}
			s.rss[svc] = u.rssBytes
			if s.heap[svc], err = heapInuse(ctx, node, svc); err != nil {
				b.Fatal(err)
			}
		}
		fmt.Printf("%s, %d pods: RSS %.1f MiB\n", agent, n, s.total()/(1<<20))
		out = append(out, s)
	}
	if err := deleteAtOnce(ctx, c, all, metav1.DeleteOptions{}); err != nil {
		b.Fatal(err)
	}
	if _, err := w.waitGone(all, 15*time.Minute); err != nil {
		b.Fatalf("%s, deleting %d pods: %v\n%s", agent, len(all), err, stack.Logs(30))
	}
	return out
}

// benchWatch is an admin client without rate limit (benchClient) and a podWatch of node's
// pods, stopped when the benchmark ends.
func benchWatch(b *testing.B, node string) (kubernetes.Interface, *podWatch) {
	b.Helper()
	c := benchClient(b)
	w, err := watchNodePods(context.Background(), c, node)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(w.Stop)
	return c, w
}

// heapInuse is go_memstats_heap_inuse_bytes of a unitlet service, from its own registry
// over the bus.
func heapInuse(ctx context.Context, node, svc string) (float64, error) {
	conn, err := bus.Dial(stack.NodeSocketDir(node), svc)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := daemonv1.NewDaemonServiceClient(conn).GetMetrics(ctx, &daemonv1.GetMetricsRequest{})
	if err != nil {
		return 0, fmt.Errorf("unitlet-%s GetMetrics: %w", svc, err)
	}
	fams, err := daemon.DecodeMetricFamilies(resp.GetMetricFamilies())
	if err != nil {
		return 0, fmt.Errorf("unitlet-%s: %w", svc, err)
	}
	for _, f := range fams {
		if f.GetName() == "go_memstats_heap_inuse_bytes" && len(f.GetMetric()) == 1 {
			return f.GetMetric()[0].GetGauge().GetValue(), nil
		}
	}
	return 0, fmt.Errorf("unitlet-%s exports no go_memstats_heap_inuse_bytes", svc)
}

// printMemory writes the table, then the ratios line last.
func printMemory(services []string, unitlet, kubelet []memSample) {
	mib := func(v float64) string { return fmt.Sprintf("%.1f", v/(1<<20)) }
	fmt.Println()
	fmt.Println("== memory: RSS MiB (Go heap in use MiB) per unitlet service, their sum, and the kubelet's RSS")
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	head := append(append([]string{"pods"}, services...), "unitlet sum", "heap sum", "kubelet", "ratio")
	fmt.Fprintln(tw, strings.Join(head, "\t")+"\t")
	var ratios []string
	for i, u := range unitlet {
		row := []string{fmt.Sprint(u.pods)}
		var heap float64
		for _, svc := range services {
			row = append(row, fmt.Sprintf("%s (%s)", mib(u.rss[svc]), mib(u.heap[svc])))
			heap += u.heap[svc]
		}
		k, ratio := "n/a", "n/a"
		if i < len(kubelet) && kubelet[i].total() > 0 {
			k = mib(kubelet[i].total())
			ratio = fmt.Sprintf("%.2f", u.total()/kubelet[i].total())
		}
		row = append(row, mib(u.total()), mib(heap), k, ratio)
		fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
		ratios = append(ratios, fmt.Sprintf("%d=%s", u.pods, ratio))
	}
	tw.Flush()
	fmt.Printf("rss ratio unitlet/kubelet: %s\n", strings.Join(ratios, " "))
}
