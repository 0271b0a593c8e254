package status

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	evictionv1 "github.com/unitlet/unitlet/proto/unitlet/eviction/v1"
	podsyncv1 "github.com/unitlet/unitlet/proto/unitlet/podsync/v1"
	volumesv1 "github.com/unitlet/unitlet/proto/unitlet/volumes/v1"
	"github.com/unitlet/unitlet/services/status/cadvisormetrics"
	"github.com/unitlet/unitlet/services/status/machineinfo"
	"github.com/unitlet/unitlet/services/status/nodeapi"
	"github.com/unitlet/unitlet/services/status/nodemetrics"
	"github.com/unitlet/unitlet/services/status/nodestatus"
	"github.com/unitlet/unitlet/services/status/podlogs"
	"github.com/unitlet/unitlet/services/status/podstatus"
	"github.com/unitlet/unitlet/services/status/resourcemetrics"
	"github.com/unitlet/unitlet/services/status/stats"
	"github.com/unitlet/unitlet/shared/bus"
	"github.com/unitlet/unitlet/shared/cri"
	"github.com/unitlet/unitlet/shared/daemon"
	"github.com/unitlet/unitlet/shared/kube"
	"github.com/unitlet/unitlet/shared/liveness"
	"github.com/unitlet/unitlet/shared/nodeconfig"
	"github.com/unitlet/unitlet/shared/nodeinfo"
)

// parts are what unitlet-status's loops are built from.
type parts struct {
	nc         *nodeconfig.Config
	machine    nodeinfo.Machine
	client     kubernetes.Interface // nil when standalone
	restConfig *rest.Config
	rt         *cri.Client
	conns      []*grpc.ClientConn // to unitlet-podsync, unitlet-volumes and unitlet-eviction
	podsync    podsyncClient
	volumes    volumesClient
	pressure   *pressureWatch
	socketDir  string
	// nodeAPIUsers are the x509 users a standalone node API serves (UNITLET_NODE_API_USERS).
	nodeAPIUsers []string
	// cgroupMount is where the pods' cgroups are mounted (UNITLET_CGROUP_MOUNT).
	cgroupMount string
	loops       *liveness.Loops // the loops the health check watches
	clk         clock.WithTicker
	reg         *prometheus.Registry
	log         *slog.Logger
}

// apiClients are the API server's clients with the node's credentials, once TLS bootstrap
// has written them: client-go's clientset (the node API's delegated authentication and
// authorization, k8s.io/apiserver, take its typed clients) and its REST configuration;
// both nil when the node is standalone.
func apiClients(ctx context.Context, nc *nodeconfig.Config, log *slog.Logger) (kubernetes.Interface, *rest.Config, error) {
	_, restConfig, err := kube.ForNode(ctx, nc.Paths, nc.KubeletConfiguration, "unitlet-status", "running standalone: no API writes, and the node API without webhook authentication or authorization", log)
	if err != nil {
		return nil, nil, daemon.ConfigError(err)
	}
	if restConfig == nil {
		// As the kubelet, which does not start: nothing can review a token or an access.
		kc := nc.KubeletConfiguration
		if err := nodeapi.CheckStandalone(kc.Authentication, kc.Authorization); err != nil {
			return nil, nil, daemon.ConfigError(fmt.Errorf("the node's KubeletConfiguration: %w", err))
		}
		return nil, nil, nil
	}
	client, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return nil, nil, daemon.ConfigError(fmt.Errorf("kubeconfig %s: %w", nc.Paths.GetKubeconfig(), err))
	}
	return client, restConfig, nil
}

// newParts dials the runtime, reads the machine and checks the node built from it, and
// dials unitlet-podsync, unitlet-volumes and unitlet-eviction; client and restConfig are
// apiClients'. On an error what it dialled is closed; else Close closes it.
func newParts(cfg Config, nc *nodeconfig.Config, client kubernetes.Interface, restConfig *rest.Config, reg *prometheus.Registry, log *slog.Logger) (_ *parts, err error) {
	kc, clk := nc.KubeletConfiguration, clock.RealClock{}
	p := &parts{
		nc: nc, client: client, restConfig: restConfig, socketDir: cfg.SocketDir, clk: clk, reg: reg, log: log,
		nodeAPIUsers: cfg.NodeAPIUsers, cgroupMount: cfg.CgroupMount, loops: liveness.New(time.Now),
	}
	defer func() {
		if err != nil {
			p.Close()
		}
	}()
	if p.rt, err = cri.Dial(kc.ContainerRuntimeEndpoint, append(cri.FromConfig(kc), cri.Metrics(reg))...); err != nil {
		return nil, daemon.ConfigError(fmt.Errorf("containerRuntimeEndpoint: %w", err))
	}
	if p.machine, err = nodeinfo.ReadMachine(nc.Paths.GetRootDir()); err != nil {
		return nil, fmt.Errorf("read the machine's resources: %w", err)
	}
	if _, err := nodeinfo.Node(kc, nc.Identity(), p.machine); err != nil {
		return nil, daemon.ConfigError(err)
	}
	for _, service := range []string{"podsync", "volumes", "eviction"} {
		conn, err := bus.Dial(cfg.SocketDir, service)
		if err != nil {
			return nil, err
		}
		p.conns = append(p.conns, conn)
	}
	p.podsync = podsyncClient{c: podsyncv1.NewPodSyncServiceClient(p.conns[0]), log: log.With("component", "podsync")}
	p.volumes = volumesClient{c: volumesv1.NewVolumesServiceClient(p.conns[1])}
	p.pressure = newPressureWatch(evictionv1.NewEvictionServiceClient(p.conns[2]), clk)
	return p, nil
}

