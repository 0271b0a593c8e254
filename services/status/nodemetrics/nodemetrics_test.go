package nodemetrics

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// registrySource is a service whose registry holds collectors.
func registrySource(svc string, cs ...prometheus.Collector) Source {
	reg := prometheus.NewRegistry()
	reg.MustRegister(cs...)
	return Source{Service: svc, Gather: func(context.Context) ([]*dto.MetricFamily, error) { return reg.Gather() }}
}

func failing(svc string, err error) Source {
	return Source{Service: svc, Gather: func(context.Context) ([]*dto.MetricFamily, error) { return nil, err }}
}

// hanging answers only when the scrape's deadline ends it.
func hanging(svc string) Source {
	return Source{Service: svc, Gather: func(ctx context.Context) ([]*dto.MetricFamily, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}}
}

func gauge(name string, v float64) prometheus.Gauge {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: name + " help"})
	g.Set(v)
	return g
}

func buildInfo(svc string) prometheus.Collector {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "unitlet_build_info", Help: "build"}, []string{"service"})
	g.WithLabelValues(svc).Set(1)
	return g
}

// scrape serves the sources through Handler and parses the page with Prometheus's text
// parser, failing on a duplicate series.
func scrape(t *testing.T, sources ...Source) map[string]*dto.MetricFamily {
	t.Helper()
	h := Handler(Options{Sources: func() []Source { return sources }, Timeout: 200 * time.Millisecond, ReportUp: true})
	rec := httptest.NewRecorder()
	start := time.Now()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("scrape took %s with a 200ms timeout per service", took)
	}
	if rec.Code != http.StatusOK {
		t.Fatalf("scrape: %d %s", rec.Code, rec.Body)
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(rec.Body.String()))
	if err != nil {
		t.Fatalf("parse the page: %v\n%s", err, rec.Body)
	}
	seen := map[string]bool{}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			ls := model.LabelSet{model.MetricNameLabel: model.LabelValue(name)}
			for _, l := range m.GetLabel() {
				ls[model.LabelName(l.GetName())] = model.LabelValue(l.GetValue())
			}
			if seen[ls.String()] {
				t.Errorf("duplicate series %s", ls)
			}
			seen[ls.String()] = true
		}
	}
	return fams
}

// labels of a family's series, one string each ("a=1,b=2", sorted by name).
func labels(f *dto.MetricFamily) []string {
	var out []string
	for _, m := range f.GetMetric() {
		var ls []string
		for _, l := range m.GetLabel() {
			ls = append(ls, l.GetName()+"="+l.GetValue())
		}
		out = append(out, strings.Join(ls, ","))
	}
	return out
}

func TestMergeLabelsOnlyClashingNames(t *testing.T) {
	fams := scrape(t,
		registrySource("status", gauge("kubelet_node_name", 1), gauge("shared_total", 1), buildInfo("status")),
		registrySource("podsync", gauge("kubelet_running_pods", 3), gauge("shared_total", 2), buildInfo("podsync")),
		registrySource("certs", gauge("unitlet_certs_expiry_seconds", 9), buildInfo("certs")),
	)
	for name, want := range map[string]string{"kubelet_node_name": "", "kubelet_running_pods": "", "unitlet_certs_expiry_seconds": ""} {
		if got := labels(fams[name]); len(got) != 1 || got[0] != want {
			t.Errorf("%s: labels %q, want one series without labels (its name is one service's)", name, got)
		}
	}
	if got := strings.Join(labels(fams["shared_total"]), " "); got != "service=status service=podsync" {
		t.Errorf("shared_total: %q, want one series per service labelled with it", got)
	}
	// A service label that is already there and names the service stays as it is.
	if got := strings.Join(labels(fams["unitlet_build_info"]), " "); got != "service=status service=podsync service=certs" {
		t.Errorf("unitlet_build_info: %q", got)
	}
	if got := strings.Join(labels(fams["unitlet_service_up"]), " "); got != "service=status service=podsync service=certs" {
		t.Errorf("unitlet_service_up: %q", got)
	}
}

func TestMergeKeepsAClashingServiceLabelAsExported(t *testing.T) {
	other := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "unitlet_build_info", Help: "build"}, []string{"service"})
	other.WithLabelValues("volumes").Set(1)
	fams := scrape(t, registrySource("status", buildInfo("status")), registrySource("podsync", other))
	if got := strings.Join(labels(fams["unitlet_build_info"]), " "); got != "service=status exported_service=volumes,service=podsync" {
		t.Errorf("unitlet_build_info: %q", got)
	}
}

func TestMergeDropsAFamilyOfAnotherType(t *testing.T) {
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "things_total", Help: "h"})
	c.Add(4)
	fams := scrape(t, registrySource("status", gauge("things_total", 1)), registrySource("podsync", c))
	f := fams["things_total"]
	if f.GetType() != dto.MetricType_GAUGE || len(f.GetMetric()) != 1 || f.GetMetric()[0].GetGauge().GetValue() != 1 {
		t.Errorf("things_total: %v, want status's gauge alone", f)
	}
}

func TestAServiceDownLeavesItsSeriesOut(t *testing.T) {
	fams := scrape(t,
		registrySource("status", gauge("kubelet_node_name", 1)),
		failing("config", errors.New("connection refused")),
		hanging("podsync"),
		failing("volumes", ErrUnsupported),
		registrySource("certs", gauge("unitlet_certs_expiry_seconds", 9)),
	)
	up := map[string]float64{}
	for _, m := range fams["unitlet_service_up"].GetMetric() {
		up[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
	}
	// volumes answered that it cannot hand out metrics (an older release): it is up.
	want := map[string]float64{"status": 1, "config": 0, "podsync": 0, "volumes": 1, "certs": 1}
	for svc, v := range want {
		if up[svc] != v {
			t.Errorf("unitlet_service_up{service=%q} = %v, want %v (all: %v)", svc, up[svc], v, up)
		}
	}
	if fams["unitlet_certs_expiry_seconds"] == nil || fams["kubelet_node_name"] == nil {
		t.Errorf("the answering services' series are missing: %v", fams)
	}
}
