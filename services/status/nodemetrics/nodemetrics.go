// Package nodemetrics is the node's /metrics and /metrics/probes: the metrics of every
// unitlet service, gathered at each scrape and merged into one exposition.
package nodemetrics

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
)

// ErrUnsupported is what a Source returns for a service that answers but cannot hand out
// its metrics (a release older than the GetMetrics call): the service is up, its series
// are missing.
var ErrUnsupported = errors.New("the service does not serve its metrics over the bus")

// Source is one service's metrics.
type Source struct {
	// Service is the service's short name: the value of the service label.
	Service string
	// Gather returns the service's metric families; ctx carries the scrape's deadline.
	Gather func(ctx context.Context) ([]*dto.MetricFamily, error)
}

// Options configure a Handler.
type Options struct {
	// Sources are the services to gather, asked again at each scrape (a service's socket
	// may come and go).
	Sources func() []Source
	// Timeout bounds each service's answer; a service that takes longer counts as down.
	Timeout time.Duration
	// ReportUp adds unitlet_service_up{service} for every source.
	ReportUp bool
	Log      *slog.Logger
}

// serviceLabel names the service a series came from, where a name comes from two.
const serviceLabel = "service"

// Handler serves the sources' metrics merged into one exposition. A service that fails
// leaves its series out (and unitlet_service_up at 0): the scrape itself does not fail.
func Handler(o Options) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fams := Gather(r.Context(), o)
		g := prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) { return fams, nil })
		promhttp.HandlerFor(g, promhttp.HandlerOpts{}).ServeHTTP(w, r)
	})
}

// result is one source's answer.
type result struct {
	service string
	fams    []*dto.MetricFamily
	err     error
}

// Gather asks every source at once, each within o.Timeout, and merges their answers.
func Gather(ctx context.Context, o Options) []*dto.MetricFamily {
	sources := o.Sources()
	results := make([]result, len(sources))
	var wg sync.WaitGroup
	for i, s := range sources {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(ctx, o.Timeout)
			defer cancel()
			fams, err := s.Gather(ctx)
			results[i] = result{service: s.Service, fams: fams, err: err}
		}()
	}
	wg.Wait()
	for _, r := range results {
		if r.err != nil && o.Log != nil {
			// Debug: a stopped service would otherwise log at every scrape; its
			// unitlet_service_up says it.
			o.Log.Debug("gather a service's metrics", "service", r.service, "err", r.err)
		}
	}
	fams := merge(results, o.Log)
	if o.ReportUp {
		fams = append(fams, upFamily(results))
		slices.SortFunc(fams, func(a, b *dto.MetricFamily) int { return strings.Compare(a.GetName(), b.GetName()) })
	}
	return fams
}

// merge joins the families of all results by name. A name that comes from more than one
// service gets a service label on each of its series, so that they stay apart; a series
// already carrying a service label of another value keeps it as exported_service, as
// Prometheus does with a target's clashing labels. A family whose type differs from the
// first one of its name, and a series already there, are dropped.
func merge(results []result, log *slog.Logger) []*dto.MetricFamily {
	providers := map[string]map[string]bool{}
	for _, r := range results {
		for _, f := range r.fams {
			if providers[f.GetName()] == nil {
				providers[f.GetName()] = map[string]bool{}
			}
			providers[f.GetName()][r.service] = true
		}
	}
	byName := map[string]*dto.MetricFamily{}
	seen := map[string]bool{} // name and label values of every series kept
	for _, r := range results {
		for _, f := range r.fams {
			name := f.GetName()
			out, ok := byName[name]
			if !ok {
				out = &dto.MetricFamily{Name: f.Name, Help: f.Help, Type: f.Type, Unit: f.Unit}
				byName[name] = out
			} else if out.GetType() != f.GetType() {
				if log != nil {
					log.Warn("metric family left out: another service has it with another type", "name", name, "service", r.service, "type", f.GetType(), "kept", out.GetType())
				}
				continue
			}
			clash := len(providers[name]) > 1
			for _, m := range f.GetMetric() {
				if clash {
					m = withService(m, r.service)
				}
				key := seriesKey(name, m.GetLabel())
				if seen[key] {
					if log != nil {
						log.Warn("duplicate series left out", "name", name, "service", r.service, "labels", key)
					}
					continue
				}
				seen[key] = true
				out.Metric = append(out.Metric, m)
			}
		}
	}
	fams := make([]*dto.MetricFamily, 0, len(byName))
	for _, f := range byName {
		if len(f.Metric) > 0 {
			fams = append(fams, f)
		}
	}
	slices.SortFunc(fams, func(a, b *dto.MetricFamily) int { return strings.Compare(a.GetName(), b.GetName()) })
	return fams
}

// withService is m with the label service=svc, its labels sorted by name.
func withService(m *dto.Metric, svc string) *dto.Metric {
	m = proto.Clone(m).(*dto.Metric)
	labels := make([]*dto.LabelPair, 0, len(m.GetLabel())+1)
	present := false
	for _, l := range m.GetLabel() {
		if l.GetName() == serviceLabel {
			if l.GetValue() == svc {
				present = true
			} else {
				l = &dto.LabelPair{Name: proto.String("exported_" + serviceLabel), Value: l.Value}
			}
		}
		labels = append(labels, l)
	}
	if !present {
		labels = append(labels, &dto.LabelPair{Name: proto.String(serviceLabel), Value: proto.String(svc)})
	}
	slices.SortFunc(labels, func(a, b *dto.LabelPair) int { return strings.Compare(a.GetName(), b.GetName()) })
	m.Label = labels
	return m
}

// seriesKey identifies a series: its name and its labels (sorted by name).
func seriesKey(name string, labels []*dto.LabelPair) string {
	ls := slices.Clone(labels)
	slices.SortFunc(ls, func(a, b *dto.LabelPair) int { return strings.Compare(a.GetName(), b.GetName()) })
	var b strings.Builder
	b.WriteString(name)
	for _, l := range ls {
		b.WriteString("\xff" + l.GetName() + "\xfe" + l.GetValue())
	}
	return b.String()
}

// upFamily is unitlet_service_up: 1 for each service that answered (or answered it does
// not serve its metrics), 0 for each that did not.
func upFamily(results []result) *dto.MetricFamily {
	f := &dto.MetricFamily{
		Name: proto.String("unitlet_service_up"),
		Help: proto.String("1 when the unitlet service answered the node's metrics scrape, 0 when it did not and its series are left out."),
		Type: dto.MetricType_GAUGE.Enum(),
	}
	for _, r := range results {
		v := 0.0
		if r.err == nil || errors.Is(r.err, ErrUnsupported) {
			v = 1
		}
		f.Metric = append(f.Metric, &dto.Metric{
			Label: []*dto.LabelPair{{Name: proto.String(serviceLabel), Value: proto.String(r.service)}},
			Gauge: &dto.Gauge{Value: proto.Float64(v)},
		})
	}
	return f
}