// Close closes the connections to the other services, the last dialled first, then the
// runtime's.
func (p parts) Close() {
	for _, conn := range slices.Backward(p.conns) {
		_ = conn.Close()
	}
	if p.rt != nil {
		_ = p.rt.Close()
	}
}

// healthz is the loop that serves /healthz over plain HTTP on healthzBindAddress and
// healthzPort (10248), its listener bound now, before READY=1, as the node API's is: a
// port in use fails the start with the reason. Without a healthzPort it only waits.
func (p parts) healthz(api *nodeapi.Server) (func(context.Context) error, error) {
	kc := p.nc.KubeletConfiguration
	if kc.HealthzPort == nil || *kc.HealthzPort <= 0 {
		return untilDone, nil
	}
	addr := net.JoinHostPort(kc.HealthzBindAddress, strconv.Itoa(int(*kc.HealthzPort)))
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("healthz (healthzBindAddress, healthzPort): listen on %s: %w", addr, err)
	}
	return func(ctx context.Context) error { return api.ServeHealthz(ctx, l) }, nil
}

// untilDone is the loop of a part that is off: it waits for ctx to end.
func untilDone(ctx context.Context) error {
	<-ctx.Done()
	return nil
}

// nodeStatus is the node in the API: registration, status, conditions and the lease.
func (p parts) nodeStatus() (*nodestatus.Controller, error) {
	kc := p.nc.KubeletConfiguration
	recorder, err := kube.EventRecorder(p.restConfig, kc, p.nc.Node.GetName())
	if err != nil {
		return nil, err
	}
	return nodestatus.New(nodestatus.Options{
		Client:       p.client,
		RESTConfig:   p.restConfig,
		NodeName:     p.nc.Node.GetName(),
		Build:        func() (*corev1.Node, error) { return nodeinfo.Node(kc, p.nc.Identity(), p.machine) },
		Config:       kc,
		Runtime:      p.podsync,
		Pressure:     p.pressure,
		Wake:         p.pressure.wake,
		Services:     checkServices(p.socketDir),
		Images:       imageLister{rt: p.rt},
		VolumesInUse: p.volumes.InUse,
		Recorder:     recorder,
		Loops:        p.loops,
		Clock:        p.clk,
		Log:          p.log.With("component", "node"),
		Registry:     p.reg,
	})
}

// podStatus writes podsync's pod statuses to the API and deletes terminated pods.
func (p parts) podStatus() *podstatus.Manager {
	return podstatus.New(podstatus.Options{
		Client:   p.client,
		NodeName: p.nc.Node.GetName(),
		Pods:     podstatus.FromClient(p.podsync.c),
		QPS:      float32(ptr.Deref(p.nc.KubeletConfiguration.KubeAPIQPS, 50)),
		Clock:    p.clk,
		Log:      p.log.With("component", "pods"),
		Registry: p.reg,
	})
}

// nodeAgentServices are the processes whose cgroups together are the summary's "kubelet"
// system container.
var nodeAgentServices = []string{"unitlet-config", "unitlet-certs", "unitlet-podsync", "unitlet-status", "unitlet-volumes", "unitlet-eviction"}

