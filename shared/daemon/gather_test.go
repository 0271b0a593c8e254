package daemon

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	daemonv1 "github.com/unitlet/unitlet/proto/unitlet/daemon/v1"
)

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
		fams, err := DecodeMetricFamilies(resp.GetMetricFamilies())
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
