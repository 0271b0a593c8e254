package harnesstest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	podsyncv1 "github.com/unitlet/unitlet/proto/unitlet/podsync/v1"
	"github.com/unitlet/unitlet/shared/promtext"
)

// nodeProxyGet GETs path of podsyncNode's node API through the API server's node proxy, as
// metrics-server and Prometheus reach a kubelet: the status and the body (for an error
// status, client-go's message, which quotes the body).
func nodeProxyGet(ctx context.Context, t *testing.T, path string) (int, string) {
	t.Helper()
	body, err := admin(t).CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes/" + podsyncNode + "/proxy" + path).DoRaw(ctx)
	var status apierrors.APIStatus
	switch {
	case err == nil:
		return http.StatusOK, string(body)
	case errors.As(err, &status):
		return int(status.Status().Code), status.Status().Message
	}
	return 0, err.Error()
}

// parseExposition reads a Prometheus text exposition, failing the test on a parse error or
// on a series given twice.
func parseExposition(t *testing.T, body string) map[string]*dto.MetricFamily {
	t.Helper()
	families, err := promtext.Parse(body)
	if err != nil {
		t.Fatalf("%v\n%s", err, body)
	}
	return families
}

// A container spinning on one CPU with no limit shows as about one core in
// /metrics/resource, read as metrics-server reads it: two scrapes through the API
// server's node proxy, the CPU time's rise over the samples' own timestamps.
func TestResourceMetricsShowABusyCPU(t *testing.T) {
	// Serial: measures a pod's CPU usage (0.8-1.1 cores).
	createPod(t, busyboxPod("resmetrics-burner", "while :; do :; done"))
	waitPod(t, time.Minute, "default/resmetrics-burner", "running", func(_ *podsyncv1.Pod, st corev1.PodStatus) bool { return st.Phase == corev1.PodRunning })
	container := map[string]string{"container": "main", "pod": "resmetrics-burner", "namespace": "default"}
	pod := map[string]string{"pod": "resmetrics-burner", "namespace": "default"}

	// cores is the rise of a CPU counter between two scrapes over its samples' timestamps.
	cores := func(name string, labels map[string]string, before, after map[string]*dto.MetricFamily) float64 {
		t.Helper()
		m1, m2 := promtext.Sample(before, name, labels), promtext.Sample(after, name, labels)
		if m1 == nil || m2 == nil {
			t.Fatalf("no %s%v in both scrapes", name, labels)
		}
		if m2.GetTimestampMs() <= m1.GetTimestampMs() {
			t.Fatalf("%s stamped %d then %d: want the time each sample was read", name, m1.GetTimestampMs(), m2.GetTimestampMs())
		}
		secs := float64(m2.GetTimestampMs()-m1.GetTimestampMs()) / 1000
		c := (promtext.Value(m2) - promtext.Value(m1)) / secs
		t.Logf("%s %v: %.3f cores (%.2f s of cpu over %.2f s)", name, labels, c, promtext.Value(m2)-promtext.Value(m1), secs)
		return c
	}
	scrape := func() map[string]*dto.MetricFamily {
		t.Helper()
		var families map[string]*dto.MetricFamily
		stack.WaitFor(t, 30*time.Second, "container_cpu_usage_seconds_total of resmetrics-burner in /metrics/resource", func(ctx context.Context) (bool, string) {
			code, body := nodeProxyGet(ctx, t, "/metrics/resource")
			if code != http.StatusOK {
				return false, fmt.Sprintf("%d %s", code, body)
			}
			families = parseExposition(t, body)
			return promtext.Sample(families, "container_cpu_usage_seconds_total", container) != nil, body
		})
		return families
	}
	before := scrape()
	time.Sleep(10 * time.Second)
	// The samples are stamped when the stats were read, as the kubelet's: its summary is
	// refreshed every 10 s (housekeeping), so a scrape may still serve the previous one.
	var families map[string]*dto.MetricFamily
	stack.WaitFor(t, 30*time.Second, "a newer read of the stats in /metrics/resource", func(context.Context) (bool, string) {
		families = scrape()
		m1 := promtext.Sample(before, "container_cpu_usage_seconds_total", container)
		m2 := promtext.Sample(families, "container_cpu_usage_seconds_total", container)
		return m1 != nil && m2 != nil && m2.GetTimestampMs() > m1.GetTimestampMs(), "the same timestamp as the first scrape"
	})
	for _, c := range []struct {
		name   string
		labels map[string]string
	}{{"container_cpu_usage_seconds_total", container}, {"pod_cpu_usage_seconds_total", pod}} {
		if got := cores(c.name, c.labels, before, families); got < 0.8 || got > 1.1 {
			t.Errorf("%s%v rose by %.3f cores between two scrapes, want about 1 (0.8 to 1.1)", c.name, c.labels, got)
		}
	}

	for _, want := range []struct {
		name   string
		labels map[string]string
	}{
		{"node_cpu_usage_seconds_total", map[string]string{}},
		{"node_memory_working_set_bytes", map[string]string{}},
		{"container_memory_working_set_bytes", container},
		{"container_start_time_seconds", container},
		{"pod_cpu_usage_seconds_total", pod},
		{"pod_memory_working_set_bytes", pod},
		{"resource_scrape_error", map[string]string{}},
	} {
		m := promtext.Sample(families, want.name, want.labels)
		switch {
		case m == nil:
			t.Errorf("no %s%v in /metrics/resource", want.name, want.labels)
		case want.name == "resource_scrape_error":
			if v := promtext.Value(m); v != 0 {
				t.Errorf("resource_scrape_error %v, want 0", v)
			}
		case promtext.Value(m) <= 0:
			t.Errorf("%s%v = %v, want above 0", want.name, want.labels, promtext.Value(m))
		}
	}
}

