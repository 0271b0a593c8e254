package cadvisormetrics

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/unitlet/unitlet/services/status/machineinfo"
	"github.com/unitlet/unitlet/shared/promtext"
)

const (
	podUID   = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
	sandbox  = "5b5b5b5b5b5b5b5b5b5b5b5b5b5b5b5b5b5b5b5b5b5b5b5b5b5b5b5b5b5b5b5b"
	ctrID    = "c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0"
	imageID  = "sha256:1111"
	imageTag = "unitlet.local/busybox:1"
)

type fakeRuntime struct{ sandboxStats bool }

func (fakeRuntime) ListPodSandbox(context.Context, *runtimeapi.ListPodSandboxRequest, ...grpc.CallOption) (*runtimeapi.ListPodSandboxResponse, error) {
	return &runtimeapi.ListPodSandboxResponse{Items: []*runtimeapi.PodSandbox{{
		Id: sandbox, CreatedAt: time.Unix(1700000000, 0).UnixNano(), State: runtimeapi.PodSandboxState_SANDBOX_READY,
		Metadata: &runtimeapi.PodSandboxMetadata{Name: "web", Namespace: "default", Uid: podUID},
	}}}, nil
}

func (fakeRuntime) ListContainers(context.Context, *runtimeapi.ListContainersRequest, ...grpc.CallOption) (*runtimeapi.ListContainersResponse, error) {
	return &runtimeapi.ListContainersResponse{Containers: []*runtimeapi.Container{{
		Id: ctrID, PodSandboxId: sandbox, ImageRef: imageID, CreatedAt: time.Unix(1700000100, 0).UnixNano(),
		State:  runtimeapi.ContainerState_CONTAINER_RUNNING,
		Labels: map[string]string{podNameLabel: "web", podNamespaceLabel: "default", containerNameLabel: "app"},
	}}}, nil
}

func (fakeRuntime) ListContainerStats(context.Context, *runtimeapi.ListContainerStatsRequest, ...grpc.CallOption) (*runtimeapi.ListContainerStatsResponse, error) {
	return &runtimeapi.ListContainerStatsResponse{Stats: []*runtimeapi.ContainerStats{{
		Attributes:    &runtimeapi.ContainerAttributes{Id: ctrID},
		WritableLayer: &runtimeapi.FilesystemUsage{FsId: &runtimeapi.FilesystemIdentifier{Mountpoint: "/nonexistent/snapshots"}, UsedBytes: &runtimeapi.UInt64Value{Value: 8192}},
	}}}, nil
}

func (f fakeRuntime) ListPodSandboxStats(context.Context, *runtimeapi.ListPodSandboxStatsRequest, ...grpc.CallOption) (*runtimeapi.ListPodSandboxStatsResponse, error) {
	if !f.sandboxStats {
		return nil, status.Error(codes.Unimplemented, "not in containerd 1.6")
	}
	eth0 := &runtimeapi.NetworkInterfaceUsage{Name: "eth0", RxBytes: &runtimeapi.UInt64Value{Value: 100}, RxErrors: &runtimeapi.UInt64Value{Value: 1}, TxBytes: &runtimeapi.UInt64Value{Value: 200}, TxErrors: &runtimeapi.UInt64Value{}}
	return &runtimeapi.ListPodSandboxStatsResponse{Stats: []*runtimeapi.PodSandboxStats{{
		Attributes: &runtimeapi.PodSandboxAttributes{Id: sandbox},
		Linux:      &runtimeapi.LinuxPodSandboxStats{Network: &runtimeapi.NetworkUsage{DefaultInterface: eth0, Interfaces: []*runtimeapi.NetworkInterfaceUsage{eth0}}},
	}}}, nil
}

func (fakeRuntime) ListImages(context.Context, *runtimeapi.ListImagesRequest, ...grpc.CallOption) (*runtimeapi.ListImagesResponse, error) {
	return &runtimeapi.ListImagesResponse{Images: []*runtimeapi.Image{{Id: imageID, RepoTags: []string{imageTag}}}}, nil
}

