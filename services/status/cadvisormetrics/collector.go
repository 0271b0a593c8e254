// Package cadvisormetrics serves the node API's /metrics/cadvisor: the container_* series
// the kubelet's embedded cAdvisor gives for each pod cgroup and each running container
// (CPU, memory, throttling, OOM kills, the writable layer, the pod's network and the
// cgroup's limits), with cAdvisor's names, help texts and labels (container, id, image,
// name, namespace, pod), and the machine's cores and memory. The figures come from the
// cgroup files, as cAdvisor reads them, and from the CRI for what only the runtime knows.
package cadvisormetrics

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"

	"github.com/unitlet/unitlet/services/status/machineinfo"
)

// Runtime is the part of the CRI the series read. shared/cri.Client satisfies it.
type Runtime interface {
	ListPodSandbox(ctx context.Context, in *runtimeapi.ListPodSandboxRequest, opts ...grpc.CallOption) (*runtimeapi.ListPodSandboxResponse, error)
	ListContainers(ctx context.Context, in *runtimeapi.ListContainersRequest, opts ...grpc.CallOption) (*runtimeapi.ListContainersResponse, error)
	ListContainerStats(ctx context.Context, in *runtimeapi.ListContainerStatsRequest, opts ...grpc.CallOption) (*runtimeapi.ListContainerStatsResponse, error)
	ListPodSandboxStats(ctx context.Context, in *runtimeapi.ListPodSandboxStatsRequest, opts ...grpc.CallOption) (*runtimeapi.ListPodSandboxStatsResponse, error)
	ListImages(ctx context.Context, in *runtimeapi.ListImagesRequest, opts ...grpc.CallOption) (*runtimeapi.ListImagesResponse, error)
}

// Options configure the handler.
type Options struct {
	Runtime Runtime
	// CgroupMount is where the cgroup hierarchies are mounted (the v2 hierarchy, or v1
	// controllers in <CgroupMount>/<controller>/).
	CgroupMount string
	// CgroupRoot is the node's cgroupRoot, below which the pod cgroups are.
	CgroupRoot string
	// Machine describes the machine (machine_cpu_cores, machine_memory_bytes).
	Machine func() (*machineinfo.MachineInfo, error)
	// Bound is how long a scrape may take; 0: 5 s.
	Bound time.Duration
	Clock clock.Clock
	Log   *slog.Logger
}

// The labels every container series has, as the kubelet gives them to cAdvisor.
var baseLabels = []string{"container", "id", "image", "name", "namespace", "pod"}

func desc(name, help string, extra ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, append(append([]string{}, baseLabels...), extra...), nil)
}

// cAdvisor's series and help texts.
var (
	lastSeen         = desc("container_last_seen", "Last time a container was seen by the exporter")
	cpuUsage         = desc("container_cpu_usage_seconds_total", "Cumulative cpu time consumed in seconds.", "cpu")
	cpuUser          = desc("container_cpu_user_seconds_total", "Cumulative user cpu time consumed in seconds.")
	cpuSystem        = desc("container_cpu_system_seconds_total", "Cumulative system cpu time consumed in seconds.")
	cfsPeriods       = desc("container_cpu_cfs_periods_total", "Number of elapsed enforcement period intervals.")
	cfsThrottled     = desc("container_cpu_cfs_throttled_periods_total", "Number of throttled period intervals.")
	cfsThrottledSecs = desc("container_cpu_cfs_throttled_seconds_total", "Total time duration the container has been throttled.")
	memCache         = desc("container_memory_cache", "Number of bytes of page cache memory.")
	memRSS           = desc("container_memory_rss", "Size of RSS in bytes.")
	memSwap          = desc("container_memory_swap", "Container swap usage in bytes.")
	memFailcnt       = desc("container_memory_failcnt", "Number of memory usage hits limits")
	memUsage         = desc("container_memory_usage_bytes", "Current memory usage in bytes, including all memory regardless of when it was accessed")
	memWorkingSet    = desc("container_memory_working_set_bytes", "Current working set in bytes.")
	oomEvents        = desc("container_oom_events_total", "Count of out of memory events observed for the container")
	fsLimit          = desc("container_fs_limit_bytes", "Number of bytes that can be consumed by the container on this filesystem.", "device")
	fsUsage          = desc("container_fs_usage_bytes", "Number of bytes that are consumed by the container on this filesystem.", "device")
	netRxBytes       = desc("container_network_receive_bytes_total", "Cumulative count of bytes received", "interface")
	netRxErrors      = desc("container_network_receive_errors_total", "Cumulative count of errors encountered while receiving", "interface")
	netTxBytes       = desc("container_network_transmit_bytes_total", "Cumulative count of bytes transmitted", "interface")
	netTxErrors      = desc("container_network_transmit_errors_total", "Cumulative count of errors encountered while transmitting", "interface")
	startTime        = desc("container_start_time_seconds", "Start time of the container since unix epoch in seconds.")
	specPeriod       = desc("container_spec_cpu_period", "CPU period of the container.")
	specQuota        = desc("container_spec_cpu_quota", "CPU quota of the container.")
	specShares       = desc("container_spec_cpu_shares", "CPU share of the container.")
	specMemLimit     = desc("container_spec_memory_limit_bytes", "Memory limit for the container.")
	scrapeError      = prometheus.NewDesc("container_scrape_error", "1 if there was an error while getting container metrics, 0 otherwise", nil, nil)

	machineLabels = []string{"boot_id", "machine_id", "system_uuid"}
	machineCores  = prometheus.NewDesc("machine_cpu_cores", "Number of logical CPU cores.", machineLabels, nil)
	machineMemory = prometheus.NewDesc("machine_memory_bytes", "Amount of memory installed on the machine.", machineLabels, nil)
)