// healthzURL is podsyncNode's /healthz on its healthzPort (plain HTTP on 127.0.0.1: the
// machine shares the host's network).
func healthzURL() string {
	return fmt.Sprintf("http://127.0.0.1:%d/healthz", nodeAPIPort()-2)
}

// nodeAPIPort is podsyncNode's node API port: the stack's nodeAPIPort, else the kubelet's
// 10250.
func nodeAPIPort() int {
	for _, n := range stack.Stack().Nodes {
		if n.Name == podsyncNode && n.NodeAPIPort != 0 {
			return n.NodeAPIPort
		}
	}
	return 10250
}

func getHealthz(ctx context.Context) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, healthzURL(), nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// /healthz on healthzPort and on the node API answers ok only while every unitlet service
// of the node answers: with unitlet-certs stopped both fail naming it, and recover once it
// is started again.
func TestHealthzMeansEveryService(t *testing.T) {
	// Serial: stops unitlet-certs.
	waitNodeReady(t, 90*time.Second)
	healthzOK := func(what string) {
		t.Helper()
		stack.WaitFor(t, 30*time.Second, what, func(ctx context.Context) (bool, string) {
			code, body, err := getHealthz(ctx)
			if err != nil || code != http.StatusOK || body != "ok" {
				return false, fmt.Sprintf("%s: %d %q %v", healthzURL(), code, body, err)
			}
			code, body = nodeProxyGet(ctx, t, "/healthz")
			return code == http.StatusOK && body == "ok", fmt.Sprintf("node API /healthz: %d %q", code, body)
		})
	}
	healthzOK("both /healthz ok with every service running")

	if err := stack.StopService(podsyncNode, "certs"); err != nil {
		t.Fatal(err)
	}
	restarted := false
	defer func() {
		if !restarted {
			restartServices(t)
		}
	}()
	seen := ""
	stack.WaitFor(t, 30*time.Second, "both /healthz 500 naming unitlet-certs", func(ctx context.Context) (bool, string) {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		code, body, err := getHealthz(ctx)
		pcode, pbody := nodeProxyGet(ctx, t, "/healthz")
		named := func(code int, body string) bool {
			return code == http.StatusInternalServerError && strings.Contains(body, "[-]unitlet-certs failed")
		}
		state := fmt.Sprintf("%s: %d %q %v; node API /healthz: %d %q", healthzURL(), code, body, err, pcode, pbody)
		if state != seen {
			t.Log(state)
			seen = state
		}
		return err == nil && named(code, body) && named(pcode, pbody), state
	})
	restartServices(t)
	restarted = true
	healthzOK("both /healthz ok again once unitlet-certs runs")
}

// The machine as /metrics/cadvisor describes it (machine_cpu_cores, machine_memory_bytes):
// the node's CPUs and memory as its capacity says, labelled with its boot ID and machine
// ID. The node API serves no /spec, as the v1.36 kubelet: the API server's node proxy
// answers 404.
func TestMachineMetricsDescribeTheMachine(t *testing.T) {
	t.Parallel()
	node := waitNodeReady(t, 90*time.Second)
	if code, body := nodeProxyGet(context.Background(), t, "/spec/"); code != http.StatusNotFound {
		t.Errorf("GET /spec/ through the node proxy: %d %.300s, want 404 (the v1.36 kubelet has no /spec)", code, body)
	}
	code, body := nodeProxyGet(context.Background(), t, "/metrics/cadvisor")
	if code != http.StatusOK {
		t.Fatalf("GET /metrics/cadvisor: %d %.300s", code, body)
	}
	families := parseExposition(t, body)
	for _, want := range []struct {
		name  string
		value int64
	}{
		{"machine_cpu_cores", node.Status.Capacity.Cpu().Value()},
		{"machine_memory_bytes", node.Status.Capacity.Memory().Value()},
	} {
		m := promtext.Find(families, want.name, map[string]string{})
		if m == nil {
			t.Errorf("no %s", want.name)
			continue
		}
		if int64(promtext.Value(m)) != want.value {
			t.Errorf("%s %v, the Node's capacity %d", want.name, promtext.Value(m), want.value)
		}
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		// The node's boot id as its Node reports it: an nspawn machine has its own, a new
		// one each time it boots, not the host kernel's.
		if labels["boot_id"] != node.Status.NodeInfo.BootID || labels["machine_id"] == "" {
			t.Errorf("%s labels %v, want the Node's boot id %q and a machine id", want.name, labels, node.Status.NodeInfo.BootID)
		}
	}
}
