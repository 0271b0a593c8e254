package podsync

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"

	evictionv1 "github.com/unitlet/unitlet/proto/unitlet/eviction/v1"
	podsyncv1 "github.com/unitlet/unitlet/proto/unitlet/podsync/v1"
	"github.com/unitlet/unitlet/services/podsync/admission"
	"github.com/unitlet/unitlet/services/podsync/containerlogs"
	"github.com/unitlet/unitlet/services/podsync/mirrorpod"
	"github.com/unitlet/unitlet/services/podsync/podworker"
	"github.com/unitlet/unitlet/services/podsync/prober"
	"github.com/unitlet/unitlet/services/podsync/relist"
	"github.com/unitlet/unitlet/shared/bus"
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
	rt, err := cri.Dial(kc.ContainerRuntimeEndpoint)
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

	d := daemon.New(daemon.Options{Service: ServiceName, Settings: cfg.Settings, Logger: log})
	reg := d.Registry()
	events, err := newRecorder(restConfig, kc, nodeName, log)
	if err != nil {
		return err
	}
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
	svc := NewService(ServiceOptions{
		Log: log, Clock: clk, Registry: reg, Node: func() *corev1.Node { return node }, MaxPods: int(kc.MaxPods), Sysctls: sysctls,
		SourcesWanted: wantedSources(kc, client), Events: events,
		EvictionSocket: bus.SocketPath(cfg.SocketDir, "eviction"), Eviction: evictionv1.NewEvictionServiceClient(eviction),
	})
	probes := prober.NewManager(rt, clk, reg, log.With("component", "prober"))
	probes.RecordEvents(events.Event)
	defer probes.Stop()
	relister := relist.New(rt, time.Second, clk, reg, log.With("component", "relist"), svc.RuntimeChanged)
	wo := workerOptions(nc, node, machine, rt, relister, client, probes, volumes, events, svc, clk, reg, log)
	wo.Runtime = loggedRuntime{Runtime: rt, logs: logs, log: log}
	wo.CRI.CgroupParent = cg.Parent
	wo.Cgroups = cg
	var services *serviceLister
	if client != nil {
		// Standalone, containers get no service-link variables, as with the kubelet.
		services = newServiceLister(client)
		wo.Services = services
	}
	workers := podworker.NewManager(wo)
	cg.active = workers.Active
	svc.Attach(workers, relister)
	health := newRuntimeHealth(rt, relister)
	images := newImageGC(ctx, kc, rt, clk, reg, log)
	reclaimer := &diskReclaimer{rt: rt, pods: svc, images: images, logs: logs, log: log.With("component", "reclaim")}
	podsyncv1.RegisterPodSyncServiceServer(d.Server(), NewServer(svc, health, &streamer{rt: rt, view: relister}, reclaimer))
	for _, m := range []string{"KillPod", "GetStreamingURL", "ReclaimDisk"} {
		d.Authorizer().Allow("/"+podsyncv1.PodSyncService_ServiceDesc.ServiceName+"/"+m, peercred.Root())
	}
	d.SetHealthCheck(func(context.Context) error { return relistError(relister) })

	// Relist: the runtime's state every second.
	d.Go("relist", relister.Run)
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
	// Container logs: rotation by size, links in /var/log/containers; the policy follows
	// the node configuration.
	d.Go("container logs", logs.Run)
	d.Go("config", func(ctx context.Context) error { return followLogPolicy(ctx, cfg.SocketDir, nc.Generation, logs, log) })
	// Pod sources: the static pod directory, the static pod URL, the API server.
	for _, src := range podSources(kc, nodeName, client, svc, log) {
		d.Go(src.name, src.run)
	}
	// Services: the cluster's services, for containers' service-link variables.
	if services != nil {
		d.Go("services", services.Run)
	}
	// Mirror pods: static pods' mirrors in the API.
	if client != nil {
		mirrors := mirrorpod.NewManager(client, nodeName, log.With("component", "mirror"))
		d.Go("mirror pods", func(ctx context.Context) error { return svc.ReconcileMirrors(ctx, mirrors) })
	}
	return d.Run(ctx)
}