// Handler serves /metrics/cadvisor. Past the bound, or when the runtime cannot be read,
// the page carries container_scrape_error 1 and what could be read.
func Handler(o Options) http.Handler {
	if o.Bound <= 0 {
		o.Bound = 5 * time.Second
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	cg := newCgroupReader(o.CgroupMount)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), o.Bound)
		defer cancel()
		reg := prometheus.NewRegistry()
		reg.MustRegister(&collector{ctx: ctx, o: o, cg: cg})
		promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}).ServeHTTP(w, r)
	})
}

type collector struct {
	ctx context.Context
	o   Options
	cg  cgroupReader
}

// Describe sends nothing: the collector is unchecked, as the series' label values vary.
func (c *collector) Describe(chan<- *prometheus.Desc) {}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	failed := 0.0
	if err := c.machine(ch); err != nil {
		c.o.Log.Error("read the machine for /metrics/cadvisor", "err", err)
		failed = 1
	}
	if err := c.containers(ch); err != nil {
		c.o.Log.Error("read the containers for /metrics/cadvisor", "err", err)
		failed = 1
	}
	ch <- prometheus.MustNewConstMetric(scrapeError, prometheus.GaugeValue, failed)
}

func (c *collector) machine(ch chan<- prometheus.Metric) error {
	if c.o.Machine == nil {
		return nil
	}
	m, err := c.o.Machine()
	if err != nil {
		return err
	}
	ids := []string{m.BootID, m.MachineID, m.SystemUUID}
	ch <- prometheus.MustNewConstMetric(machineCores, prometheus.GaugeValue, float64(m.NumCores), ids...)
	ch <- prometheus.MustNewConstMetric(machineMemory, prometheus.GaugeValue, float64(m.MemoryCapacity), ids...)
	return nil
}

// runtimeView is what one scrape reads from the runtime.
type runtimeView struct {
	sandboxes  map[string]*runtimeapi.PodSandbox // by pod UID: its ready sandbox
	containers []*runtimeapi.Container           // running
	layers     map[string]*runtimeapi.FilesystemUsage
	networks   map[string]*runtimeapi.NetworkUsage // by sandbox ID
	images     map[string]string                   // image ID -> its first tag
}

