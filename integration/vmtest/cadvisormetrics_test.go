package vmtest

import (
	"context"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/unitlet/unitlet/shared/promtext"
)

// On the vm node (cgroup v2, the systemd driver, unitlet-status under its shipped unit)
// /metrics/cadvisor, read from the guest's node API with the cluster-admin's certificate
// (guestNodeAPIGet), shows a container limited
// to 64Mi and 500m, spinning and holding 20 MiB in /dev/shm: its limits from cpu.max and
// memory.max, its shares from cpu.weight, its working set, its CPU time rising no faster
// than its quota, its scope under the pod's slice as id, and the pod slice's series.
func TestCAdvisorMetricsOnCgroupV2(t *testing.T) {
	vmNode(t)
	p := vmPod("vm-cadvisor-hog", map[string]string{"main": "dd if=/dev/zero of=/dev/shm/hold bs=1M count=20 && while :; do :; done"})
	p.Spec.Containers[0].Resources.Limits = rl("memory", "64Mi", "cpu", "500m")
	p = runVMPod(t, p)
	container := map[string]string{"container": "main", "pod": p.Name, "namespace": "default"}
	pod := map[string]string{"container": "", "pod": p.Name, "namespace": "default"}

	scrape := func() map[string]*dto.MetricFamily {
		t.Helper()
		get := func(ctx context.Context) (int, string, error) { return guestNodeAPIGet(ctx, t, "/metrics/cadvisor") }
		return stack.Scrape(t, 2*time.Minute, p.Name+"'s working set of 20 MiB in /metrics/cadvisor", get, func(families map[string]*dto.MetricFamily) bool {
			m := promtext.Find(families, "container_memory_working_set_bytes", container)
			return m != nil && promtext.Value(m) >= 20<<20
		})
	}
	before := scrape()
	time.Sleep(10 * time.Second)
	families := scrape()

	c := promtext.Find(families, "container_memory_working_set_bytes", container)
	id, name := promtext.Label(c, "id"), promtext.Label(c, "name")
	if want := strings.TrimPrefix(podSlice(p), "/sys/fs/cgroup") + "/cri-containerd-" + name + ".scope"; name == "" || id != want {
		t.Errorf("id %q name %q: want the container's scope %s", id, name, want)
	}
	if img := promtext.Label(c, "image"); img == "" {
		t.Errorf("no image label: %v", c.GetLabel())
	}
	for _, want := range []struct {
		name   string
		labels map[string]string
		value  float64
	}{
		{"container_spec_memory_limit_bytes", container, 64 << 20},
		{"container_spec_memory_limit_bytes", pod, 64 << 20},
		{"container_spec_cpu_quota", container, 50000},
		{"container_spec_cpu_period", container, 100000},
		// 512 shares made cpu.weight 20, which cAdvisor reads back as 500 shares.
		{"container_spec_cpu_shares", container, 500},
		{"container_scrape_error", map[string]string{}, 0},
	} {
		if m := promtext.Find(families, want.name, want.labels); m == nil || promtext.Value(m) != want.value {
			t.Errorf("%s%v = %v, want %v", want.name, want.labels, m, want.value)
		}
	}
	for _, want := range []string{"container_memory_usage_bytes", "container_memory_rss", "container_memory_cache", "container_cpu_user_seconds_total", "container_cpu_cfs_periods_total", "container_start_time_seconds"} {
		if m := promtext.Find(families, want, container); m == nil || promtext.Value(m) <= 0 {
			t.Errorf("%s%v = %v, want above 0", want, container, m)
		}
	}
	if m := promtext.Find(families, "container_memory_working_set_bytes", pod); m == nil || promtext.Value(m) < 20<<20 {
		t.Errorf("pod slice working set %v, want at least 20 MiB", m)
	}
	if promtext.Find(families, "container_oom_events_total", container) == nil {
		t.Errorf("no container_oom_events_total%v", container)
	}
	cpu := map[string]string{"container": "main", "pod": p.Name, "cpu": "total"}
	cores, err := promtext.Rate(promtext.Find(before, "container_cpu_usage_seconds_total", cpu), promtext.Find(families, "container_cpu_usage_seconds_total", cpu))
	if err != nil {
		t.Fatalf("container_cpu_usage_seconds_total%v: %v", cpu, err)
	}
	t.Logf("%s: %.3f cores, working set %.1f MiB, network series %d", p.Name, cores, promtext.Value(c)/(1<<20), len(families["container_network_receive_bytes_total"].GetMetric()))
	if cores <= 0.05 || cores > 0.6 {
		t.Errorf("container_cpu_usage_seconds_total rose by %.3f cores, want above 0 and at most its 0.5 limit", cores)
	}
}
