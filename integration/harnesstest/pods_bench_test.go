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
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/unitlet/unitlet/integration/harness"
)

// automountToken is the pods' automountServiceAccountToken: both sides mount the default
// service-account token volume (kube-api-access-*), as the issue asks; unitlet through
// unitlet-volumes.
const automountToken = true

// vsPodCounts are the sizes of the rounds: that many pods created at once.
var vsPodCounts = []int{1, 30, 100}

// BenchmarkPodsVsKubelet measures unitlet, the real kubelet and the runtime alone (the
// floor: floorRound) side by side on the same control plane and containerd (the stack
// integration/stacks/bench-pods.yaml, which `make bench-pods` names in UNITLET_STACK): for
// 1, 30 and 100 busybox pods created at once, per pod the time from its create call until
// all its containers run (p50, p99, max), then the time from the delete calls until all are
// gone; at 100 pods the memory and CPU of the node agent (each unitlet service and their
// sum; the kubelet). It prints a table of the medians over the rounds and, last, the
// ratios unitlet/kubelet and unitlet/floor.
//
// The agents share the stack's containerd and each stops pods it did not start, so they
// take turns, and the turns interleave (unitlet, kubelet, floor, unitlet, kubelet, floor,
// ... UNITLET_BENCH_ROUNDS times, 3 by default) so that a shared machine's drift falls on
// every side alike. Before the first round it checks that both agents run with the same
// KubeletConfiguration fields (vsSameConfig).
//
// "Running" is what a watch on the API server sees in the pods' status (source=api). Until
// the unitlet node runs unitlet-status, nothing writes its pods' status to the API, and
// unitlet's rounds read running containers from CRI instead (source=cri), as
// BenchmarkPodStart does.
func BenchmarkPodsVsKubelet(b *testing.B) {
	unitletNode, kubeletNode := vsNodes(b)
	// `up` started both agents, with no pods yet: compare their configurations now.
	vsSameConfig(b, unitletNode, kubeletNode)
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
	floor := vsSide{agent: "floor", source: "cri"}
	rounds := vsRounds(b)
	runtimeVersion := vsRuntimeVersion(b)

	var results []vsResult
	for range b.N {
		for round := 1; round <= rounds; round++ {
			for _, side := range []vsSide{unitlet, kubelet, floor} {
				vsActivate(b, side, unitlet, kubelet)
				for _, n := range vsPodCounts {
					var r vsResult
					if side.agent == "floor" {
						rt, err := stack.CRI()
						if err != nil {
							b.Fatal(err)
						}
						r, err = floorRound(context.Background(), rt, n)
						rt.Close()
						if err != nil {
							b.Fatalf("floor, %d pods: %v", n, err)
						}
					} else {
						r = vsRound(b, side, n)
					}
					fmt.Printf("round %d/%d: %s, %d pods: start p99 %.2f s, deleted %.2f s\n", round, rounds, side.agent, n,
						r.start.percentile(99).Seconds(), r.deleted.Seconds())
					results = append(results, r)
				}
			}
		}
	}
	// The kubelet's wrapper puts the host back as it stops; unitlet runs again, as after up.
	vsActivate(b, unitlet, unitlet, kubelet)
	printVs(runtimeVersion, results)
}

// vsRounds is UNITLET_BENCH_ROUNDS, 3 if unset.
func vsRounds(b *testing.B) int {
	v := os.Getenv("UNITLET_BENCH_ROUNDS")
	if v == "" {
		return 3
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		b.Fatalf("UNITLET_BENCH_ROUNDS=%q: want a number of rounds, at least 1", v)
	}
	return n
}

// vsRuntimeVersion is the stack's runtime as CRI names it, e.g. "containerd 1.6.20~ds1".
func vsRuntimeVersion(b *testing.B) string {
	rt, err := stack.CRI()
	if err != nil {
		b.Fatal(err)
	}
	defer rt.Close()
	v, err := rt.Runtime.Version(context.Background(), &runtimeapi.VersionRequest{})
	if err != nil {
		b.Fatalf("the runtime's version: %v", err)
	}
	return v.RuntimeName + " " + v.RuntimeVersion
}