func (c *collector) readRuntime() (runtimeView, error) {
	ctx, rt := c.ctx, c.o.Runtime
	v := runtimeView{sandboxes: map[string]*runtimeapi.PodSandbox{}, layers: map[string]*runtimeapi.FilesystemUsage{}, networks: map[string]*runtimeapi.NetworkUsage{}, images: map[string]string{}}
	sbs, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY}}})
	if err != nil {
		return v, fmt.Errorf("list pod sandboxes: %w", err)
	}
	for _, sb := range sbs.GetItems() {
		uid := sb.GetMetadata().GetUid()
		if old, ok := v.sandboxes[uid]; !ok || old.GetCreatedAt() < sb.GetCreatedAt() {
			v.sandboxes[uid] = sb
		}
	}
	ctrs, err := rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING}}})
	if err != nil {
		return v, fmt.Errorf("list containers: %w", err)
	}
	v.containers = ctrs.GetContainers()
	st, err := rt.ListContainerStats(ctx, &runtimeapi.ListContainerStatsRequest{})
	if err != nil {
		return v, fmt.Errorf("list container stats: %w", err)
	}
	for _, s := range st.GetStats() {
		if s.GetWritableLayer() != nil {
			v.layers[s.GetAttributes().GetId()] = s.GetWritableLayer()
		}
	}
	// A runtime without pod sandbox stats (containerd 1.6) gives no network series; one
	// that fails the whole list for a sandbox going away (containerd: "failed to decode
	// sandbox container metrics") gives none this scrape rather than fail it.
	if sst, err := rt.ListPodSandboxStats(ctx, &runtimeapi.ListPodSandboxStatsRequest{}); err == nil {
		for _, s := range sst.GetStats() {
			if n := s.GetLinux().GetNetwork(); n != nil {
				v.networks[s.GetAttributes().GetId()] = n
			}
		}
	}
	imgs, err := rt.ListImages(ctx, &runtimeapi.ListImagesRequest{})
	if err != nil {
		return v, fmt.Errorf("list images: %w", err)
	}
	for _, img := range imgs.GetImages() {
		if len(img.GetRepoTags()) > 0 {
			v.images[img.GetId()] = img.GetRepoTags()[0]
		}
	}
	return v, nil
}

// The labels the kubelet's containers carry in the runtime.
const (
	podNameLabel       = "io.kubernetes.pod.name"
	podNamespaceLabel  = "io.kubernetes.pod.namespace"
	containerNameLabel = "io.kubernetes.container.name"
)

// containers sends each pod cgroup's series (container "", name "" and image "", as the
// kubelet labels a pod cgroup) and each running container's.
func (c *collector) containers(ch chan<- prometheus.Metric) error {
	v, err := c.readRuntime()
	if err != nil {
		return err
	}
	pods := c.cg.podCgroups(c.o.CgroupRoot)
	now := c.o.Clock.Now()
	byID := map[string]*runtimeapi.Container{}
	for _, ctr := range v.containers {
		byID[ctr.GetId()] = ctr
	}
	for uid, sb := range v.sandboxes {
		pod, ok := pods[uid]
		if !ok {
			continue
		}
		meta := sb.GetMetadata()
		labels := []string{"", pod.path, "", "", meta.GetNamespace(), meta.GetName()}
		if err := c.cgroupSeries(ch, pod.path, labels, time.Unix(0, sb.GetCreatedAt()), now); err != nil {
			return err
		}
		for _, ifc := range interfaces(v.networks[sb.GetId()]) {
			l := append(labels, ifc.GetName())
			stamped(ch, now, netRxBytes, prometheus.CounterValue, ifc.GetRxBytes(), l)
			stamped(ch, now, netRxErrors, prometheus.CounterValue, ifc.GetRxErrors(), l)
			stamped(ch, now, netTxBytes, prometheus.CounterValue, ifc.GetTxBytes(), l)
			stamped(ch, now, netTxErrors, prometheus.CounterValue, ifc.GetTxErrors(), l)
		}
		for id, path := range pod.containers {
			ctr, ok := byID[id]
			if !ok || ctr.GetPodSandboxId() != sb.GetId() {
				continue // the sandbox's own (pause) cgroup, or a container no longer running
			}
			image := v.images[ctr.GetImageRef()]
			if image == "" {
				image = ctr.GetImage().GetImage()
			}
			l := ctr.GetLabels()
			labels := []string{l[containerNameLabel], path, image, id, l[podNamespaceLabel], l[podNameLabel]}
			if err := c.cgroupSeries(ch, path, labels, time.Unix(0, ctr.GetCreatedAt()), now); err != nil {
				return err
			}
			if layer := v.layers[id]; layer != nil {
				c.fsSeries(ch, layer, labels, now)
			}
		}
	}
	return nil
}