func write(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// v1Tree is a cgroupfs-driver pod cgroup and its container in v1 hierarchies.
func v1Tree(t *testing.T) string {
	mount := t.TempDir()
	pod := "node/kubepods/burstable/pod" + podUID
	for _, c := range []struct{ path, usage, limit string }{{pod, "300000000", "9223372036854771712"}, {pod + "/" + ctrID, "200000000", "67108864"}} {
		write(t, filepath.Join(mount, "cpuacct", c.path), map[string]string{"cpuacct.usage": "2500000000\n", "cpuacct.stat": "user 150\nsystem 50\n"})
		write(t, filepath.Join(mount, "cpu", c.path), map[string]string{"cpu.stat": "nr_periods 40\nnr_throttled 10\nthrottled_time 500000000\n", "cpu.shares": "512\n", "cpu.cfs_quota_us": "50000\n", "cpu.cfs_period_us": "100000\n"})
		write(t, filepath.Join(mount, "memory", c.path), map[string]string{
			"memory.usage_in_bytes": c.usage + "\n", "memory.limit_in_bytes": c.limit + "\n", "memory.failcnt": "3\n",
			"memory.stat":                 "cache 1\nrss 2\ntotal_cache 30000000\ntotal_rss 150000000\ntotal_inactive_file 10000000\n",
			"memory.memsw.usage_in_bytes": c.usage + "\n", "memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
		})
	}
	// The sandbox's own cgroup: no series of its own.
	write(t, filepath.Join(mount, "memory", pod, sandbox), nil)
	return mount
}

// v2Tree is the same pod under the systemd driver in the v2 hierarchy.
func v2Tree(t *testing.T) string {
	mount := t.TempDir()
	write(t, mount, map[string]string{"cgroup.controllers": "cpu memory pids\n"})
	pod := "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + strings.ReplaceAll(podUID, "-", "_") + ".slice"
	for _, c := range []struct{ path, usage, max string }{{pod, "300000000", "max"}, {pod + "/cri-containerd-" + ctrID + ".scope", "200000000", "67108864"}} {
		write(t, filepath.Join(mount, c.path), map[string]string{
			"cpu.stat":   "usage_usec 2500000\nuser_usec 1500000\nsystem_usec 500000\nnr_periods 40\nnr_throttled 10\nthrottled_usec 500000\n",
			"cpu.weight": "20\n", "cpu.max": "50000 100000\n",
			"memory.current": c.usage + "\n", "memory.max": c.max + "\n", "memory.swap.current": "0\n",
			"memory.stat":   "anon 150000000\nfile 30000000\ninactive_file 10000000\n",
			"memory.events": "low 0\nhigh 0\nmax 3\noom 2\noom_kill 2\n",
		})
	}
	return mount
}

func scrape(t *testing.T, mount, root string, rt fakeRuntime) string {
	t.Helper()
	h := Handler(Options{
		Runtime: rt, CgroupMount: mount, CgroupRoot: root,
		Machine: func() (*machineinfo.MachineInfo, error) {
			return &machineinfo.MachineInfo{NumCores: 2, MemoryCapacity: 4 << 30, BootID: "b", MachineID: "m", SystemUUID: "u"}, nil
		},
		Clock: clocktesting.NewFakeClock(time.Unix(1700001000, 0)),
		Log:   slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics/cadvisor", nil))
	if rec.Code != 200 {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	families, err := promtext.Parse(rec.Body.String())
	if err != nil {
		t.Fatalf("%v\n%s", err, rec.Body)
	}
	// Prometheus's conventions, but for the names cAdvisor has always served.
	problems, err := promtext.Lint(families, func(name string) bool { return cadvisorNames[name] })
	if err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
	return rec.Body.String()
}

// cadvisorNames are the names promlint faults that cAdvisor (and so the kubelet's
// /metrics/cadvisor) has served for years: dashboards query them as they are.
var cadvisorNames = map[string]bool{
	"container_memory_failcnt": true, // a counter without _total
}

// lines are the exposition's sample lines for the container app and machine.
func wantLines(t *testing.T, body string, want []string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(body, "\n"+w+"\n") {
			t.Errorf("no line %q in:\n%s", w, body)
		}
	}
}

// with is the label set ls ({a="x",...}) with name="value" added in its sorted place.
func with(ls, name, value string) string {
	pairs := strings.Split(strings.Trim(ls, "{}"), ",")
	pairs = append(pairs, name+`="`+value+`"`)
	slices.Sort(pairs)
	return "{" + strings.Join(pairs, ",") + "}"
}

const stamp = " 1700001000000"

func TestCgroupV1CgroupfsDriver(t *testing.T) {
	body := scrape(t, v1Tree(t), "/node", fakeRuntime{})
	ctr := `{container="app",id="/node/kubepods/burstable/pod` + podUID + `/` + ctrID + `",image="` + imageTag + `",name="` + ctrID + `",namespace="default",pod="web"}`
	pod := `{container="",id="/node/kubepods/burstable/pod` + podUID + `",image="",name="",namespace="default",pod="web"}`
	wantLines(t, body, []string{
		`container_cpu_usage_seconds_total` + with(ctr, "cpu", "total") + ` 2.5` + stamp,
		`container_cpu_user_seconds_total` + ctr + ` 1.5` + stamp,
		`container_cpu_system_seconds_total` + ctr + ` 0.5` + stamp,
		`container_cpu_cfs_periods_total` + ctr + ` 40` + stamp,
		`container_cpu_cfs_throttled_periods_total` + ctr + ` 10` + stamp,
		`container_cpu_cfs_throttled_seconds_total` + ctr + ` 0.5` + stamp,
		`container_memory_usage_bytes` + ctr + ` 2e+08` + stamp,
		`container_memory_working_set_bytes` + ctr + ` 1.9e+08` + stamp,
		`container_memory_rss` + ctr + ` 1.5e+08` + stamp,
		`container_memory_cache` + ctr + ` 3e+07` + stamp,
		`container_memory_swap` + ctr + ` 0` + stamp,
		`container_memory_failcnt` + ctr + ` 3` + stamp,
		`container_oom_events_total` + ctr + ` 2` + stamp,
		`container_spec_memory_limit_bytes` + ctr + ` 6.7108864e+07`,
		`container_spec_cpu_quota` + ctr + ` 50000`,
		`container_spec_cpu_period` + ctr + ` 100000`,
		`container_spec_cpu_shares` + ctr + ` 512`,
		`container_start_time_seconds` + ctr + ` 1.7000001e+09`,
		`container_last_seen` + ctr + ` 1.700001e+09` + stamp,
		`container_fs_usage_bytes` + with(ctr, "device", "/nonexistent/snapshots") + ` 8192` + stamp,
		// The pod cgroup: no memory limit shows as 0.
		`container_spec_memory_limit_bytes` + pod + ` 0`,
		`container_memory_working_set_bytes` + pod + ` 2.9e+08` + stamp,
		`container_start_time_seconds` + pod + ` 1.7e+09`,
		`machine_cpu_cores{boot_id="b",machine_id="m",system_uuid="u"} 2`,
		`machine_memory_bytes{boot_id="b",machine_id="m",system_uuid="u"} 4.294967296e+09`,
		`container_scrape_error 0`,
	})
	for _, absent := range []string{sandbox + `"`, "container_network_", "container_fs_limit_bytes"} {
		if strings.Contains(body, absent) {
			t.Errorf("%q in:\n%s", absent, body)
		}
	}
}

func TestCgroupV2SystemdDriver(t *testing.T) {
	body := scrape(t, v2Tree(t), "/", fakeRuntime{sandboxStats: true})
	podPath := "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + strings.ReplaceAll(podUID, "-", "_") + ".slice"
	ctr := `{container="app",id="` + podPath + `/cri-containerd-` + ctrID + `.scope",image="` + imageTag + `",name="` + ctrID + `",namespace="default",pod="web"}`
	pod := `{container="",id="` + podPath + `",image="",name="",namespace="default",pod="web"}`
	wantLines(t, body, []string{
		`container_cpu_usage_seconds_total` + with(ctr, "cpu", "total") + ` 2.5` + stamp,
		`container_cpu_user_seconds_total` + ctr + ` 1.5` + stamp,
		`container_cpu_cfs_throttled_seconds_total` + ctr + ` 0.5` + stamp,
		`container_memory_working_set_bytes` + ctr + ` 1.9e+08` + stamp,
		`container_memory_rss` + ctr + ` 1.5e+08` + stamp,
		`container_memory_cache` + ctr + ` 3e+07` + stamp,
		`container_oom_events_total` + ctr + ` 2` + stamp,
		`container_spec_memory_limit_bytes` + ctr + ` 6.7108864e+07`,
		`container_spec_cpu_quota` + ctr + ` 50000`,
		// cpu.weight 20 is what the runtime made of 512 shares.
		`container_spec_cpu_shares` + ctr + ` 500`,
		`container_spec_memory_limit_bytes` + pod + ` 0`,
		`container_network_receive_bytes_total` + with(pod, "interface", "eth0") + ` 100` + stamp,
		`container_network_receive_errors_total` + with(pod, "interface", "eth0") + ` 1` + stamp,
		`container_network_transmit_bytes_total` + with(pod, "interface", "eth0") + ` 200` + stamp,
		`container_network_transmit_errors_total` + with(pod, "interface", "eth0") + ` 0` + stamp,
	})
	// v2 has no failcnt file.
	if strings.Contains(body, "container_memory_failcnt") {
		t.Errorf("container_memory_failcnt on v2:\n%s", body)
	}
}

type failingRuntime struct{ fakeRuntime }

func (failingRuntime) ListContainers(context.Context, *runtimeapi.ListContainersRequest, ...grpc.CallOption) (*runtimeapi.ListContainersResponse, error) {
	return nil, status.Error(codes.Unavailable, "runtime down")
}

// A runtime that cannot be read is container_scrape_error 1, not a failed page.
func TestRuntimeDownIsAScrapeError(t *testing.T) {
	h := Handler(Options{Runtime: failingRuntime{}, CgroupMount: v1Tree(t), CgroupRoot: "/node", Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics/cadvisor", nil))
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), "\ncontainer_scrape_error 1\n") {
		t.Fatalf("%d\n%s", rec.Code, rec.Body)
	}
}