// vsActivate leaves only side's agent running (none for the floor) and, for an agent,
// waits until its node is Ready in the API.
func vsActivate(b *testing.B, side, unitlet, kubelet vsSide) {
	b.Helper()
	for _, other := range []vsSide{unitlet, kubelet} {
		if other.agent != side.agent {
			if err := stack.StopNode(other.node); err != nil {
				b.Fatal(err)
			}
		}
	}
	if side.node == "" {
		return
	}
	if err := stack.StartNode(context.Background(), side.node); err != nil {
		b.Fatal(err)
	}
	// Ready in the API without the taints the node controller put while the agent was away,
	// and the node's lease renewed since the agent started (the Ready condition of its last
	// run stays in the API, and a node's status is rewritten only on a change or every few
	// minutes, while the lease is renewed every 10 s).
	c := benchClient(b)
	started := time.Now().Add(-time.Second)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		node, err := c.CoreV1().Nodes().Get(context.Background(), side.node, metav1.GetOptions{})
		if err == nil {
			ready := nodeReady(node)
			lease, lerr := c.CoordinationV1().Leases("kube-node-lease").Get(context.Background(), side.node, metav1.GetOptions{})
			if ready != nil && ready.Status == corev1.ConditionTrue && len(node.Spec.Taints) == 0 &&
				lerr == nil && lease.Spec.RenewTime != nil && lease.Spec.RenewTime.After(started) {
				return
			}
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s: node %s not Ready with a renewed lease 2 minutes after its start (%v)\n%s", side.agent, side.node, err, stack.Logs(30))
		}
		time.Sleep(200 * time.Millisecond)
	}
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
	// serviceRSS is each unitlet service's resident memory at 100 pods, by service.
	serviceRSS map[string]float64
	// breakdown is where unitlet's pods' start time went, at 100 pods.
	breakdown []breakdownStep
}

// vsScript is the benchmark pods' command: `sleep 3600` that ends on SIGTERM. As PID 1 it
// would ignore the signal and every delete would last the grace period, measuring the
// grace instead of the agent.
const vsScript = "trap 'exit 0' TERM; sleep 3600 & wait"

