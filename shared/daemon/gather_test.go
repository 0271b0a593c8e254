package daemon

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	daemonv1 "github.com/unitlet/unitlet/proto/unitlet/daemon/v1"
	"github.com/unitlet/unitlet/shared/payload"
)

func TestDecodeMetricsTakesTheOriginalSchemaAndRefusesAnUnknownOne(t *testing.T) {
	g := prometheus.NewRegistry()
	g.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "a_total", Help: "h"}))
	resp, err := infoServer{d: &Daemon{opts: Options{Registry: g}}}.GetMetrics(context.Background(), &daemonv1.GetMetricsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	resp.MetricFamiliesSchema = "" // a service that predates the field
	if fams, err := DecodeMetrics(resp); err != nil || len(fams) != 1 || fams[0].GetName() != "a_total" {
		t.Errorf("no schema: families %v, err %v; want a_total", fams, err)
	}
	resp.MetricFamiliesSchema = "io.prometheus.client.MetricFamily;encoding=text"
	fams, err := DecodeMetrics(resp)
	if err == nil || fams != nil || !strings.Contains(err.Error(), `unitlet.daemon.v1.GetMetricsResponse.metric_families: unknown schema "io.prometheus.client.MetricFamily;encoding=text"`) {
		t.Errorf("unknown schema: families %v, err %v; want it refused, naming the field and the schema", fams, err)
	}
}

func TestGetMetricsServesEachRegistry(t *testing.T) {
	d, _, _, _, _ := runDaemon(t, func(context.Context) error { return nil })
	probes := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "prober_probe_total", Help: "h"}, []string{"probe_type"})
	c.WithLabelValues("Readiness").Add(3)
	probes.MustRegister(c)
	d.AddRegistry("probes", probes)
	client := daemonv1.NewDaemonServiceClient(dialDaemon(t, d))

	names := func(registry string) (map[string]bool, error) {
		resp, err := client.GetMetrics(context.Background(), &daemonv1.GetMetricsRequest{Registry: registry})
		if err != nil {
			return nil, err
		}
		if got := resp.GetMetricFamiliesSchema(); got != payload.SchemaMetricFamilies {
			t.Errorf("metric_families_schema = %q, want %q", got, payload.SchemaMetricFamilies)
		}
		fams, err := DecodeMetrics(resp)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for _, f := range fams {
			out[f.GetName()] = true
			if f.GetName() == "prober_probe_total" && f.GetMetric()[0].GetCounter().GetValue() != 3 {
				t.Errorf("prober_probe_total = %v, want 3", f.GetMetric()[0])
			}
		}
		return out, nil
	}
	own, err := names("")
	if err != nil {
		t.Fatal(err)
	}
	if !own["unitlet_build_info"] || !own["go_goroutines"] || own["prober_probe_total"] {
		t.Errorf("the process's registry has %v, want unitlet_build_info and go_goroutines and no prober_probe_total", own)
	}
	got, err := names("probes")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !got["prober_probe_total"] {
		t.Errorf("registry probes has %v, want only prober_probe_total", got)
	}
	if _, err := names("nope"); status.Code(err) != codes.NotFound {
		t.Errorf("registry nope: %v, want NotFound", err)
	}
}
