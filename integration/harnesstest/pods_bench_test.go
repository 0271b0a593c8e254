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
	"k8s.io/utils/ptr"

	"github.com/unitlet/unitlet/integration/harness"
)

// automountToken is the pods' automountServiceAccountToken: both sides mount the default
// service-account token volume (kube-api-access-*), as the issue asks; unitlet through
// unitlet-volumes.
const automountToken = true

// vsPodCounts are the sizes of the rounds: that many pods created at once.
var vsPodCounts = []int{1, 30, 100}

// BenchmarkPodsVsKubelet measures unitlet and the real kubelet side by side on the same
// control plane and containerd (the stack integration/stacks/bench-pods.yaml, which
// `make bench-pods` names in UNITLET_STACK): for 1, 30 and 100 busybox pods created at
// once, per pod the time from its create call until all its containers run (p50, p99,
// max), then the time from the delete calls until all are gone; at 100 pods the memory
// and CPU of the node agent (all unitlet services; the kubelet). It prints a table and,
// last, the ratios unitlet/kubelet.
//
// The two agents share the stack's containerd and each stops pods it did not start, so
// they take turns: unitlet's rounds first with the kubelet stopped, then the kubelet's.
//
// "Running" is what a watch on the API server sees in the pods' status (source=api). Until
// the unitlet node runs unitlet-status, nothing writes its pods' status to the API, and
// unitlet's rounds read running containers from CRI instead (source=cri), as
// BenchmarkPodStart does.
func BenchmarkPodsVsKubelet(b *testing.B) {
	unitletNode, kubeletNode := vsNodes(b)
	// `up` started both; only one agent may run while there are pods.
	if err := stack.StopNode(kubeletNode); err != nil {
		b.Fatal(err)
	}
	registerNode(b) // as unitlet-status will; the kubelet registers its own
	unitlet := vsSide{agent: "unitlet", node: unitletNode, source: "cri"}
	for _, n := range stack.Stack().Nodes {
		if n.Name == unitletNode {
			unitlet.services = n.Services
			if slices.Contains(n.Services, "status") {
				unitlet.source = "api"
			}
		}
	}
	kubelet := vsSide{agent: "kubelet", node: kubeletNode, source: "api"}

	var results []vsResult
	for range b.N {
		for _, n := range vsPodCounts {
			results = append(results, vsRound(b, unitlet, n))
		}
		if err := stack.StopNode(unitletNode); err != nil {
			b.Fatal(err)
		}
		if err := stack.StartNode(context.Background(), kubeletNode); err != nil {
			b.Fatal(err)
		}
		for _, n := range vsPodCounts {
			results = append(results, vsRound(b, kubelet, n))
		}
		// The kubelet's wrapper puts the host back as it stops.
		if err := stack.StopNode(kubeletNode); err != nil {
			b.Fatal(err)
		}
	}
	printVs(results)
}

// vsNodes are the stack's unitlet node (podsyncNode, running podsync as host processes) and
// its kubelet node.
func vsNodes(b *testing.B) (unitletNode, kubeletNode string) {
	for _, n := range stack.Stack().Nodes {
		switch {
		case n.Backend == "kubelet":
			kubeletNode = n.Name
		case n.Name == podsyncNode && n.Backend == "process" && slices.Contains(n.Services, "podsync"):
			unitletNode = n.Name
		}
	}
	if unitletNode == "" || kubeletNode == "" {
		b.Fatalf("stack %s: want a process node %s running podsync and a kubelet node (UNITLET_STACK=integration/stacks/bench-pods.yaml)", stack.Stack().Name, podsyncNode)
	}
	return unitletNode, kubeletNode
}

// vsSide is one agent's node and where its pods are seen running.
type vsSide struct {
	agent, node string
	// source is "api" (a watch on the pods' status) or "cri" (the runtime's containers).
	source string
	// services are the unitlet services of the node, measured one by one at 100 pods.
	services []string
}

// vsResult is one round's figures.
type vsResult struct {
	side vsSide
	pods int
	// start is per pod, create call → all containers running.
	start latencies
	// allRunning is the first create call → the last pod running; deleted the delete calls
	// → all gone.
	allRunning, deleted time.Duration
	// deleteSource says what "gone" meant: "api" (objects deleted), "cri" (no sandboxes
	// and containers in the runtime), "api+cri".
	deleteSource string
	// At 100 pods: the agent's resident memory with the pods running, its CPU time over
	// the round (create → gone), and its share of a core over 10 s with the pods running.
	rssBytes, cpuSeconds, steadyCores float64
}

func vsPod(node, name string) *corev1.Pod {
	// `sleep 3600` that ends on SIGTERM: as PID 1 it would ignore the signal and every
	// delete would last the grace period, measuring the grace instead of the agent.
	p := busyboxPod(name, "trap 'exit 0' TERM; sleep 3600 & wait")
	p.Spec.NodeName = node
	p.Spec.AutomountServiceAccountToken = ptr.To(automountToken)
	return p
}

