package harnesstest

import (
	"context"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	podsyncv1 "github.com/unitlet/unitlet/proto/unitlet/podsync/v1"
	"github.com/unitlet/unitlet/shared/promtext"
)

// A container limited to 64Mi and 500m, spinning and holding 20 MiB in /dev/shm, shows in
// /metrics/cadvisor (read through the API server's node proxy, as Prometheus scrapes a
// kubelet) with its limits, its working set, its rising CPU time and cAdvisor's labels,
// from the cgroups the stack's containerd made on the host's cgroup v1 tree; its pod
// cgroup shows with container "".
func TestCAdvisorMetricsShowALimitedContainer(t *testing.T) {
	// Serial: measures a container's CPU rate (0.35-0.6 cores).
	p := busyboxPod("cadvisor-hog", "dd if=/dev/zero of=/dev/shm/hold bs=1M count=20 && while :; do :; done")
	p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{
		corev1.ResourceMemory: resource.MustParse("64Mi"),
		corev1.ResourceCPU:    resource.MustParse("500m"),
	}
	createPod(t, p)
	waitPod(t, time.Minute, "default/cadvisor-hog", "running", func(_ *podsyncv1.Pod, st corev1.PodStatus) bool { return st.Phase == corev1.PodRunning })
	container := map[string]string{"container": "main", "pod": "cadvisor-hog", "namespace": "default"}
	pod := map[string]string{"container": "", "pod": "cadvisor-hog", "namespace": "default"}

	scrape := func() map[string]*dto.MetricFamily {
		t.Helper()
		get := func(ctx context.Context) (int, string, error) {
			code, body := nodeProxyGet(ctx, t, "/metrics/cadvisor")
			return code, body, nil
		}
		return stack.Scrape(t, time.Minute, "cadvisor-hog's working set of 20 MiB in /metrics/cadvisor", get, func(families map[string]*dto.MetricFamily) bool {
			m := promtext.Find(families, "container_memory_working_set_bytes", container)
			return m != nil && promtext.Value(m) >= 20<<20
		})
	}
	before := scrape()
	time.Sleep(5 * time.Second)
	families := scrape()

	c := promtext.Find(families, "container_memory_working_set_bytes", container)
	for _, l := range []string{"id", "name", "image"} {
		if promtext.Label(c, l) == "" {
			t.Errorf("container_memory_working_set_bytes%v has no %s label: %v", container, l, c.GetLabel())
		}
	}
	if id, name := promtext.Label(c, "id"), promtext.Label(c, "name"); !strings.HasPrefix(id, "/unitlet-") || !strings.Contains(id, "/kubepods/") || !strings.HasSuffix(id, "/"+name) {
		t.Errorf("id %q name %q: want the container's cgroup path under the node's cgroupRoot, ending in its ID", id, name)
	}
	if img := promtext.Label(c, "image"); img != "unitlet.local/busybox:1" {
		t.Errorf("image label %q, want unitlet.local/busybox:1", img)
	}
	for _, want := range []struct {
		name   string
		labels map[string]string
		value  float64
	}{
		{"container_spec_memory_limit_bytes", container, 64 << 20},
		{"container_spec_cpu_quota", container, 50000},
		{"container_spec_cpu_period", container, 100000},
		{"container_spec_cpu_shares", container, 512},
		{"container_scrape_error", map[string]string{}, 0},
	} {
		m := promtext.Find(families, want.name, want.labels)
		if m == nil || promtext.Value(m) != want.value {
			t.Errorf("%s%v = %v, want %v", want.name, want.labels, m, want.value)
		}
	}
	for _, want := range []struct {
		name   string
		labels map[string]string
	}{
		{"container_memory_usage_bytes", container},
		{"container_memory_cache", container},
		{"container_cpu_user_seconds_total", container},
		{"container_cpu_cfs_periods_total", container},
		{"container_cpu_cfs_throttled_periods_total", container},
		{"container_start_time_seconds", container},
		{"container_last_seen", container},
		{"container_memory_working_set_bytes", pod},
		{"container_cpu_usage_seconds_total", pod},
		{"machine_cpu_cores", map[string]string{}},
		{"machine_memory_bytes", map[string]string{}},
		// The pod's traffic, from the runtime's pod sandbox stats: at least its IPv6
		// neighbour discovery.
		{"container_network_transmit_bytes_total", withInterface(pod)},
	} {
		if m := promtext.Find(families, want.name, want.labels); m == nil || promtext.Value(m) <= 0 {
			t.Errorf("%s%v = %v, want above 0", want.name, want.labels, m)
		}
	}
	if promtext.Find(families, "container_network_receive_bytes_total", withInterface(pod)) == nil {
		t.Errorf("no container_network_receive_bytes_total%v", withInterface(pod))
	}
	for _, want := range []string{"container_memory_rss", "container_memory_failcnt", "container_oom_events_total"} {
		if promtext.Find(families, want, container) == nil {
			t.Errorf("no %s%v", want, container)
		}
	}
	// Throttled at half a core, the spinning container's CPU time rises by about 0.5 s a
	// second.
	cpu := map[string]string{"container": "main", "pod": "cadvisor-hog", "namespace": "default", "cpu": "total"}
	cores, err := promtext.Rate(promtext.Find(before, "container_cpu_usage_seconds_total", cpu), promtext.Find(families, "container_cpu_usage_seconds_total", cpu))
	if err != nil {
		t.Fatalf("container_cpu_usage_seconds_total%v: %v", cpu, err)
	}
	t.Logf("cadvisor-hog: %.3f cores, working set %.1f MiB, network series: %d", cores, promtext.Value(c)/(1<<20), len(families["container_network_receive_bytes_total"].GetMetric()))
	start := time.Now()
	code, body := nodeProxyGet(context.Background(), t, "/metrics/cadvisor")
	t.Logf("one scrape through the node proxy: %d, %d bytes, %d lines in %v", code, len(body), strings.Count(body, "\n"), time.Since(start).Round(time.Millisecond))
	if cores < 0.35 || cores > 0.6 {
		t.Errorf("container_cpu_usage_seconds_total rose by %.3f cores, want about 0.5 (its limit)", cores)
	}
}

func withInterface(labels map[string]string) map[string]string {
	out := map[string]string{"interface": "eth0"}
	for k, v := range labels {
		out[k] = v
	}
	return out
}
