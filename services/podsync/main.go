package podsync

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	evictionv1 "github.com/unitlet/unitlet/proto/unitlet/eviction/v1"
	podsyncv1 "github.com/unitlet/unitlet/proto/unitlet/podsync/v1"
	"github.com/unitlet/unitlet/services/podsync/admission"
	"github.com/unitlet/unitlet/services/podsync/containerlogs"
	"github.com/unitlet/unitlet/services/podsync/mirrorpod"
	"github.com/unitlet/unitlet/services/podsync/nodeshutdown"
	"github.com/unitlet/unitlet/services/podsync/podworker"
	"github.com/unitlet/unitlet/services/podsync/prober"
	"github.com/unitlet/unitlet/services/podsync/pullcreds"
	"github.com/unitlet/unitlet/services/podsync/relist"
	"github.com/unitlet/unitlet/shared/bus"
	"github.com/unitlet/unitlet/shared/checkpoint"
	"github.com/unitlet/unitlet/shared/cri"
	"github.com/unitlet/unitlet/shared/daemon"
	"github.com/unitlet/unitlet/shared/kube"
	"github.com/unitlet/unitlet/shared/nodeconfig"
	"github.com/unitlet/unitlet/shared/nodeinfo"
	"github.com/unitlet/unitlet/shared/peercred"
)

// ServiceName is unitlet-podsync's name on the bus.
const ServiceName = "podsync"

// Config is unitlet-podsync's configuration: the process settings, from UNITLET_*
// variables. The node's configuration comes from unitlet-config over the bus.
type Config struct {
	daemon.Settings
	// CgroupMount is where the cgroup filesystem is mounted: the v2 hierarchy, or the v1
	// controllers' directories.
	CgroupMount string `env:"CGROUP_MOUNT" envDefault:"/sys/fs/cgroup"`
	// ContainerLogLinkDir is where containers' logs are linked for log shippers, as the
	// kubelet links them in /var/log/containers.
	ContainerLogLinkDir string `env:"CONTAINER_LOG_LINK_DIR" envDefault:"/var/log/containers"`
}

// Command is unitlet-podsync's main.
func Command() daemon.Command[Config] {
	return daemon.Command[Config]{Service: ServiceName, About: "unitlet-podsync runs the node's pods on the CRI runtime. It reads the node's\nconfiguration from unitlet-config over the bus.", Run: Run}
}