func vsPod(node, name string) *corev1.Pod {
	p := busyboxPod(name, vsScript)
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

	var traceBefore histograms
	if side.agent == "unitlet" && n >= 100 {
		if traceBefore, err = podTrace(ctx, side.node); err != nil {
			b.Fatal(err)
		}
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
	if traceBefore != nil {
		after, err := podTrace(ctx, side.node)
		if err != nil {
			b.Fatal(err)
		}
		r.breakdown = podBreakdown(traceBefore, after, n)
	}
	if n >= 100 {
		perService := map[string]procUsage{}
		for _, svc := range side.services {
			if pid, err := stack.ServicePID(side.node, svc); err == nil {
				perService[svc], _ = readProcUsage([]int{pid})
			}
		}
		if r.rssBytes, r.steadyCores, err = usageOver(pids, 10*time.Second); err != nil {
			b.Fatal(err)
		}
		r.serviceRSS = map[string]float64{}
		for _, svc := range side.services {
			if pid, err := stack.ServicePID(side.node, svc); err == nil {
				if u, err := readProcUsage([]int{pid}); err == nil {
					r.serviceRSS[svc] = u.rssBytes
				}
			}
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

// printVs writes, for the stack's runtime, the table of the medians over the rounds of
// each agent and size, unitlet's memory per service at 100 pods, then the ratios last.
func printVs(runtime string, results []vsResult) {
	type key struct {
		agent string
		pods  int
	}
	groups := map[key][]vsResult{}
	var order []key
	for _, r := range results {
		k := key{r.side.agent, r.pods}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], r)
	}
	slices.SortStableFunc(order, func(a, b key) int {
		rank := map[string]int{"unitlet": 0, "kubelet": 1, "floor": 2}
		if d := rank[a.agent] - rank[b.agent]; d != 0 {
			return d
		}
		return a.pods - b.pods
	})
	med := func(k key, f func(vsResult) float64) float64 {
		var v []float64
		for _, r := range groups[k] {
			v = append(v, f(r))
		}
		return median(v)
	}
	p99 := func(r vsResult) float64 { return r.start.percentile(99).Seconds() }
	deleted := func(r vsResult) float64 { return r.deleted.Seconds() }
	rss := func(r vsResult) float64 { return r.rssBytes }

	fmt.Println()
	fmt.Printf("== pods vs kubelet %s on %s: create → all containers running (per pod), delete → all gone; medians of %d rounds\n",
		harness.KubernetesVersion, runtime, len(groups[order[0]]))
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "agent\tpods\tsource\tstart p50 s\tp99 s\tmax s\tall running s\tdeleted s\tgone by\tRSS MiB\tCPU s (round)\tCPU % (10 s, running)\t")
	for _, k := range order {
		g := groups[k]
		mem, cpu, steady := "", "", ""
		if k.pods >= 100 && k.agent != "floor" {
			mem = fmt.Sprintf("%.1f", med(k, rss)/(1<<20))
			cpu = fmt.Sprintf("%.2f", med(k, func(r vsResult) float64 { return r.cpuSeconds }))
			steady = fmt.Sprintf("%.1f", 100*med(k, func(r vsResult) float64 { return r.steadyCores }))
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%s\t%s\t%s\t%s\t\n", k.agent, k.pods, g[0].side.source,
			med(k, func(r vsResult) float64 { return r.start.percentile(50).Seconds() }), med(k, p99),
			med(k, func(r vsResult) float64 { return r.start.max().Seconds() }),
			med(k, func(r vsResult) float64 { return r.allRunning.Seconds() }), med(k, deleted), g[0].deleteSource, mem, cpu, steady)
	}
	tw.Flush()

	u100 := key{"unitlet", 100}
	if g := groups[u100]; len(g) > 0 && len(g[0].serviceRSS) > 0 {
		var parts []string
		for _, svc := range g[0].side.services {
			parts = append(parts, fmt.Sprintf("%s %.1f", svc, med(u100, func(r vsResult) float64 { return r.serviceRSS[svc] })/(1<<20)))
		}
		fmt.Printf("unitlet RSS at 100 pods, MiB (medians): %s; summed %.1f\n", strings.Join(parts, ", "), med(u100, rss)/(1<<20))
	}

	// Where the start time went at 100 pods, for unitlet and for the floor's bare CRI calls.
	for _, agent := range []string{"unitlet", "floor"} {
		k := key{agent, 100}
		g := groups[k]
		if len(g) == 0 || len(g[0].breakdown) == 0 {
			continue
		}
		span := "create → running in the API"
		if agent == "floor" {
			span = "RunPodSandbox → container started"
		}
		fmt.Printf("where a %s pod's start went at 100 pods (means, medians of the rounds; %s: %.2f s):\n",
			agent, span, med(k, func(r vsResult) float64 { return r.start.mean().Seconds() }))
		means, perPod := map[string][]float64{}, map[string][]float64{}
		for _, r := range g {
			for _, st := range r.breakdown {
				means[st.name] = append(means[st.name], st.mean)
				perPod[st.name] = append(perPod[st.name], st.perPod)
			}
		}
		for _, st := range g[0].breakdown {
			line := fmt.Sprintf("  %-48s %7.3f s", st.name, median(means[st.name]))
			switch {
			case strings.HasPrefix(st.name, "status:"):
				line += fmt.Sprintf(" a write, %.1f writes a pod", median(perPod[st.name]))
			case st.perPod > 0:
				line += fmt.Sprintf(" a call, %.1f calls a pod", median(perPod[st.name]))
			}
			fmt.Println(line)
		}
	}

	ratio := func(agent, base string, pods int, f func(vsResult) float64) string {
		u, k := key{agent, pods}, key{base, pods}
		if len(groups[u]) == 0 || len(groups[k]) == 0 || med(k, f) == 0 {
			return "n/a"
		}
		return fmt.Sprintf("%.2f", med(u, f)/med(k, f))
	}
	var vsKubelet, vsFloor []string
	for _, n := range vsPodCounts {
		vsKubelet = append(vsKubelet, fmt.Sprintf("%d=%s", n, ratio("unitlet", "kubelet", n, p99)))
		vsFloor = append(vsFloor, fmt.Sprintf("%d=%s", n, ratio("unitlet", "floor", n, p99)))
	}
	fmt.Printf("unitlet/kubelet p99 ratio: %s; delete ratio 100=%s; rss ratio 100=%s\n", strings.Join(vsKubelet, " "),
		ratio("unitlet", "kubelet", 100, deleted), ratio("unitlet", "kubelet", 100, rss))
	fmt.Printf("unitlet/floor p99 ratio: %s\n", strings.Join(vsFloor, " "))
}

// median is the middle value (the mean of the two middle ones for an even count).
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
