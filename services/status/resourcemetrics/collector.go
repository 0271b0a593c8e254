// Package resourcemetrics serves the node API's /metrics/resource as the kubelet does: the
// node's, each pod's and each container's cumulative CPU time, working set and swap, and the
// containers' start times, from the same CPU-and-memory summary /stats/summary is built
// from, each sample stamped with the time it was read.
package resourcemetrics

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// Source is the summary the metrics are read from; stats.Provider satisfies it.
type Source interface {
	Summary(ctx context.Context, onlyCPUAndMemory bool) (*statsv1alpha1.Summary, error)
}

// DefaultBound is how long a scrape waits for the summary when the scraper does not say
// less: under Prometheus's default 10 s scrape timeout, so that a slow runtime shows as
// resource_scrape_error 1 instead of a failed scrape.
const DefaultBound = 5 * time.Second

// The kubelet's series and help texts. scrape_error, alpha and deprecated since 1.29, is
// hidden by the kubelet since 1.30 and so is not served.
var (
	containerLabels = []string{"container", "pod", "namespace"}
	podLabels       = []string{"pod", "namespace"}

	nodeCPUUsage       = stable("node_cpu_usage_seconds_total", "Cumulative cpu time consumed by the node in core-seconds")
	nodeMemoryUsage    = stable("node_memory_working_set_bytes", "Current working set of the node in bytes")
	nodeSwapUsage      = alpha("node_swap_usage_bytes", "Current swap usage of the node in bytes. Reported only on non-windows systems")
	containerStartTime = stable("container_start_time_seconds", "Start time of the container since unix epoch in seconds", containerLabels...)
	containerCPUUsage  = stable("container_cpu_usage_seconds_total", "Cumulative cpu time consumed by the container in core-seconds", containerLabels...)
	containerMemory    = stable("container_memory_working_set_bytes", "Current working set of the container in bytes", containerLabels...)
	containerSwapUsage = alpha("container_swap_usage_bytes", "Current amount of the container swap usage in bytes. Reported only on non-windows systems", containerLabels...)
	containerSwapLimit = alpha("container_swap_limit_bytes", "Current amount of the container swap limit in bytes. Reported only on non-windows systems", containerLabels...)
	podCPUUsage        = stable("pod_cpu_usage_seconds_total", "Cumulative cpu time consumed by the pod in core-seconds", podLabels...)
	podMemoryUsage     = stable("pod_memory_working_set_bytes", "Current working set of the pod in bytes", podLabels...)
	podSwapUsage       = alpha("pod_swap_usage_bytes", "Current amount of the pod swap usage in bytes. Reported only on non-windows systems", podLabels...)
	scrapeError        = stable("resource_scrape_error", "1 if there was an error while getting container metrics, 0 otherwise")
)

// stable and alpha are the kubelet's metric descriptions: the help text carries the
// stability level as its registry prints it.
func stable(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, "[STABLE] "+help, labels, nil)
}

func alpha(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, "[ALPHA] "+help, labels, nil)
}

// Handler serves /metrics/resource from src. A scrape waits for the summary at most bound
// (0: DefaultBound), or less when the scraper's X-Prometheus-Scrape-Timeout-Seconds asks
// for less; past it, or on any error reading it, only resource_scrape_error 1 is served.
func Handler(src Source, bound time.Duration, log *slog.Logger) http.Handler {
	if bound <= 0 {
		bound = DefaultBound
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), scrapeBound(r, bound))
		defer cancel()
		reg := prometheus.NewRegistry()
		reg.MustRegister(&collector{ctx: ctx, src: src, log: log})
		promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError, ErrorLog: errorLog{log}}).ServeHTTP(w, r)
	})
}

// scrapeBound is bound, or less: the scraper's own timeout minus a margin to write the
// answer in.
func scrapeBound(r *http.Request, bound time.Duration) time.Duration {
	v := r.Header.Get("X-Prometheus-Scrape-Timeout-Seconds")
	if v == "" {
		return bound
	}
	secs, err := strconv.ParseFloat(v, 64)
	if err != nil || secs <= 0 {
		return bound
	}
	return min(bound, max(time.Duration(secs*0.8*float64(time.Second)), 100*time.Millisecond))
}

