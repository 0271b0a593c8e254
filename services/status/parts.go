package status

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/unitlet/unitlet/services/status/cadvisormetrics"
	"github.com/unitlet/unitlet/services/status/machineinfo"
	"github.com/unitlet/unitlet/services/status/nodeapi"
	"github.com/unitlet/unitlet/services/status/nodemetrics"
	"github.com/unitlet/unitlet/services/status/nodestatus"
	"github.com/unitlet/unitlet/services/status/podlogs"
	"github.com/unitlet/unitlet/services/status/podstatus"
	"github.com/unitlet/unitlet/services/status/resourcemetrics"
	"github.com/unitlet/unitlet/services/status/stats"
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

// nodeStatus is the node in the API: registration, status, conditions and the lease.
func (p parts) nodeStatus() (*nodestatus.Controller, error) {
	kc := p.nc.KubeletConfiguration
	recorder, err := kube.EventRecorder(p.restConfig, kc, p.nc.Node.GetName())
	if err != nil {
		return nil, err
	}
	return nodestatus.New(nodestatus.Options{
		Client:     p.client,
		RESTConfig: p.restConfig,
		NodeName:   p.nc.Node.GetName(),
		Build:      func() (*corev1.Node, error) { return nodeinfo.Node(kc, p.nc.Identity(), p.machine) },
		Config:     kc,
		Runtime:    p.podsync,
		Pressure:   p.pressure,
		Wake:       p.pressure.wake,
		Services:   checkServices(p.socketDir),
		Images:     imageLister{rt: p.rt},
		Recorder:   recorder,
		Loops:      p.loops,
		Clock:      p.clk,
		Log:        p.log.With("component", "node"),
		Registry:   p.reg,
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
	return stats.NewCache(provider, stats.DefaultCollectPeriod), nil
}

// nodeAPI is the node's HTTPS API (:10250), its listener already bound. /stats/summary and
// /metrics/resource read one summary, as the kubelet's do.
func (p parts) nodeAPI(summary *stats.Cache) (*nodeapi.Server, error) {
	kc, nodeName := p.nc.KubeletConfiguration, p.nc.Node.GetName()
	machine := func() (*machineinfo.MachineInfo, error) {
		return machineinfo.Reader{Proc: "/proc", Sys: "/sys", Etc: "/etc", RootDir: p.nc.Paths.GetRootDir(), Now: p.clk.Now}.Read()
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
		Spec:                     func() (any, error) { return machine() },
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
