package status

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	evictionv1 "github.com/unitlet/unitlet/proto/unitlet/eviction/v1"
	podsyncv1 "github.com/unitlet/unitlet/proto/unitlet/podsync/v1"
	statusv1 "github.com/unitlet/unitlet/proto/unitlet/status/v1"
	volumesv1 "github.com/unitlet/unitlet/proto/unitlet/volumes/v1"
	"github.com/unitlet/unitlet/shared/bus"
	"github.com/unitlet/unitlet/shared/cri"
	"github.com/unitlet/unitlet/shared/daemon"
	"github.com/unitlet/unitlet/shared/kube"
	"github.com/unitlet/unitlet/shared/liveness"
	"github.com/unitlet/unitlet/shared/nodeconfig"
	"github.com/unitlet/unitlet/shared/nodeinfo"
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
	kc := nc.KubeletConfiguration
	_, restConfig, err := kube.ForNode(ctx, nc.Paths, kc, "unitlet-status", "running standalone: no API writes; the node API serves /healthz and /pods", log)
	if err != nil {
		return daemon.ConfigError(err)
	}
	// unitlet-status keeps client-go's clientset: the node API's delegated
	// authentication and authorization (k8s.io/apiserver) take its typed clients.
	var client kubernetes.Interface
	if restConfig != nil {
		if client, err = kubernetes.NewForConfig(restConfig); err != nil {
			return daemon.ConfigError(fmt.Errorf("kubeconfig %s: %w", nc.Paths.GetKubeconfig(), err))
		}
	}
	d := daemon.New(daemon.Options{Service: ServiceName, Settings: cfg.Settings, Logger: log})
	rt, err := cri.Dial(kc.ContainerRuntimeEndpoint, append(cri.FromConfig(kc), cri.Metrics(d.Registry()))...)
	if err != nil {
		return daemon.ConfigError(fmt.Errorf("containerRuntimeEndpoint: %w", err))
	}
	defer rt.Close()
	machine, err := nodeinfo.ReadMachine(nc.Paths.GetRootDir())
	if err != nil {
		return fmt.Errorf("read the machine's resources: %w", err)
	}
	if _, err := nodeinfo.Node(kc, nc.Identity(), machine); err != nil {
		return daemon.ConfigError(err)
	}
	podsyncConn, err := bus.Dial(cfg.SocketDir, "podsync")
	if err != nil {
		return err
	}
	defer podsyncConn.Close()
	volumesConn, err := bus.Dial(cfg.SocketDir, "volumes")
	if err != nil {
		return err
	}
	defer volumesConn.Close()
	evictionConn, err := bus.Dial(cfg.SocketDir, "eviction")
	if err != nil {
		return err
	}
	defer evictionConn.Close()

	p := parts{
		nc: nc, machine: machine, client: client, restConfig: restConfig, rt: rt,
		podsync:   podsyncClient{c: podsyncv1.NewPodSyncServiceClient(podsyncConn), log: log.With("component", "podsync")},
		volumes:   volumesClient{c: volumesv1.NewVolumesServiceClient(volumesConn)},
		pressure:  newPressureWatch(evictionv1.NewEvictionServiceClient(evictionConn), clock.RealClock{}),
		socketDir: cfg.SocketDir, clk: clock.RealClock{}, reg: d.Registry(), log: log,
		nodeAPIUsers: cfg.NodeAPIUsers, cgroupMount: cfg.CgroupMount, loops: liveness.New(time.Now),
	}
	// Healthy while its loops turn: a stuck one stops the watchdog and systemd restarts it.
	d.SetHealthCheck(func(context.Context) error { return p.loops.Check() })
	var node NodeReporter
	var pods PodWrites
	if client != nil {
		nodeStatus, err := p.nodeStatus()
		if err != nil {
			return daemon.ConfigError(err)
		}
		podStatus := p.podStatus()
		node, pods = nodeStatus, podStatus
		// Node: registration, then the status loop.
		d.Go("node status", nodeStatus.Run)
		// Lease: the heartbeat, on its own client.
		d.Go("node lease", nodeStatus.RunLease)
		// Pod statuses: podsync's watch to the API, and final deletions.
		d.Go("pod statuses", podStatus.Run)
		// Pressure: unitlet-eviction's conditions, which wake the status loop on a change.
		d.Go("pressure conditions", p.pressure.Run)
		// Node shutdown: podsync's graceful node shutdown wakes the status loop when it
		// begins, so the Node turns not ready at once.
		if kc := nc.KubeletConfiguration; kc.ShutdownGracePeriod.Duration > 0 || len(kc.ShutdownGracePeriodByPodPriority) > 0 {
			w := &shutdownWatch{health: p.podsync, clk: p.clk, wake: p.pressure.wake}
			d.Go("node shutdown", w.Run)
		}
	}
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
	if kc := nc.KubeletConfiguration; kc.HealthzPort != nil && *kc.HealthzPort > 0 {
		// /healthz over plain HTTP (10248), bound before READY=1 as the node API is.
		addr := net.JoinHostPort(kc.HealthzBindAddress, strconv.Itoa(int(*kc.HealthzPort)))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("healthz (healthzBindAddress, healthzPort): listen on %s: %w", addr, err)
		}
		d.Go("healthz", func(ctx context.Context) error { return api.ServeHealthz(ctx, l) })
	}

	statusv1.RegisterStatusServiceServer(d.Server(), NewServer(nc.Node.GetName(), api.Address(), node, pods))
	// A new configuration generation that changes what this service applies at start
	// restarts it (systemd starts it again); other generations are taken as they come.
	d.Go("configuration", nodeconfig.Follow(d, ServiceName, cfg.SocketDir, nc, nil, log))
	// Credentials: a kubeconfig that comes to name other client credentials restarts the
	// service with a client made from them.
	d.Go("credentials", kube.FollowClientCredentials(nc.Paths.GetKubeconfig(), restConfig, log))
	return d.Run(ctx)
}
