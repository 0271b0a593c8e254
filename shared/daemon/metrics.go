package daemon

import (
	"net/http"
	"runtime"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/unitlet/unitlet/shared/version"
)

// NewRegistry returns a registry with the Go runtime and process collectors: one per
// process, passed down, never global.
func NewRegistry() *prometheus.Registry {
	r := prometheus.NewRegistry()
	r.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return r
}

func buildInfo(service string) prometheus.Collector {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "unitlet_build_info",
		Help: "Always 1; the labels say which unitlet service and build this is.",
	}, []string{"service", "version", "git_commit", "go_version"})
	g.WithLabelValues(service, version.Version, version.Commit(), runtime.Version()).Set(1)
	return g
}

func metricsHandler(r *prometheus.Registry) http.Handler {
	return promhttp.HandlerFor(r, promhttp.HandlerOpts{Registry: r})
}