// Run runs unitlet-podsync until ctx ends or it fails.
func Run(ctx context.Context, cfg Config, log *slog.Logger) error {
	nc, err := nodeconfig.Get(ctx, cfg.SocketDir)
	if err != nil {
		return err
	}
	kc, nodeName, clk := nc.KubeletConfiguration, nc.Node.GetName(), clock.RealClock{}
	d := daemon.New(daemon.Options{Service: ServiceName, Settings: cfg.Settings, Logger: log})
	reg := d.Registry()
	rt, err := cri.Dial(kc.ContainerRuntimeEndpoint, append(cri.FromConfig(kc), cri.Metrics(reg))...)
	if err != nil {
		return daemon.ConfigError(fmt.Errorf("containerRuntimeEndpoint: %w", err))
	}
	defer rt.Close()
	machine, err := nodeinfo.ReadMachine(nc.Paths.GetRootDir())
	if err != nil {
		return fmt.Errorf("read the machine's resources: %w", err)
	}
	node, err := localNode(nc, machine)
	if err != nil {
		return err
	}
	driver, err := cgroupDriver(ctx, rt, kc, log)
	if err != nil {
		return err
	}
	cg, err := newNodeCgroups(ctx, kc, machine, driver, cfg.CgroupMount, log.With("component", "cgroups"))
	if err != nil {
		return err
	}
	client, restConfig, err := kube.ForNode(ctx, nc.Paths, kc, "unitlet-podsync", "running standalone, static pods only", log)
	if err != nil {
		return daemon.ConfigError(err)
	}
	volumes, err := dialVolumes(cfg.SocketDir)
	if err != nil {
		return err
	}
	defer volumes.Close()
	eviction, err := bus.Dial(cfg.SocketDir, "eviction")
	if err != nil {
		return err
	}
	defer eviction.Close()

	events, err := newRecorder(restConfig, kc, nodeName, log)
	if err != nil {
		return err
	}
	nodes := newNodeView(node, client, log.With("component", "node"))
	if !filepath.IsAbs(cfg.ContainerLogLinkDir) {
		return daemon.ConfigError(fmt.Errorf("UNITLET_CONTAINER_LOG_LINK_DIR %q: must be an absolute path", cfg.ContainerLogLinkDir))
	}
	logPolicy, err := containerlogs.PolicyOf(kc)
	if err != nil {
		return daemon.ConfigError(err)
	}
	logs := containerlogs.New(rt, cfg.ContainerLogLinkDir, logPolicy, clk, reg, log.With("component", "containerlogs"))
	sysctls, err := admission.NewSysctls(admission.SafeSysctls(admission.KernelRelease()), kc.AllowedUnsafeSysctls)
	if err != nil {
		return daemon.ConfigError(err)
	}
	// Graceful node shutdown (nodeshutdown/): only when the configuration gives it time.
	var shutdown *nodeshutdown.Manager
	var refuseWhileShuttingDown func() (bool, string, string)
	if groups := nodeshutdown.Groups(kc); len(groups) > 0 {
		// The last shutdown's times, for the kubelet's gauges after the reboot.
		state, err := checkpoint.Open(filepath.Join(nc.Paths.GetRootDir(), "nodeshutdown"))
		if err != nil {
			return err
		}
		shutdown = nodeshutdown.New(nodeshutdown.Options{
			Groups: groups, Dial: nodeshutdown.DialLogind, Events: events, Clock: clk,
			Log: log.With("component", "nodeshutdown"), Registry: reg, State: state,
		})
		refuseWhileShuttingDown = shutdown.Admit
	}
	svc := NewService(ServiceOptions{
		Log: log, Clock: clk, Registry: reg, Node: nodes.Get, MaxPods: int(kc.MaxPods), Sysctls: sysctls,
		Runtime:       admissionRuntime(ctx, rt, log),
		SourcesWanted: wantedSources(kc, client), Events: events,
		EvictionSocket: bus.SocketPath(cfg.SocketDir, "eviction"), Eviction: evictionv1.NewEvictionServiceClient(eviction),
		Shutdown: refuseWhileShuttingDown,
	})
	// The prober's metrics are apart from the rest, as the kubelet serves them on
	// /metrics/probes and not on /metrics; unitlet-status gathers them over the bus.
	probeReg := prometheus.NewRegistry()
	// With the process's start time, as the kubelet's /metrics/probes has it.
	probeReg.MustRegister(processStartTime())
	d.AddRegistry("probes", probeReg)
	probes := prober.NewManager(rt, clk, probeReg, log.With("component", "prober"))
	probes.RecordEvents(events.Event)
	defer probes.Stop()
	relister := relist.New(rt, time.Second, clk, reg, log.With("component", "relist"), svc.RuntimeChanged)
	wo := workerOptions(nc, node, machine, rt, relister, client, probes, volumes, events, svc, clk, reg, log)
	if path := nc.Paths.GetImageCredentialProviderConfig(); path != "" {
		// As the kubelet, a configuration that cannot be used stops the start.
		plugins, err := pullcreds.LoadPlugins(path, nc.Paths.GetImageCredentialProviderBinDir(), clk, log.With("component", "credential-providers"))
		if err != nil {
			return daemon.ConfigError(err)
		}
		wo.CredentialProviders = plugins
	}
	records, err := openPullRecords(ctx, kc, nc.Paths.GetRootDir(), rt, reg, log.With("component", "pullrecords"))
	if err != nil {
		return daemon.ConfigError(err)
	}
	wo.PullRecords = records
	wo.Runtime = loggedRuntime{Runtime: rt, logs: logs, log: log}
	wo.CRI.CgroupParent = cg.Parent
	// As the kubelet: on cgroup v2 the kernel kills a container's processes together on
	// OOM unless singleProcessOOMKill (unitlet-config refuses false on v1).
	wo.CRI.OOMKillGroup = cg.m.Unified() && !ptr.Deref(kc.SingleProcessOOMKill, false)
	wo.Cgroups = cg
	var services *serviceLister
	var classes *runtimeClasses
	if client != nil {
		// Standalone, containers get no service-link variables, as with the kubelet, and
		// pods naming a RuntimeClass do not run.
		services = newServiceLister(client)
		wo.Services = services
		classes = newRuntimeClasses(client)
		wo.RuntimeClasses = classes
	}
	workers := podworker.NewManager(wo)
	cg.active = workers.Active
	svc.Attach(workers, relister)
	logs.CollectPodDirs(kc.PodLogsDir, svc.PodContentRemovable)
	// The runtime's pods before any source delivers one: admission must know which pods an
	// earlier podsync admitted (they run) before it sees them again.
	if err := relister.Relist(ctx); err != nil {
		log.Warn("the first relist failed: pods the runtime runs are admitted again as new ones", "err", err)
	}
	health := newRuntimeHealth(rt, relister)
	if shutdown != nil {
		health.shuttingDown = shutdown.ShuttingDown
	}
	images := newImageGC(ctx, kc, rt, clk, reg, log)
	reclaimer := &diskReclaimer{rt: rt, pods: svc, images: images, logs: logs, log: log.With("component", "reclaim")}
	podsyncv1.RegisterPodSyncServiceServer(d.Server(), NewServer(svc, health, &streamer{rt: rt, view: relister}, reclaimer))
	for _, m := range []string{"KillPod", "GetStreamingURL", "ReclaimDisk"} {
		d.Authorizer().Allow("/"+podsyncv1.PodSyncService_ServiceDesc.ServiceName+"/"+m, peercred.Root())
	}
	d.SetHealthCheck(func(context.Context) error { return relistError(relister) })

	// Relist: the runtime's state every second (every 30 s while container events are followed).
	d.Go("relist", relister.Run)
	// Container events: a pod re-read the moment its containers change, where the runtime
	// streams them.
	if follow := followContainerEvents(kc, rt, relister, log.With("component", "relist")); follow != nil {
		d.Go("container events", follow)
	}
	// Workers: one per pod.
	d.Go("pod workers", workers.Run)
	// Housekeeping: pods the runtime has and nobody wants.
	d.Go("housekeeping", svc.Housekeeping)
	// Probe results: liveness failures restart containers, the rest changes statuses.
	d.Go("probe results", func(ctx context.Context) error { return applyProbeResults(ctx, probes.Updates(), workers) })
	// Cgroups: gone pods' cgroups removed, the QoS cgroups' shares kept.
	d.Go("cgroups", cg.Run)
	// Runtime status: CRI Status every 5 s for the health report.
	d.Go("runtime status", health.Run)
	// Image garbage collection by disk thresholds.
	d.Go("image gc", images.Run)
	// Image pull records: those of images the runtime no longer has are dropped.
	if records != nil {
		d.Go("image pull records", prunePullRecords(records, rt, clk, log))
	}
	// Node: the node's own Node in the API, which admission judges pods against.
	if client != nil {
		d.Go("node", nodes.Run)
	}
	// Graceful node shutdown: logind's delay inhibitor held, and on PrepareForShutdown the
	// pods ended by priority before it is let go.
	if shutdown != nil {
		shutdown.SetPods(shutdownPods{Manager: workers, svc: svc})
		d.Go("node shutdown", shutdown.Run)
	}
	// Container logs: rotation by size, links in /var/log/containers.
	d.Go("container logs", logs.Run)
	// Pod directories: those of gone pods that outlived their workers.
	d.Go("pod directories", sweepPodDirs(wo.CRI.PodsDir, svc.PodContentRemovable, clk, log.With("component", "poddirs")))
	// Pod sources: the static pod directory, the static pod URL, the API server, each
	// once the Node has synced.
	for _, src := range afterNodeSync(podSources(kc, nodeName, client, svc, log), nodes) {
		d.Go(src.name, src.run)
	}
	// Services: the cluster's services, for containers' service-link variables.
	if services != nil {
		d.Go("services", services.Run)
	}
	// RuntimeClasses: the runtime handlers of pods that name a RuntimeClass.
	if classes != nil {
		d.Go("runtime classes", classes.Run)
	}
	// Mirror pods: static pods' mirrors in the API.
	if client != nil {
		mirrors := mirrorpod.NewManager(client, nodeName, log.With("component", "mirror"))
		d.Go("mirror pods", func(ctx context.Context) error { return svc.ReconcileMirrors(ctx, mirrors) })
	}
	// A new configuration generation that changes what this service applies at start
	// restarts it (systemd starts it again); the container log policy follows it live.
	d.Go("configuration", nodeconfig.Follow(d, ServiceName, cfg.SocketDir, nc, applyLogPolicy(logs, log), log))
	// Credentials: a kubeconfig that comes to name other client credentials restarts the
	// service with a client made from them.
	d.Go("credentials", kube.FollowClientCredentials(nc.Paths.GetKubeconfig(), restConfig, log))
	return d.Run(ctx)
}
