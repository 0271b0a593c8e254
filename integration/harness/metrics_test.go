package harness

import (
	"path/filepath"
	"testing"
)

func TestLoadStackMetrics(t *testing.T) {
	for _, f := range []string{"single-node.yaml", "vm-node.yaml", "faults.yaml"} {
		if _, err := LoadStack(filepath.Join("..", "stacks", f)); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	dir := t.TempDir()
	node := func(metrics string) string {
		return "name: m\nnodes:\n  - name: node-a\n    backend: process\n    services: [config, podsync]\n    metrics: " + metrics + "\n"
	}
	for metrics, want := range map[string]string{
		`{podsync: "unix:podsync-metrics.sock"}`:                  "",
		`{config: "127.0.0.1:10271", podsync: "unix:p.sock"}`:     "",
		`{status: "unix:status-metrics.sock"}`:                    "runs no unitlet-status",
		`{podsync: "unix:/run/unitlet/podsync-metrics.sock"}`:     "no directory",
		`{podsync: "unix:"}`:                                      "unix:NAME",
		`{podsync: "/run/unitlet/podsync-metrics.sock"}`:          "host:port",
		`{config: "unix:m.sock", podsync: "unix:m.sock"}`:         "unitlet-config has it too",
		`{config: "127.0.0.1:10271", podsync: "127.0.0.1:10271"}`: "has it too",
	} {
		checkLoadStack(t, dir, node(metrics), want)
	}
}

func TestMetricsAddr(t *testing.T) {
	n := Node{Metrics: map[string]string{"podsync": "unix:podsync-metrics.sock", "config": "127.0.0.1:10271"}}
	for svc, want := range map[string]string{
		"podsync": "UNITLET_METRICS_SOCKET=/run/unitlet/podsync-metrics.sock",
		"config":  "UNITLET_METRICS_ADDR=127.0.0.1:10271",
		"status":  "",
	} {
		if got := metricsEnv(n, svc, "/run/unitlet"); got != want {
			t.Errorf("metricsEnv(%s) = %q, want %q", svc, got, want)
		}
	}
	for svc, want := range map[string]string{
		"podsync": "Environment=UNITLET_METRICS_SOCKET=/run/unitlet/podsync-metrics.sock\n",
		"config":  "Environment=UNITLET_METRICS_ADDR=127.0.0.1:10271\n",
		"status":  "",
	} {
		if got := metricsDropIn(n, svc); got != want {
			t.Errorf("metricsDropIn(%s) = %q, want %q", svc, got, want)
		}
	}
}
