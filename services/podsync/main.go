package podsync

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/unitlet/unitlet/services/podsync/podworker"
	"github.com/unitlet/unitlet/services/podsync/relist"
	"github.com/unitlet/unitlet/shared/daemon"
	"github.com/unitlet/unitlet/shared/envconfig"
	"github.com/unitlet/unitlet/shared/kube"
	"github.com/unitlet/unitlet/shared/nodeconfig"
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

// Validate checks the settings: the process's, and that the container log link directory
// is an absolute path.
func (c Config) Validate() error {
	if err := c.Settings.Validate(); err != nil {
		return err
	}
	if !filepath.IsAbs(c.ContainerLogLinkDir) {
		return daemon.ConfigError(fmt.Errorf("environment: %sCONTAINER_LOG_LINK_DIR=%q: must be an absolute path", envconfig.Prefix, c.ContainerLogLinkDir))
	}
	return nil
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
	kc, nodeName := nc.KubeletConfiguration, nc.Node.GetName()
	d := daemon.New(daemon.Options{Service: ServiceName, Settings: cfg.Settings, Logger: log})
	p, err := newParts(ctx, cfg, nc, d.Registry(), log)
	if err != nil {
		return err
	}
	defer p.Close()
	svc, err := p.service(ctx)
	if err != nil {
		return err
	}
	probes := p.prober(d)
	defer probes.Stop()
	relister := relist.New(p.rt, time.Second, p.clk, p.reg, log.With("component", "relist"), svc.RuntimeChanged)
	services, classes := newServiceLister(p.client), newRuntimeClasses(p.client)
	workers := podworker.NewManager(p.workerOptions(svc, relister, probes, services, classes))
	// The service and its workers need each other's callbacks (Report, RuntimeChanged).
	svc.Attach(workers, relister)
	p.logs.CollectPodDirs(kc.PodLogsDir, svc.PodContentRemovable)
	relistFirst(ctx, relister, log)
	health := newRuntimeHealth(p.rt, relister, p.shutdown.ShuttingDown)
	images := newImageGC(ctx, kc, p.rt, p.clk, p.reg, log)
	reclaimer := &diskReclaimer{rt: p.rt, pods: svc, images: images, logs: p.logs, log: log.With("component", "reclaim")}
	serveBus(d, NewServer(svc, health, &streamer{rt: p.rt, view: relister}, reclaimer))
	d.SetHealthCheck(func(context.Context) error { return relistError(relister) })

	// Relist: the runtime's state every second (every 30 s while container events are followed).
	d.Go("relist", relister.Run)
	// Container events: a pod re-read the moment its containers change, where the runtime
	// streams them and the configuration has them followed.
	d.Go("container events", followContainerEvents(kc, p.rt, relister, log.With("component", "relist")))
	// Workers: one per pod.
	d.Go("pod workers", workers.Run)
	// Housekeeping: pods the runtime has and nobody wants.
	d.Go("housekeeping", svc.Housekeeping)
	// Probe results: liveness failures restart containers, the rest changes statuses.
	d.Go("probe results", func(ctx context.Context) error { return applyProbeResults(ctx, probes.Updates(), workers) })
	// Cgroups: the cgroups of pods no worker runs (and none held) removed, the QoS
	// cgroups' shares kept.
	d.Go("cgroups", p.cgroups.Sweep(svc.ActiveOrHeld, svc.RuntimeRemovable))
	// Runtime status: CRI Status every 5 s for the health report.
	d.Go("runtime status", health.Run)
	// Image garbage collection by disk thresholds.
	d.Go("image gc", images.Run)
	// Image pull records: those of images the runtime no longer has are dropped.
	d.Go("image pull records", prunePullRecords(p.records, p.rt, p.clk, log))
	// Node: the node's own Node in the API, which admission judges pods against.
	d.Go("node", p.nodes.Run)
	// Graceful node shutdown: logind's delay inhibitor held, and on PrepareForShutdown the
	// pods ended by priority before it is let go.
	d.Go("node shutdown", p.shutdown.Follow(shutdownPods{Manager: workers, svc: svc}))
	// Container logs: rotation by size, links in /var/log/containers.
	d.Go("container logs", p.logs.Run)
	// Pod directories: those of gone pods that outlived their workers.
	d.Go("pod directories", sweepPodDirs(p.podsDir(), p.stateDir(), svc.PodContentRemovable, p.clk, log.With("component", "poddirs")))
	// Pod sources: the static pod directory, the static pod URL, the API server, each
	// once the Node has synced.
	for _, src := range afterNodeSync(podSources(kc, nodeName, p.client, svc, log), p.nodes) {
		d.Go(src.name, src.run)
	}
	// Services: the cluster's services, for containers' service-link variables.
	d.Go("services", services.Run)
	// RuntimeClasses: the runtime handlers of pods that name a RuntimeClass.
	d.Go("runtime classes", classes.Run)
	// Mirror pods: static pods' mirrors in the API.
	d.Go("mirror pods", svc.mirrorPods(p.client, nodeName))
	// A new configuration generation that changes what this service applies at start
	// restarts it (systemd starts it again); the container log policy follows it live.
	d.Go("configuration", nodeconfig.Follow(d, ServiceName, cfg.SocketDir, nc, applyLogPolicy(p.logs, log), log))
	// Credentials: a kubeconfig that comes to name other client credentials restarts the
	// service with a client made from them.
	d.Go("credentials", kube.FollowClientCredentials(nc.Paths.GetKubeconfig(), p.restConfig, log))
	return d.Run(ctx)
}

// relistFirst reads the runtime's pods before any source delivers one: admission must know
// which pods an earlier podsync admitted (they run) before it sees them again.
func relistFirst(ctx context.Context, relister *relist.Relister, log *slog.Logger) {
	if err := relister.Relist(ctx); err != nil {
		log.Warn("the first relist failed: pods the runtime runs are admitted again as new ones", "err", err)
	}
}
