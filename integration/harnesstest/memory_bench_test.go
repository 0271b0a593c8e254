package harnesstest

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
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
// the kubelet's RSS; then what each RSS is made of. Before each measure the agent's
// /metrics is scraped through the API server, as a cluster's Prometheus would. The last
// line is the ratio of the sums to the kubelet's.
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

// memSample is a node agent's memory at one count of running pods: by unitlet service,
// or the kubelet's under "kubelet".
type memSample struct {
	pods  int
	procs map[string]memUse
}

// memUse is one process's memory: what /proc/<pid>/status says it has resident, and for
// a unitlet service, what its Go runtime says of it.
type memUse struct {
	// rss is VmRSS: file, the binary's pages mapped in (RssFile), and the rest, anonymous.
	rss, file float64
	// heap is the Go heap in use (go_memstats_heap_inuse_bytes); heapFree the heap's
	// free spans not yet given back to the kernel (heap_idle - heap_released); stacks the
	// goroutine stacks (go_memstats_stack_inuse_bytes).
	heap, heapFree, stacks float64
}

func (s memSample) total() (sum memUse) {
	for _, u := range s.procs {
		sum.rss += u.rss
		sum.file += u.file
		sum.heap += u.heap
		sum.heapFree += u.heapFree
		sum.stacks += u.stacks
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
		_, err := w.waitRunning(all, 15*time.Minute)
		if err != nil {
			b.Fatalf("%s, %d pods: %v\n%s", agent, n, err, stack.Logs(30))
		}
		time.Sleep(memSettle)
		// As Prometheus would, before each measure: a node's scraped /metrics is part of
		// what it runs, and so the agents are measured alike (unitlet-status gathers every
		// service's registry over the bus, as goMemory below does).
		if err := c.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes/" + node + "/proxy/metrics").Do(ctx).Error(); err != nil {
			b.Fatalf("%s, %d pods: scrape /metrics: %v", agent, n, err)
		}
		s := memSample{pods: n, procs: map[string]memUse{}}
		if services == nil {
			pids := stack.NodeAgentPIDs(node)
			if len(pids) != 1 {
				b.Fatalf("%s on %s: processes %v, want one", agent, node, pids)
			}
			if s.procs[agent], err = procMemory(pids[0]); err != nil {
				b.Fatalf("%s on %s: %v", agent, node, err)
			}
		}
		for _, svc := range services {
			pid, err := stack.ServicePID(node, svc)
			if err != nil {
				b.Fatal(err)
			}
			var u memUse
			if err := goMemory(ctx, node, svc, &u); err != nil {
				b.Fatal(err)
			}
			m, err := procMemory(pid)
			if err != nil {
				b.Fatalf("unitlet-%s: %v", svc, err)
			}
			u.rss, u.file = m.rss, m.file
			s.procs[svc] = u
		}
		fmt.Printf("%s, %d pods: RSS %.1f MiB\n", agent, n, s.total().rss/(1<<20))
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

// procMemory reads VmRSS and RssFile of a process from /proc/<pid>/status.
func procMemory(pid int) (memUse, error) {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return memUse{}, err
	}
	var u memUse
	for _, line := range strings.Split(string(status), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "VmRSS:":
			u.rss = kb * 1024
		case "RssFile:":
			u.file = kb * 1024
		}
	}
	return u, nil
}

// goMemory fills in the Go runtime's figures of a unitlet service, from its own registry
// over the bus (GetMetrics).
func goMemory(ctx context.Context, node, svc string, u *memUse) error {
	conn, err := bus.Dial(stack.NodeSocketDir(node), svc)
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := daemonv1.NewDaemonServiceClient(conn).GetMetrics(ctx, &daemonv1.GetMetricsRequest{})
	if err != nil {
		return fmt.Errorf("unitlet-%s GetMetrics: %w", svc, err)
	}
	fams, err := daemon.DecodeMetrics(resp)
	if err != nil {
		return fmt.Errorf("unitlet-%s: %w", svc, err)
	}
	gauge := map[string]float64{}
	for _, f := range fams {
		if strings.HasPrefix(f.GetName(), "go_memstats_") && len(f.GetMetric()) == 1 {
			gauge[f.GetName()] = f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	for _, name := range []string{"heap_inuse", "heap_idle", "heap_released", "stack_inuse"} {
		if _, ok := gauge["go_memstats_"+name+"_bytes"]; !ok {
			return fmt.Errorf("unitlet-%s exports no go_memstats_%s_bytes", svc, name)
		}
	}
	u.heap = gauge["go_memstats_heap_inuse_bytes"]
	u.heapFree = gauge["go_memstats_heap_idle_bytes"] - gauge["go_memstats_heap_released_bytes"]
	u.stacks = gauge["go_memstats_stack_inuse_bytes"]
	return nil
}

// printMemory writes the table, then what the RSS is made of, then the ratios line last.
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
		for _, svc := range services {
			row = append(row, fmt.Sprintf("%s (%s)", mib(u.procs[svc].rss), mib(u.procs[svc].heap)))
		}
		k, ratio := "n/a", "n/a"
		if i < len(kubelet) && kubelet[i].total().rss > 0 {
			k = mib(kubelet[i].total().rss)
			ratio = fmt.Sprintf("%.2f", u.total().rss/kubelet[i].total().rss)
		}
		row = append(row, mib(u.total().rss), mib(u.total().heap), k, ratio)
		fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
		ratios = append(ratios, fmt.Sprintf("%d=%s", u.pods, ratio))
	}
	tw.Flush()

	fmt.Println()
	fmt.Println("== what the RSS is: MiB of the binary's pages (file), Go heap in use, free heap not yet returned, goroutine stacks, the rest (runtime, C, unaccounted)")
	tw = tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "pods\tprocess\tRSS\tfile\theap\tfree heap\tstacks\trest\t")
	for i, u := range unitlet {
		line := func(name string, m memUse) {
			rest := m.rss - m.file - m.heap - m.heapFree - m.stacks
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", u.pods, name, mib(m.rss), mib(m.file), mib(m.heap), mib(m.heapFree), mib(m.stacks), mib(rest))
		}
		for _, svc := range services {
			line(svc, u.procs[svc])
		}
		line("unitlet sum", u.total())
		if i < len(kubelet) {
			k := kubelet[i].total()
			fmt.Fprintf(tw, "%d\tkubelet\t%s\t%s\t\t\t\t\t\n", u.pods, mib(k.rss), mib(k.file))
		}
	}
	tw.Flush()
	// The binaries' pages are the page cache's, reclaimable; the rest is the processes' own.
	var anon []string
	for i, u := range unitlet {
		if i < len(kubelet) {
			k := kubelet[i].total()
			anon = append(anon, fmt.Sprintf("%d=%.2f", u.pods, (u.total().rss-u.total().file)/(k.rss-k.file)))
		}
	}
	fmt.Printf("anonymous (RSS less file pages) ratio unitlet/kubelet: %s\n", strings.Join(anon, " "))
	fmt.Printf("rss ratio unitlet/kubelet: %s\n", strings.Join(ratios, " "))
}
