package harnesstest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// metricsEndpoints are the node API's endpoints a monitoring stack scrapes; those that are
// Prometheus text also have their metric names compared.
var metricsEndpoints = []struct {
	path       string
	prometheus bool
}{
	{"metrics", true},
	{"metrics/resource", true},
	{"metrics/cadvisor", true},
	{"metrics/probes", true},
	{"stats/summary", false},
}

// scrapeRounds is how many times each endpoint is scraped per agent.
const scrapeRounds = 30

// scrapeResult is one agent's figures for one endpoint.
type scrapeResult struct {
	agent, path string
	// status is the HTTP status of the first scrape; the rest only when it is 200.
	status   int
	err      string
	lat      latencies
	bytes    int
	families []string
}

// BenchmarkMetricsScrapeVsKubelet scrapes the node API's metrics endpoints of unitlet and
// of the real kubelet on the bench-pods stack (`make bench-metrics`), each agent running
// 100 pods with a readiness probe in its turn: per endpoint the latency through the API
// server's node proxy (p50, p99 of scrapeRounds scrapes) and the page's size, then the
// metric names the kubelet serves and unitlet does not, and the other way round.
func BenchmarkMetricsScrapeVsKubelet(b *testing.B) {
	unitletNode, kubeletNode := vsNodes(b)
	if err := stack.StopNode(kubeletNode); err != nil {
		b.Fatal(err)
	}
	registerNode(b)
	// The pods mount the default service account's token; on a fresh stack the account
	// comes a moment after the API server.
	stack.WaitFor(b, time.Minute, "service account default/default", func(ctx context.Context) (bool, string) {
		_, err := benchClient(b).CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	})
	var results []scrapeResult
	for range b.N {
		results = append(results, scrapeAt100Pods(b, "unitlet", unitletNode)...)
		if err := stack.StopNode(unitletNode); err != nil {
			b.Fatal(err)
		}
		if err := stack.StartNode(context.Background(), kubeletNode); err != nil {
			b.Fatal(err)
		}
		results = append(results, scrapeAt100Pods(b, "kubelet", kubeletNode)...)
		if err := stack.StopNode(kubeletNode); err != nil {
			b.Fatal(err)
		}
	}
	printScrapes(results)
}

// scrapeAt100Pods runs 100 pods on node, scrapes every endpoint, and removes the pods.
func scrapeAt100Pods(b *testing.B, agent, node string) []scrapeResult {
	b.Helper()
	ctx := context.Background()
	c, w := benchWatch(b, node)
	names := podNames("scrape-"+agent, 100)
	for _, name := range names {
		p := vsPod(node, name)
		// A probe, so that /metrics/probes has series on both sides.
		p.Spec.Containers[0].ReadinessProbe = readinessProbeExec(10)
		if _, err := c.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := w.waitRunning(names, 10*time.Minute); err != nil {
		b.Fatalf("%s: %v", agent, err)
	}
	// Two resource scrapes' worth of samples and a few probe periods.
	time.Sleep(20 * time.Second)
	var out []scrapeResult
	for _, ep := range metricsEndpoints {
		out = append(out, scrapeEndpoint(ctx, b, c, agent, node, ep.path, ep.prometheus))
	}
	if err := deleteAtOnce(ctx, c, names, metav1.DeleteOptions{}); err != nil {
		b.Fatal(err)
	}
	if _, err := w.waitGone(names, 10*time.Minute); err != nil {
		b.Fatalf("%s: %v", agent, err)
	}
	return out
}

func scrapeEndpoint(ctx context.Context, b *testing.B, c kubernetes.Interface, agent, node, path string, prometheus bool) scrapeResult {
	r := scrapeResult{agent: agent, path: path}
	for i := range scrapeRounds {
		start := time.Now()
		res := c.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes/" + node + "/proxy/" + path).Do(ctx)
		d := time.Since(start)
		var code int
		res.StatusCode(&code)
		body, err := res.Raw()
		if i == 0 {
			r.status = code
			if err != nil || code != 200 {
				r.err = fmt.Sprintf("%v: %.300s", err, body)
				return r
			}
			r.bytes = len(body)
			if prometheus {
				r.families = familyNames(b, agent, path, body)
			}
		}
		if err != nil {
			b.Fatalf("%s %s: %v", agent, path, err)
		}
		r.lat = append(r.lat, d)
	}
	sort.Slice(r.lat, func(i, j int) bool { return r.lat[i] < r.lat[j] })
	return r
}

// familyNames are the metric names of a Prometheus text page.
func familyNames(b *testing.B, agent, path string, page []byte) []string {
	parser := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(page))
	if err != nil {
		b.Fatalf("%s /%s does not parse: %v", agent, path, err)
	}
	var names []string
	for n := range fams {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

func printScrapes(results []scrapeResult) {
	fmt.Println()
	fmt.Println("== metrics endpoints, 100 pods (through the API server's node proxy)")
	tw := tabwriter.NewWriter(os.Stdout, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "endpoint\tagent\tstatus\tp50\tp99\tbytes\tfamilies")
	by := map[string]map[string]scrapeResult{}
	for _, r := range results {
		if by[r.path] == nil {
			by[r.path] = map[string]scrapeResult{}
		}
		by[r.path][r.agent] = r
		fmt.Fprintf(tw, "/%s\t%s\t%d\t%s\t%s\t%d\t%d\n", r.path, r.agent, r.status,
			r.lat.percentile(50).Round(100*time.Microsecond), r.lat.percentile(99).Round(100*time.Microsecond), r.bytes, len(r.families))
	}
	tw.Flush()
	for _, r := range results {
		if r.err != "" {
			fmt.Printf("%s /%s: %s\n", r.agent, r.path, r.err)
		}
	}
	for _, ep := range metricsEndpoints {
		u, k := by[ep.path]["unitlet"], by[ep.path]["kubelet"]
		if k.lat != nil && u.lat != nil {
			fmt.Printf("/%s unitlet/kubelet p50 %.2f p99 %.2f\n", ep.path,
				float64(u.lat.percentile(50))/float64(k.lat.percentile(50)), float64(u.lat.percentile(99))/float64(k.lat.percentile(99)))
		}
		if !ep.prometheus {
			continue
		}
		fmt.Printf("/%s kubelet names unitlet does not serve: %s\n", ep.path, strings.Join(missing(k.families, u.families), " "))
		fmt.Printf("/%s unitlet names the kubelet does not serve: %s\n", ep.path, strings.Join(missing(u.families, k.families), " "))
	}
}

// readinessProbeExec runs `true` every period seconds.
func readinessProbeExec(period int32) *corev1.Probe {
	return &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}},
		PeriodSeconds: period,
	}
}

// missing are the names of want that got lacks.
func missing(want, got []string) []string {
	var out []string
	for _, n := range want {
		if !slices.Contains(got, n) {
			out = append(out, n)
		}
	}
	if out == nil {
		return []string{"(none)"}
	}
	return out
}