// collector reads one summary per scrape, within ctx.
type collector struct {
	ctx context.Context
	src Source
	log *slog.Logger
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{nodeCPUUsage, nodeMemoryUsage, nodeSwapUsage, containerStartTime, containerCPUUsage, containerMemory, containerSwapUsage, containerSwapLimit, podCPUUsage, podMemoryUsage, podSwapUsage, scrapeError} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	summary, err := c.src.Summary(c.ctx, true)
	if err != nil {
		c.log.Error("read the summary for /metrics/resource", "err", err)
		ch <- prometheus.MustNewConstMetric(scrapeError, prometheus.GaugeValue, 1)
		return
	}
	e := emitter{ch: ch, seen: map[string]bool{}}
	node := summary.Node
	if node.CPU != nil && node.CPU.UsageCoreNanoSeconds != nil {
		e.sample(node.CPU.Time.Time, nodeCPUUsage, prometheus.CounterValue, seconds(*node.CPU.UsageCoreNanoSeconds))
	}
	if node.Memory != nil && node.Memory.WorkingSetBytes != nil {
		e.sample(node.Memory.Time.Time, nodeMemoryUsage, prometheus.GaugeValue, float64(*node.Memory.WorkingSetBytes))
	}
	if node.Swap != nil && node.Swap.SwapUsageBytes != nil {
		e.sample(node.Swap.Time.Time, nodeSwapUsage, prometheus.GaugeValue, float64(*node.Swap.SwapUsageBytes))
	}
	for _, pod := range summary.Pods {
		name, ns := pod.PodRef.Name, pod.PodRef.Namespace
		for _, ctr := range pod.Containers {
			e.containerSeries(ctr, name, ns)
		}
		if pod.CPU != nil && pod.CPU.UsageCoreNanoSeconds != nil {
			e.sample(pod.CPU.Time.Time, podCPUUsage, prometheus.CounterValue, seconds(*pod.CPU.UsageCoreNanoSeconds), name, ns)
		}
		if pod.Memory != nil && pod.Memory.WorkingSetBytes != nil {
			e.sample(pod.Memory.Time.Time, podMemoryUsage, prometheus.GaugeValue, float64(*pod.Memory.WorkingSetBytes), name, ns)
		}
		if pod.Swap != nil && pod.Swap.SwapUsageBytes != nil {
			e.sample(pod.Swap.Time.Time, podSwapUsage, prometheus.GaugeValue, float64(*pod.Swap.SwapUsageBytes), name, ns)
		}
	}
	ch <- prometheus.MustNewConstMetric(scrapeError, prometheus.GaugeValue, 0)
}

// emitter sends samples, each label set of a series once: two sandboxes of one pod name
// (a pod deleted and created again under its name) must not make a duplicate series,
// which would fail the whole scrape for a Prometheus.
type emitter struct {
	ch   chan<- prometheus.Metric
	seen map[string]bool
}

func (e emitter) containerSeries(s statsv1alpha1.ContainerStats, pod, ns string) {
	if s.StartTime.Unix() > 0 {
		e.sample(time.Time{}, containerStartTime, prometheus.GaugeValue, float64(s.StartTime.UnixNano())/float64(time.Second), s.Name, pod, ns)
	}
	if s.CPU != nil && s.CPU.UsageCoreNanoSeconds != nil {
		e.sample(s.CPU.Time.Time, containerCPUUsage, prometheus.CounterValue, seconds(*s.CPU.UsageCoreNanoSeconds), s.Name, pod, ns)
	}
	if s.Memory != nil && s.Memory.WorkingSetBytes != nil {
		e.sample(s.Memory.Time.Time, containerMemory, prometheus.GaugeValue, float64(*s.Memory.WorkingSetBytes), s.Name, pod, ns)
	}
	if s.Swap == nil {
		return
	}
	usage := 0.0
	if s.Swap.SwapUsageBytes != nil {
		usage = float64(*s.Swap.SwapUsageBytes)
		e.sample(s.Swap.Time.Time, containerSwapUsage, prometheus.GaugeValue, usage, s.Name, pod, ns)
	}
	if s.Swap.SwapAvailableBytes != nil {
		// The limit is what is used plus what is still available.
		e.sample(s.Swap.Time.Time, containerSwapLimit, prometheus.GaugeValue, float64(*s.Swap.SwapAvailableBytes)+usage, s.Name, pod, ns)
	}
}

// sample sends one sample stamped at (none when at is zero), unless its series was sent.
func (e emitter) sample(at time.Time, d *prometheus.Desc, kind prometheus.ValueType, v float64, labels ...string) {
	key := d.String() + "\xff" + strings.Join(labels, "\xff")
	if e.seen[key] {
		return
	}
	e.seen[key] = true
	m := prometheus.MustNewConstMetric(d, kind, v, labels...)
	if !at.IsZero() {
		m = prometheus.NewMetricWithTimestamp(at, m)
	}
	e.ch <- m
}

func seconds(nanos uint64) float64 { return float64(nanos) / float64(time.Second) }

// errorLog hands promhttp's encoding errors to the logger.
type errorLog struct{ log *slog.Logger }

func (l errorLog) Println(v ...any) {
	l.log.Error("serve /metrics/resource", "err", strings.TrimSpace(fmt.Sprintln(v...)))
}
