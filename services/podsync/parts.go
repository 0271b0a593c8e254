package podsync

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/clock"

	evictionv1 "github.com/unitlet/unitlet/proto/unitlet/eviction/v1"
	"github.com/unitlet/unitlet/services/podsync/admission"
	"github.com/unitlet/unitlet/services/podsync/containerlogs"
	"github.com/unitlet/unitlet/services/podsync/nodeshutdown"
	"github.com/unitlet/unitlet/services/podsync/prober"
	"github.com/unitlet/unitlet/services/podsync/pullcreds"
	"github.com/unitlet/unitlet/services/podsync/pullrecords"
	"github.com/unitlet/unitlet/shared/bus"
	"github.com/unitlet/unitlet/shared/cri"
	"github.com/unitlet/unitlet/shared/daemon"
	"github.com/unitlet/unitlet/shared/kube"
	"github.com/unitlet/unitlet/shared/kubeapi"
	"github.com/unitlet/unitlet/shared/nodeconfig"
	"github.com/unitlet/unitlet/shared/nodeinfo"
)

// parts are what unitlet-podsync's service, workers and loops are built from: everything
// the node's configuration and the process settings make before the service exists.
type parts struct {
	nc          *nodeconfig.Config
	kc          *kubeletconfigv1beta1.KubeletConfiguration
	rt          *cri.Client
	machine     nodeinfo.Machine
	node        *corev1.Node // the local node, from the configuration and the machine
	cgroups     *nodeCgroups
	client      kubeapi.Interface // nil when standalone
	restConfig  *rest.Config      // nil when standalone
	volumes     *busVolumes
	eviction    *grpc.ClientConn
	events      *recorder
	nodes       *nodeView
	logs        *containerlogs.Manager
	shutdown    *nodeshutdown.Manager
	credentials *pullcreds.Plugins
	records     *pullrecords.Records // nil: KubeletEnsureSecretPulledImages is off
	socketDir   string
	clk         clock.WithTicker
	reg         *prometheus.Registry
	log         *slog.Logger
}

// newParts builds the parts, in this order: it dials the runtime, reads the machine, sets
// up the node's cgroups, makes the API client (waiting for TLS bootstrap's kubeconfig;
// none when standalone), dials unitlet-volumes and unitlet-eviction, and makes the event
// recorder, the node view, the container log manager, graceful node shutdown, the
// credential providers and the image pull records. On an error what it dialled is closed.
func newParts(ctx context.Context, cfg Config, nc *nodeconfig.Config, reg *prometheus.Registry, log *slog.Logger) (_ *parts, err error) {
	kc := nc.KubeletConfiguration
	p := &parts{nc: nc, kc: kc, socketDir: cfg.SocketDir, clk: clock.RealClock{}, reg: reg, log: log}
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
	if p.node, err = localNode(nc, p.machine); err != nil {
		return nil, err
	}
	if p.cgroups, err = newNodeCgroups(ctx, p.rt, kc, p.machine, cfg.CgroupMount, log); err != nil {
		return nil, err
	}
	if p.client, p.restConfig, err = kube.ForNode(ctx, nc.Paths, kc, "unitlet-podsync", "running standalone, static pods only", log); err != nil {
		return nil, daemon.ConfigError(err)
	}
	if p.volumes, err = dialVolumes(cfg.SocketDir); err != nil {
		return nil, err
	}
	if p.eviction, err = bus.Dial(cfg.SocketDir, "eviction"); err != nil {
		return nil, err
	}
	if p.events, err = newRecorder(p.restConfig, kc, nc.Node.GetName(), log); err != nil {
		return nil, err
	}
	p.nodes = newNodeView(p.node, p.client, log.With("component", "node"))
	logPolicy, err := containerlogs.PolicyOf(kc)
	if err != nil {
		return nil, daemon.ConfigError(err)
	}
	p.logs = containerlogs.New(p.rt, cfg.ContainerLogLinkDir, logPolicy, p.clk, reg, log.With("component", "containerlogs"))
	if p.shutdown, err = nodeshutdown.ForNode(kc, nc.Paths.GetRootDir(), p.events, p.clk, reg, log.With("component", "nodeshutdown")); err != nil {
		return nil, err
	}
	// As the kubelet, a credential provider configuration that cannot be used stops the start.
	if p.credentials, err = pullcreds.NodePlugins(nc.Paths.GetImageCredentialProviderConfig(), nc.Paths.GetImageCredentialProviderBinDir(), p.clk, log.With("component", "credential-providers")); err != nil {
		return nil, daemon.ConfigError(err)
	}
	if p.records, err = openPullRecords(ctx, kc, nc.Paths.GetRootDir(), p.rt, reg, log.With("component", "pullrecords")); err != nil {
		return nil, daemon.ConfigError(err)
	}
	return p, nil
}

// Close closes the connections to unitlet-eviction, unitlet-volumes and the runtime. The
// node's cgroups are closed by their loop (nodeCgroups.Sweep).
func (p *parts) Close() {
	if p.eviction != nil {
		_ = p.eviction.Close()
	}
	if p.volumes != nil {
		_ = p.volumes.Close()
	}
	if p.rt != nil {
		_ = p.rt.Close()
	}
}

// service is the service, with what admission judges pods by: the node view, maxPods, the
// sysctl allowlist, the runtime as it names itself, unitlet-eviction's verdicts and
// graceful node shutdown's refusal.
func (p *parts) service(ctx context.Context) (*Service, error) {
	sysctls, err := admission.NewSysctls(admission.SafeSysctls(admission.KernelRelease()), p.kc.AllowedUnsafeSysctls)
	if err != nil {
		return nil, daemon.ConfigError(err)
	}
	return NewService(ServiceOptions{
		Log: p.log, Clock: p.clk, Registry: p.reg, Node: p.nodes.Get, MaxPods: int(p.kc.MaxPods), Sysctls: sysctls,
		Runtime:       admissionRuntime(ctx, p.rt, p.log),
		SourcesWanted: wantedSources(p.kc, p.client), Events: p.events,
		EvictionSocket: bus.SocketPath(p.socketDir, "eviction"), Eviction: evictionv1.NewEvictionServiceClient(p.eviction),
		Shutdown: p.shutdown.Admit,
	}), nil
}

// prober is the probe manager, which records its events. Its metrics are apart from the
// rest, as the kubelet serves them on /metrics/probes and not on /metrics: d gathers them
// as "probes", which unitlet-status reads over the bus.
func (p *parts) prober(d *daemon.Daemon) *prober.Manager {
	reg := prometheus.NewRegistry()
	// With the process's start time, as the kubelet's /metrics/probes has it.
	reg.MustRegister(processStartTime())
	d.AddRegistry("probes", reg)
	m := prober.NewManager(p.rt, p.clk, reg, p.log.With("component", "prober"))
	m.RecordEvents(p.events.Event)
	return m
}

// untilDone is the loop of a part that is off: it waits for ctx to end.
func untilDone(ctx context.Context) error {
	<-ctx.Done()
	return nil
}
