package harnesstest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
)

// podMetrics is a metrics.k8s.io/v1beta1 PodMetrics, as metrics-server serves it.
type podMetrics struct {
	Window     string `json:"window"`
	Containers []struct {
		Name  string            `json:"name"`
		Usage map[string]string `json:"usage"`
	} `json:"containers"`
}

// metricsAPI GETs path of the metrics.k8s.io API through the API server's aggregation layer.
func metricsAPI(ctx context.Context, t *testing.T, path string, into any) error {
	t.Helper()
	b, err := admin(t).CoreV1().RESTClient().Get().AbsPath("/apis/metrics.k8s.io/v1beta1/" + path).DoRaw(ctx)
	if err != nil {
		return fmt.Errorf("%w: %s", err, b)
	}
	return json.Unmarshal(b, into)
}

// metrics-server, scraping node-1's /metrics/resource, shows a pod burning a CPU near 1000m
// in the metrics API and in `kubectl top pod`, and the node in `kubectl top node`.
func TestMetricsServerTopShowsABurningPod(t *testing.T) {
	// Serial: measures a pod's CPU usage (one core).
	createPod(t, busyboxPod("cpu-burner", "while :; do :; done"))
	waitPod(t, time.Minute, "default/cpu-burner", "running", running)

	var cpu resource.Quantity
	stack.WaitFor(t, 3*time.Minute, "metrics-server's CPU of the burning pod", func(ctx context.Context) (bool, string) {
		var pm podMetrics
		if err := metricsAPI(ctx, t, "namespaces/default/pods/cpu-burner", &pm); err != nil {
			return false, err.Error()
		}
		if len(pm.Containers) != 1 {
			return false, fmt.Sprintf("%+v", pm)
		}
		q, err := resource.ParseQuantity(pm.Containers[0].Usage["cpu"])
		if err != nil {
			return false, err.Error()
		}
		cpu = q
		// A second scrape 10 s on may still average the pod's first seconds.
		return q.MilliValue() >= 700, fmt.Sprintf("cpu %s, memory %s over %s", q.String(), pm.Containers[0].Usage["memory"], pm.Window)
	})
	t.Logf("metrics.k8s.io: cpu-burner uses %dm", cpu.MilliValue())
	if cpu.MilliValue() > 1150 {
		t.Errorf("one busy loop shows %dm CPU, more than one core", cpu.MilliValue())
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := stack.Kubectl(ctx, nil, "top", "pod", "cpu-burner", "--namespace=default")
	if err != nil {
		t.Fatalf("kubectl top pod: %v\n%s", err, out)
	}
	t.Logf("kubectl top pod:\n%s", out)
	if !strings.Contains(string(out), "cpu-burner") || !strings.Contains(string(out), "m ") {
		t.Errorf("kubectl top pod does not show cpu-burner's usage:\n%s", out)
	}
	out, err = stack.Kubectl(ctx, nil, "top", "node", podsyncNode)
	if err != nil {
		t.Fatalf("kubectl top node: %v\n%s", err, out)
	}
	t.Logf("kubectl top node:\n%s", out)
	if !strings.Contains(string(out), podsyncNode) || !strings.Contains(string(out), "%") {
		t.Errorf("kubectl top node does not show %s's usage:\n%s", podsyncNode, out)
	}
}
