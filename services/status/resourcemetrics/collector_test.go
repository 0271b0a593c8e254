package resourcemetrics

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/ptr"

	"github.com/unitlet/unitlet/shared/promtext"
)

type fakeSource struct {
	summary *statsv1alpha1.Summary
	err     error
	delay   time.Duration
	asked   []bool
}

func (f *fakeSource) Summary(ctx context.Context, onlyCPUAndMemory bool) (*statsv1alpha1.Summary, error) {
	f.asked = append(f.asked, onlyCPUAndMemory)
	if f.delay > 0 {
		select {
		case <-time.After(f.delay):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return f.summary, f.err
}

var (
	t1 = metav1.NewTime(time.Unix(1700000000, 0))
	t2 = metav1.NewTime(time.Unix(1700000001, 500_000_000))
)

func testSummary() *statsv1alpha1.Summary {
	return &statsv1alpha1.Summary{
		Node: statsv1alpha1.NodeStats{
			NodeName: "node-1",
			CPU:      &statsv1alpha1.CPUStats{Time: t1, UsageCoreNanoSeconds: ptr.To[uint64](12_500_000_000)},
			Memory:   &statsv1alpha1.MemoryStats{Time: t1, WorkingSetBytes: ptr.To[uint64](1 << 30)},
			Swap:     &statsv1alpha1.SwapStats{Time: t1, SwapUsageBytes: ptr.To[uint64](4096)},
		},
		Pods: []statsv1alpha1.PodStats{
			{
				PodRef: statsv1alpha1.PodReference{Name: "web", Namespace: "default", UID: "u1"},
				CPU:    &statsv1alpha1.CPUStats{Time: t2, UsageCoreNanoSeconds: ptr.To[uint64](3_000_000_000)},
				Memory: &statsv1alpha1.MemoryStats{Time: t2, WorkingSetBytes: ptr.To[uint64](2048)},
				Containers: []statsv1alpha1.ContainerStats{
					{
						Name:      "app",
						StartTime: metav1.NewTime(time.Unix(1699999000, 250_000_000)),
						CPU:       &statsv1alpha1.CPUStats{Time: t2, UsageCoreNanoSeconds: ptr.To[uint64](2_000_000_000)},
						Memory:    &statsv1alpha1.MemoryStats{Time: t2, WorkingSetBytes: ptr.To[uint64](1024)},
						Swap:      &statsv1alpha1.SwapStats{Time: t2, SwapUsageBytes: ptr.To[uint64](100), SwapAvailableBytes: ptr.To[uint64](900)},
					},
					// No CPU or memory yet: no series, no zero.
					{Name: "starting"},
				},
			},
			// The same pod name again (deleted and created again): its series once.
			{
				PodRef: statsv1alpha1.PodReference{Name: "web", Namespace: "default", UID: "u2"},
				CPU:    &statsv1alpha1.CPUStats{Time: t2, UsageCoreNanoSeconds: ptr.To[uint64](1)},
			},
		},
	}
}

func scrape(t *testing.T, h http.Handler, header http.Header) (int, string) {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, "/metrics/resource", nil)
	for k, v := range header {
		r.Header[k] = v
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	body, _ := io.ReadAll(w.Result().Body)
	return w.Code, string(body)
}

func TestExposition(t *testing.T) {
	src := &fakeSource{summary: testSummary()}
	code, body := scrape(t, Handler(src, 0, slog.New(slog.DiscardHandler)), nil)
	if code != http.StatusOK {
		t.Fatalf("status %d: %s", code, body)
	}
	want := `# HELP container_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the container in core-seconds
# TYPE container_cpu_usage_seconds_total counter
container_cpu_usage_seconds_total{container="app",namespace="default",pod="web"} 2 1700000001500
# HELP container_memory_working_set_bytes [STABLE] Current working set of the container in bytes
# TYPE container_memory_working_set_bytes gauge
container_memory_working_set_bytes{container="app",namespace="default",pod="web"} 1024 1700000001500
# HELP container_start_time_seconds [STABLE] Start time of the container since unix epoch in seconds
# TYPE container_start_time_seconds gauge
container_start_time_seconds{container="app",namespace="default",pod="web"} 1.6999990002499998e+09
# HELP container_swap_limit_bytes [ALPHA] Current amount of the container swap limit in bytes. Reported only on non-windows systems
# TYPE container_swap_limit_bytes gauge
container_swap_limit_bytes{container="app",namespace="default",pod="web"} 1000 1700000001500
# HELP container_swap_usage_bytes [ALPHA] Current amount of the container swap usage in bytes. Reported only on non-windows systems
# TYPE container_swap_usage_bytes gauge
container_swap_usage_bytes{container="app",namespace="default",pod="web"} 100 1700000001500
# HELP node_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the node in core-seconds
# TYPE node_cpu_usage_seconds_total counter
node_cpu_usage_seconds_total 12.5 1700000000000
# HELP node_memory_working_set_bytes [STABLE] Current working set of the node in bytes
# TYPE node_memory_working_set_bytes gauge
node_memory_working_set_bytes 1.073741824e+09 1700000000000
# HELP node_swap_usage_bytes [ALPHA] Current swap usage of the node in bytes. Reported only on non-windows systems
# TYPE node_swap_usage_bytes gauge
node_swap_usage_bytes 4096 1700000000000
# HELP pod_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the pod in core-seconds
# TYPE pod_cpu_usage_seconds_total counter
pod_cpu_usage_seconds_total{namespace="default",pod="web"} 3 1700000001500
# HELP pod_memory_working_set_bytes [STABLE] Current working set of the pod in bytes
# TYPE pod_memory_working_set_bytes gauge
pod_memory_working_set_bytes{namespace="default",pod="web"} 2048 1700000001500
# HELP resource_scrape_error [STABLE] 1 if there was an error while getting container metrics, 0 otherwise
# TYPE resource_scrape_error gauge
resource_scrape_error 0
`
	if body != want {
		t.Errorf("exposition:\n%s\nwant:\n%s", body, want)
	}
	if len(src.asked) != 1 || !src.asked[0] {
		t.Errorf("summary asked with onlyCPUAndMemory %v, want one call with true", src.asked)
	}
	families := parse(t, body)
	// The names are the kubelet's and follow Prometheus's conventions with no exception.
	if problems, err := promtext.Lint(families, nil); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
	if got := families["container_cpu_usage_seconds_total"].GetMetric()[0].GetTimestampMs(); got != 1700000001500 {
		t.Errorf("container cpu timestamp %d, want the sample's time", got)
	}
}

// parse reads an exposition as a Prometheus would; a series twice fails it.
func parse(t *testing.T, body string) map[string]*dto.MetricFamily {
	t.Helper()
	families, err := promtext.Parse(body)
	if err != nil {
		t.Fatalf("%v\n%s", err, body)
	}
	return families
}

func TestSummaryErrorIsScrapeError(t *testing.T) {
	src := &fakeSource{err: errors.New("runtime down")}
	code, body := scrape(t, Handler(src, 0, slog.New(slog.DiscardHandler)), nil)
	families := parse(t, body)
	if code != http.StatusOK || len(families) != 1 || families["resource_scrape_error"].GetMetric()[0].GetGauge().GetValue() != 1 {
		t.Errorf("status %d, body:\n%s\nwant 200 with resource_scrape_error 1 alone", code, body)
	}
}

func TestSlowSummaryIsBounded(t *testing.T) {
	src := &fakeSource{summary: testSummary(), delay: time.Minute}
	h := Handler(src, time.Minute, slog.New(slog.DiscardHandler))
	start := time.Now()
	// A Prometheus scraping with a 1 s timeout is answered within it.
	_, body := scrape(t, h, http.Header{"X-Prometheus-Scrape-Timeout-Seconds": {"1"}})
	if took := time.Since(start); took > time.Second {
		t.Errorf("scrape took %v, want under the scraper's 1 s", took)
	}
	if !strings.Contains(body, "resource_scrape_error 1\n") {
		t.Errorf("a summary past the bound: body\n%s\nwant resource_scrape_error 1", body)
	}

	src.delay = 10 * time.Second
	start = time.Now()
	_, body = scrape(t, Handler(src, 200*time.Millisecond, slog.New(slog.DiscardHandler)), nil)
	if took := time.Since(start); took > 2*time.Second || !strings.Contains(body, "resource_scrape_error 1\n") {
		t.Errorf("bound 200ms: took %v, body\n%s", took, body)
	}
}
