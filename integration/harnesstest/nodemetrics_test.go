package harnesstest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"

	podsyncv1 "github.com/unitlet/unitlet/proto/unitlet/podsync/v1"
	"github.com/unitlet/unitlet/shared/promtext"
)

// scrapeNode reads one of the node API's metrics pages through the API server's node proxy,
// as a monitoring system does, and parses it with Prometheus's text parser. It fails on
// anything not 200, a page that does not parse, or a series twice.
func scrapeNode(ctx context.Context, t *testing.T, path string) (map[string]*dto.MetricFamily, error) {
	t.Helper()
	body, err := admin(t).CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", podsyncNode, "proxy", path).DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("GET nodes/%s/proxy/%s: %w: %s", podsyncNode, path, err, body)
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("/%s does not parse: %v\n%s", path, err, body)
	}
	seen := map[string]bool{}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			ls := model.LabelSet{model.MetricNameLabel: model.LabelValue(name)}
			for _, l := range m.GetLabel() {
				ls[model.LabelName(l.GetName())] = model.LabelValue(l.GetValue())
			}
			if seen[ls.String()] {
				t.Errorf("/%s has series %s twice", path, ls)
			}
			seen[ls.String()] = true
		}
	}
	return fams, nil
}

// byLabel is a family's value per value of label.
func byLabel(f *dto.MetricFamily, label string) map[string]float64 {
	out := map[string]float64{}
	for _, m := range f.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == label {
				out[l.GetValue()] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
			}
		}
	}
	return out
}

// nodeServices are node-1's services: its units and volumes beside it on the host.
var nodeServices = []string{"status", "config", "certs", "podsync", "volumes"}

// TestNodeMetricsGathersEveryService: one scrape of the node's /metrics carries every
// service's series and unitlet_service_up 1 for each; a stopped service reads 0 while the
// scrape still answers, and 1 again once it runs.
func TestNodeMetricsGathersEveryService(t *testing.T) {
	// Serial: stops unitlet-certs.
	waitNodeReady(t, 90*time.Second)
	ctx := context.Background()
	start := time.Now()
	fams, err := scrapeNode(ctx, t, "metrics")
	if err != nil {
		t.Fatal(err)
	}
	series := 0
	for _, f := range fams {
		series += len(f.GetMetric())
	}
	t.Logf("a scrape of every service took %s: %d families, %d series", time.Since(start), len(fams), series)
	up := byLabel(fams["unitlet_service_up"], "service")
	builds := byLabel(fams["unitlet_build_info"], "service")
	for _, svc := range nodeServices {
		if up[svc] != 1 || builds[svc] != 1 {
			t.Errorf("service %s: unitlet_service_up %v, unitlet_build_info %v; want 1 and 1 (up: %v)", svc, up[svc], builds[svc], up)
		}
	}
	// One family of each service, named as the kubelet names it where it has the metric.
	for name, svc := range map[string]string{
		"kubelet_running_pods":                           "podsync",
		"kubelet_pod_start_sli_duration_seconds":         "podsync",
		"kubelet_certificate_manager_client_ttl_seconds": "certs",
		"unitlet_volumes_prepared":                       "volumes",
		"unitlet_config_generation":                      "config",
		"kubelet_node_name":                              "status",
	} {
		if fams[name] == nil {
			t.Errorf("/metrics lacks %s (unitlet-%s's)", name, svc)
		}
	}
	// The Go runtime's series are unitlet-status's own, not five processes' at once.
	if f := fams["go_goroutines"]; f == nil || len(f.GetMetric()) != 1 {
		t.Errorf("go_goroutines: %v, want unitlet-status's one series", f)
	}
	if fams["prober_probe_total"] != nil {
		t.Errorf("/metrics carries prober_probe_total; the kubelet serves it on /metrics/probes only")
	}
	lintNames(t, fams)

	if err := stack.StopService(podsyncNode, "certs"); err != nil {
		t.Fatal(err)
	}
	restarted := false
	defer func() {
		if !restarted {
			restartServices(t)
		}
	}()
	start = time.Now()
	fams, err = scrapeNode(ctx, t, "metrics")
	if err != nil {
		t.Fatalf("scrape with unitlet-certs stopped: %v", err)
	}
	t.Logf("scrape with unitlet-certs stopped took %s", time.Since(start))
	if up := byLabel(fams["unitlet_service_up"], "service"); up["certs"] != 0 || up["podsync"] != 1 {
		t.Errorf("unitlet-certs stopped: unitlet_service_up %v, want certs 0 and the rest 1", up)
	}
	if _, ok := byLabel(fams["unitlet_build_info"], "service")["certs"]; ok || fams["kubelet_certificate_manager_client_ttl_seconds"] != nil {
		t.Errorf("unitlet-certs stopped: its series are still there")
	}
	restartServices(t)
	restarted = true
	stack.WaitFor(t, time.Minute, "unitlet_service_up{service=certs} 1 again", func(ctx context.Context) (bool, string) {
		fams, err := scrapeNode(ctx, t, "metrics")
		if err != nil {
			return false, err.Error()
		}
		up := byLabel(fams["unitlet_service_up"], "service")
		return up["certs"] == 1 && fams["kubelet_certificate_manager_client_ttl_seconds"] != nil, fmt.Sprintf("up %v", up)
	})
}

