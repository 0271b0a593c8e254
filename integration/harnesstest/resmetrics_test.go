package harnesstest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

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

// A container spinning on one CPU with no limit shows in /metrics/resource, read as
// metrics-server reads it (two scrapes through the API server's node proxy, the CPU time's
// rise over the samples' own timestamps), the CPU its cgroup was given over the same
// timestamps, read by the test from the cgroup itself every 250 ms. The cgroup's figure,
// not "one core", is the truth: the machine may be busy with other suites, and then the
// burner gets less.
func TestResourceMetricsShowABusyCPU(t *testing.T) {
	// Serial: measures a pod's CPU usage.
	created := createPod(t, busyboxPod("resmetrics-burner", "while :; do :; done"))
	waitPod(t, time.Minute, "default/resmetrics-burner", "running", func(_ *podsyncv1.Pod, st corev1.PodStatus) bool { return st.Phase == corev1.PodRunning })
	truth := sampleContainerCPU(t, string(created.UID), "main")
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
	// The first scrape whose sample was read after the test began to read the cgroup.
	var before map[string]*dto.MetricFamily
	stack.WaitFor(t, 40*time.Second, "a read of the stats after the cgroup's first sample", func(context.Context) (bool, string) {
		before = scrape()
		m := promtext.Sample(before, "container_cpu_usage_seconds_total", container)
		return m != nil && truth.since(time.UnixMilli(m.GetTimestampMs())), "sampled before the test read the cgroup"
	})
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
	m1 := promtext.Sample(before, "container_cpu_usage_seconds_total", container)
	m2 := promtext.Sample(families, "container_cpu_usage_seconds_total", container)
	// The second sample may have been stamped after the cgroup's latest read (every 250 ms,
	// later on a busy machine): the truth there needs the read after it.
	stack.WaitFor(t, 10*time.Second, "a read of the cgroup after the second sample", func(context.Context) (bool, string) {
		return truth.after(time.UnixMilli(m2.GetTimestampMs())), "not yet"
	})
	want := truth.cores(time.UnixMilli(m1.GetTimestampMs()), time.UnixMilli(m2.GetTimestampMs()))
	if math.IsNaN(want) || want < 0.2 {
		t.Fatalf("the burner's cgroup got %.3f cores between the samples' timestamps (NaN: not sampled then): the machine is too busy to tell", want)
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
	}{{"container_cpu_usage_seconds_total", container}, {"pod_cpu_usage_seconds_total", pod}} {
		// 0.1 cores: the cgroup is read every 250 ms and interpolated, and the pod's
		// cgroup also has its sandbox's pause process.
		if got := cores(c.name, c.labels, before, families); got < want-0.1 || got > want+0.1 {
			t.Errorf("%s%v rose by %.3f cores between two scrapes; the container's cgroup got %.3f cores then", c.name, c.labels, got, want)
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

// cpuSamples is a cgroup's CPU time, read every 250 ms, in units of which perSecond make
// a second.
type cpuSamples struct {
	mu        sync.Mutex
	at        []time.Time
	usage     []float64
	perSecond float64
}

// sampleContainerCPU reads the CPU time of the pod's container name from its cgroup in
// the background, until the test ends.
func sampleContainerCPU(t *testing.T, uid, name string) *cpuSamples {
	t.Helper()
	var id string
	for _, c := range runtimeContainers(context.Background(), t, uid) {
		if c.Metadata.Name == name && c.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
			id = c.Id
		}
	}
	if id == "" {
		t.Fatalf("pod %s: no running container %s in the runtime", uid, name)
	}
	// cgroup v2: cpu.stat's usage_usec; v1 (these machines): the cpuacct hierarchy's
	// cpuacct.usage, in nanoseconds.
	root, file, perSecond := "/sys/fs/cgroup/cpuacct", "cpuacct.usage", 1e9
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		root, file, perSecond = "/sys/fs/cgroup", "cpu.stat", 1e6
	}
	var dir string
	_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		switch {
		case err != nil && d != nil && d.IsDir():
			return filepath.SkipDir
		case err != nil || !d.IsDir():
			return nil
		}
		if strings.Contains(d.Name(), id) {
			dir = path
			return filepath.SkipAll
		}
		return nil
	})
	if dir == "" {
		t.Fatalf("no cgroup under %s names container %s", root, id)
	}
	s := &cpuSamples{perSecond: perSecond}
	usage := func() (float64, error) {
		b, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			return 0, err
		}
		text := strings.TrimSpace(string(b))
		if file == "cpu.stat" {
			text = ""
			for _, line := range strings.Split(string(b), "\n") {
				if v, ok := strings.CutPrefix(line, "usage_usec "); ok {
					text = v
				}
			}
		}
		return strconv.ParseFloat(text, 64)
	}
	if _, err := usage(); err != nil {
		t.Fatalf("the CPU time of container %s in %s: %v", id, dir, err)
	}
	read := func() {
		if v, err := usage(); err == nil {
			s.mu.Lock()
			s.at, s.usage = append(s.at, time.Now()), append(s.usage, v)
			s.mu.Unlock()
		}
	}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			read()
			select {
			case <-stop:
				return
			case <-time.After(250 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() {
		close(stop)
		<-done
	})
	return s
}

// since reports whether the cgroup was read before when.
func (s *cpuSamples) since(when time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.at) > 0 && s.at[0].Before(when)
}

// after reports whether the cgroup was read after when.
func (s *cpuSamples) after(when time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.at) > 0 && s.at[len(s.at)-1].After(when)
}

// cores is the CPU the cgroup got between from and to, in cores, its CPU time
// interpolated between the samples around each.
func (s *cpuSamples) cores(from, to time.Time) float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	at := func(when time.Time) float64 {
		for i := 1; i < len(s.at); i++ {
			if !s.at[i].Before(when) {
				span := s.at[i].Sub(s.at[i-1]).Seconds()
				if span <= 0 {
					return s.usage[i]
				}
				f := when.Sub(s.at[i-1]).Seconds() / span
				return s.usage[i-1] + f*(s.usage[i]-s.usage[i-1])
			}
		}
		return math.NaN()
	}
	return (at(to) - at(from)) / s.perSecond / to.Sub(from).Seconds()
}