// cgroupSeries sends one cgroup's series; a cgroup gone since the walk sends none.
func (c *collector) cgroupSeries(ch chan<- prometheus.Metric, path string, labels []string, started, now time.Time) error {
	s, err := c.cg.read(path, now)
	if gone(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read cgroup %s: %w", path, err)
	}
	ch <- prometheus.MustNewConstMetric(startTime, prometheus.GaugeValue, float64(started.Unix()), labels...)
	if s.period != nil {
		ch <- prometheus.MustNewConstMetric(specPeriod, prometheus.GaugeValue, *s.period, labels...)
	}
	if s.quota != nil {
		ch <- prometheus.MustNewConstMetric(specQuota, prometheus.GaugeValue, *s.quota, labels...)
	}
	if s.shares != nil {
		ch <- prometheus.MustNewConstMetric(specShares, prometheus.GaugeValue, *s.shares, labels...)
	}
	if s.memLimit != nil {
		ch <- prometheus.MustNewConstMetric(specMemLimit, prometheus.GaugeValue, *s.memLimit, labels...)
	}
	ch <- prometheus.NewMetricWithTimestamp(now, prometheus.MustNewConstMetric(lastSeen, prometheus.GaugeValue, float64(now.Unix()), labels...))
	for _, m := range []struct {
		d    *prometheus.Desc
		kind prometheus.ValueType
		v    *float64
	}{
		{cpuUser, prometheus.CounterValue, s.cpuUser},
		{cpuSystem, prometheus.CounterValue, s.cpuSystem},
		{cfsPeriods, prometheus.CounterValue, s.periods},
		{cfsThrottled, prometheus.CounterValue, s.throttled},
		{cfsThrottledSecs, prometheus.CounterValue, s.throttledSeconds},
		{memCache, prometheus.GaugeValue, s.cache},
		{memRSS, prometheus.GaugeValue, s.rss},
		{memSwap, prometheus.GaugeValue, s.swap},
		{memFailcnt, prometheus.CounterValue, s.failcnt},
		{memUsage, prometheus.GaugeValue, s.memUsage},
		{memWorkingSet, prometheus.GaugeValue, s.workingSet},
		{oomEvents, prometheus.CounterValue, s.oomKills},
	} {
		if m.v != nil {
			ch <- prometheus.NewMetricWithTimestamp(s.at, prometheus.MustNewConstMetric(m.d, m.kind, *m.v, labels...))
		}
	}
	if s.cpuUsage != nil {
		// Per-CPU usage is off in the kubelet's cAdvisor: one series, cpu="total".
		ch <- prometheus.NewMetricWithTimestamp(s.at, prometheus.MustNewConstMetric(cpuUsage, prometheus.CounterValue, *s.cpuUsage, append(labels, "total")...))
	}
	return nil
}

// fsSeries sends the container's writable layer: its use, from the runtime, and its
// filesystem's size, where this process can see the filesystem.
func (c *collector) fsSeries(ch chan<- prometheus.Metric, layer *runtimeapi.FilesystemUsage, labels []string, now time.Time) {
	device := layer.GetFsId().GetMountpoint()
	l := append(labels, device)
	stamped(ch, now, fsUsage, prometheus.GaugeValue, layer.GetUsedBytes(), l)
	var st syscall.Statfs_t
	if device != "" && syscall.Statfs(device, &st) == nil {
		ch <- prometheus.NewMetricWithTimestamp(now, prometheus.MustNewConstMetric(fsLimit, prometheus.GaugeValue, float64(st.Blocks*uint64(st.Bsize)), l...))
	}
}

// interfaces are a pod's network interfaces, the default one first, each once.
func interfaces(n *runtimeapi.NetworkUsage) []*runtimeapi.NetworkInterfaceUsage {
	if n == nil {
		return nil
	}
	var out []*runtimeapi.NetworkInterfaceUsage
	seen := map[string]bool{}
	for _, i := range append([]*runtimeapi.NetworkInterfaceUsage{n.GetDefaultInterface()}, n.GetInterfaces()...) {
		if i != nil && i.GetName() != "" && !seen[i.GetName()] {
			seen[i.GetName()] = true
			out = append(out, i)
		}
	}
	return out
}

// stamped sends a CRI figure read at at; an absent one sends nothing.
func stamped(ch chan<- prometheus.Metric, at time.Time, d *prometheus.Desc, kind prometheus.ValueType, v *runtimeapi.UInt64Value, labels []string) {
	if v == nil {
		return
	}
	ch <- prometheus.NewMetricWithTimestamp(at, prometheus.MustNewConstMetric(d, kind, float64(v.GetValue()), labels...))
}