// lintNames runs Prometheus's metric linter over the page: names follow its conventions
// except the kubelet's own, kept as the kubelet spells them.
func lintNames(t *testing.T, fams map[string]*dto.MetricFamily) {
	t.Helper()
	problems, err := promtext.Lint(fams, func(name string) bool { return strings.HasPrefix(name, "kubelet_") })
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("metric %s", p)
	}
}

// TestNodeMetricsProbes: /metrics/probes counts a readiness probe's successes with the
// kubelet's labels, and times them.
func TestNodeMetricsProbes(t *testing.T) {
	t.Parallel()
	p := busyboxPod("probed-metrics", "touch /tmp/ready; while true; do sleep 1; done")
	p.Spec.Containers[0].ReadinessProbe = &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"cat", "/tmp/ready"}}},
		PeriodSeconds: 1,
	}
	created := createPod(t, p)
	waitPod(t, time.Minute, "default/probed-metrics", "ready", func(_ *podsyncv1.Pod, st corev1.PodStatus) bool {
		return len(st.ContainerStatuses) == 1 && st.ContainerStatuses[0].Ready
	})
	ctr := p.Spec.Containers[0].Name
	want := fmt.Sprintf(`{container=%q, namespace="default", pod="probed-metrics", pod_uid=%q, probe_type="Readiness", result="successful"}`, ctr, created.UID)
	successes := func(ctx context.Context) (float64, map[string]*dto.MetricFamily, error) {
		fams, err := scrapeNode(ctx, t, "metrics/probes")
		if err != nil {
			return 0, nil, err
		}
		for _, m := range fams["prober_probe_total"].GetMetric() {
			ls := model.LabelSet{}
			for _, l := range m.GetLabel() {
				ls[model.LabelName(l.GetName())] = model.LabelValue(l.GetValue())
			}
			if ls.String() == want {
				return m.GetCounter().GetValue(), fams, nil
			}
		}
		return 0, fams, nil
	}
	var first float64
	stack.WaitFor(t, 30*time.Second, "prober_probe_total"+want, func(ctx context.Context) (bool, string) {
		n, fams, err := successes(ctx)
		if err != nil {
			return false, err.Error()
		}
		first = n
		return n > 0, fmt.Sprintf("%v", fams["prober_probe_total"])
	})
	stack.WaitFor(t, 30*time.Second, "prober_probe_total"+want+" counting up", func(ctx context.Context) (bool, string) {
		n, _, err := successes(ctx)
		if err != nil {
			return false, err.Error()
		}
		return n >= first+2, fmt.Sprintf("%v, first %v", n, first)
	})
	_, fams, err := successes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, m := range fams["prober_probe_duration_seconds"].GetMetric() {
		ls := model.LabelSet{}
		for _, l := range m.GetLabel() {
			ls[model.LabelName(l.GetName())] = model.LabelValue(l.GetValue())
		}
		if ls.String() == fmt.Sprintf(`{container=%q, namespace="default", pod="probed-metrics", probe_type="Readiness"}`, ctr) && m.GetHistogram().GetSampleCount() > 0 {
			found = true
		}
	}
	if !found {
		t.Errorf("prober_probe_duration_seconds has no series for the pod's readiness probe: %v", fams["prober_probe_duration_seconds"])
	}
	for name := range fams {
		if !strings.HasPrefix(name, "prober_") && name != "process_start_time_seconds" {
			t.Errorf("/metrics/probes carries %s", name)
		}
	}
	// As the kubelet's: the prober's process start time (podsync's).
	if st := fams["process_start_time_seconds"].GetMetric(); len(st) != 1 || st[0].GetGauge().GetValue() < float64(time.Now().Add(-24*time.Hour).Unix()) {
		t.Errorf("/metrics/probes process_start_time_seconds = %v, want podsync's start time", st)
	}
	lintNames(t, fams)
}
