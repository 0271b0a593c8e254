package status

import (
	"context"
	"log/slog"

	statusv1 "github.com/unitlet/unitlet/proto/unitlet/status/v1"
	"github.com/unitlet/unitlet/shared/daemon"
	"github.com/unitlet/unitlet/shared/kube"
	"github.com/unitlet/unitlet/shared/nodeconfig"
)

// ServiceName is unitlet-status's name on the bus.
const ServiceName = "status"

// Config is unitlet-status's configuration: the process settings, from UNITLET_*
// variables. The node's configuration comes from unitlet-config over the bus.
type Config struct {
	daemon.Settings
	// NodeAPIUsers are the x509 user names (certificate common names) a standalone node's
	// API serves; with an API server, SubjectAccessReview decides instead.
	NodeAPIUsers []string `env:"NODE_API_USERS" envSeparator:","`
	// CgroupMount is where the cgroup filesystem holding the pods' cgroups is mounted: the
	// v2 hierarchy, or the v1 controllers' directories (/metrics/cadvisor reads them).
	CgroupMount string `env:"CGROUP_MOUNT" envDefault:"/sys/fs/cgroup"`
}

// Command is unitlet-status's main.
func Command() daemon.Command[Config] {
	return daemon.Command[Config]{Service: ServiceName, About: "unitlet-status registers the node, reports its status, lease and pod statuses to the\nAPI server and serves the node API (:10250). It reads the node's configuration from\nunitlet-config over the bus.", Run: Run}
}

// Run runs unitlet-status until ctx ends or it fails.
func Run(ctx context.Context, cfg Config, log *slog.Logger) error {
	nc, err := nodeconfig.Get(ctx, cfg.SocketDir)
	if err != nil {
		return err
	}
	client, restConfig, err := apiClients(ctx, nc, log)
	if err != nil {
		return err
	}
	d := daemon.New(daemon.Options{Service: ServiceName, Settings: cfg.Settings, Logger: log})
	p, err := newParts(cfg, nc, client, restConfig, d.Registry(), log)
	if err != nil {
		return err
	}
	defer p.Close()
	// Healthy while its loops turn: a stuck one stops the watchdog and systemd restarts it.
	d.SetHealthCheck(func(context.Context) error { return p.loops.Check() })
	writes, err := p.apiWrites()
	if err != nil {
		return err
	}
	// Node: registration, then the status loop (a standalone node writes nothing).
	d.Go("node status", writes.NodeStatus)
	// Lease: the heartbeat, on its own client.
	d.Go("node lease", writes.Lease)
	// Pod statuses: podsync's watch to the API, and final deletions.
	d.Go("pod statuses", writes.PodStatuses)
	// Pressure: unitlet-eviction's conditions, which wake the status loop on a change.
	d.Go("pressure conditions", writes.Pressure)
	// Node shutdown: podsync's graceful node shutdown, when configured, wakes the status
	// loop when it begins, so the Node turns not ready at once.
	d.Go("node shutdown", writes.Shutdown)
	summary, err := p.summary()
	if err != nil {
		return err
	}
	// Stats: the summary /stats/summary and /metrics/resource serve, collected in the
	// background.
	d.Go("stats summary", summary.Run)
	// Bound before READY=1: a port in use fails the start with the reason.
	api, err := p.nodeAPI(summary)
	if err != nil {
		return err
	}
	// Node API: :10250.
	d.Go("node API", api.Run)
	healthz, err := p.healthz(api)
	if err != nil {
		return err
	}
	// /healthz over plain HTTP (10248), when healthzPort is set.
	d.Go("healthz", healthz)

	statusv1.RegisterStatusServiceServer(d.Server(), writes.server(nc.Node.GetName(), api.Address()))
	// A new configuration generation that changes what this service applies at start
	// restarts it (systemd starts it again); other generations are taken as they come.
	d.Go("configuration", nodeconfig.Follow(d, ServiceName, cfg.SocketDir, nc, nil, log))
	// Credentials: a kubeconfig that comes to name other client credentials restarts the
	// service with a client made from them.
	d.Go("credentials", kube.FollowClientCredentials(nc.Paths.GetKubeconfig(), restConfig, log))
	return d.Run(ctx)
}