// summary is the node's and its pods' statistics, collected every
// stats.DefaultCollectPeriod.
func (p parts) summary() (*stats.Cache, error) {
	kc := p.nc.KubeletConfiguration
	// Without QoS cgroups there is no node-allocatable cgroup, and no "pods" system container.
	var podsCgroup string
	if ptr.Deref(kc.CgroupsPerQOS, true) {
		var err error
		if podsCgroup, err = nodeinfo.PodsCgroupPath(cmp.Or(kc.CgroupRoot, "/"), cmp.Or(kc.CgroupDriver, "cgroupfs")); err != nil {
			return nil, daemon.ConfigError(fmt.Errorf("stats summary: %w", err))
		}
	}
	provider := stats.New(stats.Options{
		Runtime:         p.rt,
		NodeName:        p.nc.Node.GetName(),
		RootDir:         p.nc.Paths.GetRootDir(),
		CgroupRoot:      "/sys/fs/cgroup",
		PodLogsDir:      kc.PodLogsDir,
		Services:        nodeAgentServices,
		RuntimeSocket:   strings.TrimPrefix(kc.ContainerRuntimeEndpoint, "unix://"),
		Volumes:         p.volumes.List,
		Pods:            p.podsync.Pods,
		PodsCgroup:      podsCgroup,
		PodsCgroupMount: p.cgroupMount,
		Clock:           p.clk,
		Log:             p.log.With("component", "stats"),
	})
	cache := stats.NewCache(provider, stats.DefaultCollectPeriod)
	// kubelet_volume_stats_* on /metrics, from the same summary.
	if err := p.reg.Register(cache.VolumeStatsCollector()); err != nil {
		return nil, err
	}
	return cache, nil
}

// nodeAPI is the node's HTTPS API (:10250), its listener already bound. /stats/summary and
// /metrics/resource read one summary, as the kubelet's do.
func (p parts) nodeAPI(summary *stats.Cache) (*nodeapi.Server, error) {
	kc, nodeName := p.nc.KubeletConfiguration, p.nc.Node.GetName()
	machine := func() (*machineinfo.MachineInfo, error) {
		return machineinfo.Reader{Proc: "/proc", Sys: "/sys", Etc: "/etc"}.Read()
	}
	api, err := nodeapi.New(nodeapi.Options{
		Address:              net.JoinHostPort(kc.Address, strconv.Itoa(int(kc.Port))),
		CertFile:             kc.TLSCertFile,
		KeyFile:              kc.TLSPrivateKeyFile,
		CertDir:              p.nc.Paths.GetCertDir(),
		TLSMinVersion:        kc.TLSMinVersion,
		TLSCipherSuites:      kc.TLSCipherSuites,
		TLSCurvePreferences:  kc.TLSCurvePreferences,
		StreamingIdleTimeout: kc.StreamingConnectionIdleTimeout.Duration,
		ServerTLSBootstrap:   kc.ServerTLSBootstrap,
		Hostname:             p.nc.Node.GetHostname(),
		IPs:                  p.nc.Node.GetIps(),
		Authentication:       kc.Authentication,
		Authorization:        kc.Authorization,
		Client:               p.client,
		StandaloneUsers:      p.nodeAPIUsers,
		NodeName:             nodeName,
		Pods:                 p.podsync,
		Logs:                 podlogs.New(p.podsync, p.rt),
		Stats:                summary,
		Metrics:              nodemetrics.Handler(nodemetrics.Options{Sources: nodeMetricsSources(p.socketDir, p.reg), Timeout: metricsTimeout, ReportUp: true, Log: p.log.With("component", "node-metrics")}),
		ProbeMetrics:         nodemetrics.Handler(nodemetrics.Options{Sources: probeMetricsSources(p.socketDir), Timeout: metricsTimeout, Log: p.log.With("component", "node-metrics")}),
		ResourceMetrics:      resourcemetrics.Handler(summary, resourcemetrics.DefaultBound, p.log.With("component", "resource-metrics")),
		CAdvisorMetrics: cadvisormetrics.Handler(cadvisormetrics.Options{
			Runtime: p.rt, CgroupMount: p.cgroupMount, CgroupRoot: kc.CgroupRoot, Machine: machine,
			Clock: p.clk, Log: p.log.With("component", "cadvisor-metrics"),
		}),
		Configz:                  func() ([]byte, error) { return nodeconfig.Configz(p.nc.Raw) },
		HealthChecks:             newNodeHealth(p.socketDir, p.loops.Check).Checks(),
		DisableDebuggingHandlers: !ptr.Deref(kc.EnableDebuggingHandlers, true),
		SystemLogHandler:         ptr.Deref(kc.EnableSystemLogHandler, true),
		SystemLogQuery:           ptr.Deref(kc.EnableSystemLogQuery, false),
		Log:                      p.log.With("component", "node-api"),
	})
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			// A client CA or serving certificate not there yet: exit 1, systemd tries again.
			return nil, fmt.Errorf("node API: %w", err)
		}
		return nil, daemon.ConfigError(fmt.Errorf("node API: %w", err))
	}
	if err := api.Listen(); err != nil {
		return nil, fmt.Errorf("node API: %w", err)
	}
	return api, nil
}