// vsRound creates n pods at once on side's node, waits until they run, measures, deletes
// them and waits until they are gone.
func vsRound(b *testing.B, side vsSide, n int) vsResult {
	b.Helper()
	ctx := context.Background()
	c := benchClient(b)
	rt, err := stack.CRI()
	if err != nil {
		b.Fatal(err)
	}
	defer rt.Close()
	w, err := watchNodePods(ctx, c, side.node)
	if err != nil {
		b.Fatal(err)
	}
	defer w.Stop()
	pids := stack.NodeAgentPIDs(side.node)
	before, err := readProcUsage(pids)
	if err != nil {
		b.Fatalf("%s on %s: %v", side.agent, side.node, err)
	}

	prefix := fmt.Sprintf("vs-%s-%d", side.agent, n)
	names := podNames(prefix, n)
	pods := make([]*corev1.Pod, n)
	for i, name := range names {
		pods[i] = vsPod(side.node, name)
	}
	first := time.Now()
	created, err := createAtOnce(ctx, c, pods)
	if err != nil {
		b.Fatal(err)
	}
	var running map[string]time.Time
	if side.source == "api" {
		running, err = w.waitRunning(names, 10*time.Minute)
	} else {
		running, err = runningByCRI(ctx, rt, names, 10*time.Minute)
	}
	if err != nil {
		b.Fatalf("%s, %d pods: %v\n%s", side.agent, n, err, stack.Logs(30))
	}
	r := vsResult{side: side, pods: n, start: since(created, running), allRunning: latest(running).Sub(first)}
	if n >= 100 {
		perService := map[string]procUsage{}
		for _, svc := range side.services {
			if pid, err := stack.ServicePID(side.node, svc); err == nil {
				perService[svc], _ = readProcUsage([]int{pid})
			}
		}
		t0 := time.Now()
		if r.rssBytes, r.steadyCores, err = usageOver(pids, 10*time.Second); err != nil {
			b.Fatal(err)
		}
		for _, svc := range side.services {
			pid, err := stack.ServicePID(side.node, svc)
			if err != nil {
				continue
			}
			u1, err := readProcUsage([]int{pid})
			if err != nil {
				continue
			}
			fmt.Printf("%s, %d pods: unitlet-%s RSS %.1f MiB, CPU %.2f%% of a core (10 s, running)\n",
				side.agent, n, svc, u1.rssBytes/(1<<20), 100*(u1.cpuSeconds-perService[svc].cpuSeconds)/time.Since(t0).Seconds())
		}
	}

	// The kubelet, and unitlet with unitlet-status, finish graceful deletions: the API
	// objects go once the containers are stopped. Without unitlet-status nothing would
	// remove them, so unitlet's pods are deleted at once (grace 0) and "gone" is the
	// runtime's view.
	opts := metav1.DeleteOptions{}
	if side.agent == "unitlet" && side.source == "cri" {
		opts.GracePeriodSeconds = ptr.To[int64](0)
	}
	delStart := time.Now()
	if err := deleteAtOnce(ctx, c, names, opts); err != nil {
		b.Fatal(err)
	}
	var gone time.Time
	var sources []string
	if side.source == "api" {
		apiGone, err := w.waitGone(names, 10*time.Minute)
		if err != nil {
			b.Fatalf("%s, %d pods: %v\n%s", side.agent, n, err, stack.Logs(30))
		}
		gone, sources = latest(apiGone), append(sources, "api")
	}
	if side.agent == "unitlet" {
		criGone, err := goneFromCRI(ctx, rt, prefix, 10*time.Minute)
		if err != nil {
			b.Fatalf("%s, %d pods: %v\n%s", side.agent, n, err, stack.Logs(30))
		}
		if criGone.After(gone) {
			gone = criGone
		}
		sources = append(sources, "cri")
	}
	r.deleted, r.deleteSource = gone.Sub(delStart), strings.Join(sources, "+")
	after, err := readProcUsage(pids)
	if err != nil {
		b.Fatalf("%s on %s after the round: %v", side.agent, side.node, err)
	}
	r.cpuSeconds = after.cpuSeconds - before.cpuSeconds
	return r
}

// printVs writes the table, then the ratios line last.
func printVs(results []vsResult) {
	fmt.Println()
	fmt.Printf("== pods vs kubelet %s: create → all containers running (per pod), delete → all gone\n", harness.KubernetesVersion)
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "agent\tpods\tsource\tstart p50 s\tp99 s\tmax s\tall running s\tdeleted s\tgone by\tRSS MiB\tCPU s (round)\tCPU % (10 s, running)\t")
	for _, r := range results {
		rss, cpu, steady := "", "", ""
		if r.pods >= 100 {
			rss = fmt.Sprintf("%.1f", r.rssBytes/(1<<20))
			cpu = fmt.Sprintf("%.2f", r.cpuSeconds)
			steady = fmt.Sprintf("%.1f", r.steadyCores*100)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%s\t%s\t%s\t%s\t\n", r.side.agent, r.pods, r.side.source,
			r.start.percentile(50).Seconds(), r.start.percentile(99).Seconds(), r.start.max().Seconds(),
			r.allRunning.Seconds(), r.deleted.Seconds(), r.deleteSource, rss, cpu, steady)
	}
	tw.Flush()
	find := func(agent string, pods int) *vsResult {
		for i := range results {
			if results[i].side.agent == agent && results[i].pods == pods {
				return &results[i]
			}
		}
		return nil
	}
	ratio := func(u, k float64) string {
		if k == 0 {
			return "n/a"
		}
		return fmt.Sprintf("%.2f", u/k)
	}
	var p99 []string
	for _, n := range vsPodCounts {
		u, k := find("unitlet", n), find("kubelet", n)
		p99 = append(p99, fmt.Sprintf("%d=%s", n, ratio(u.start.percentile(99).Seconds(), k.start.percentile(99).Seconds())))
	}
	u, k := find("unitlet", 100), find("kubelet", 100)
	fmt.Printf("unitlet/kubelet p99 ratio: %s; delete ratio 100=%s; rss ratio 100=%s\n", strings.Join(p99, " "),
		ratio(u.deleted.Seconds(), k.deleted.Seconds()), ratio(u.rssBytes, k.rssBytes))
}
