package volumes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"golang.org/x/sync/singleflight"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"k8s.io/utils/clock"

	podsyncv1 "github.com/unitlet/unitlet/proto/unitlet/podsync/v1"
	volumesv1 "github.com/unitlet/unitlet/proto/unitlet/volumes/v1"
	"github.com/unitlet/unitlet/services/volumes/csi"
	"github.com/unitlet/unitlet/services/volumes/pluginwatcher"
	"github.com/unitlet/unitlet/services/volumes/token"
	"github.com/unitlet/unitlet/shared/bus"
	"github.com/unitlet/unitlet/shared/cri"
	"github.com/unitlet/unitlet/shared/daemon"
	"github.com/unitlet/unitlet/shared/kube"
	"github.com/unitlet/unitlet/shared/kubeapi"
	"github.com/unitlet/unitlet/shared/liveness"
	"github.com/unitlet/unitlet/shared/nodeconfig"
	"github.com/unitlet/unitlet/shared/nodeinfo"
	"github.com/unitlet/unitlet/shared/peercred"
)

// ServiceName is unitlet-volumes's name on the bus.
const ServiceName = "volumes"

// measureEvery is how often volume usage is measured.
const measureEvery = 30 * time.Second

// Config is unitlet-volumes's configuration: the process settings, from UNITLET_*
// variables. The node's configuration comes from unitlet-config over the bus.
type Config struct{ daemon.Settings }

// Command is unitlet-volumes's main.
func Command() daemon.Command[Config] {
	return daemon.Command[Config]{Service: ServiceName, About: "unitlet-volumes prepares pods' volumes for unitlet-podsync and keeps their files\ncurrent. It reads the node's configuration from unitlet-config over the bus.", Run: Run}
}

// Run runs unitlet-volumes until ctx ends or it fails.
func Run(ctx context.Context, cfg Config, log *slog.Logger) error {
	nc, err := nodeconfig.Get(ctx, cfg.SocketDir)
	if err != nil {
		return err
	}
	kc, clk := nc.KubeletConfiguration, clock.RealClock{}
	client, restConfig, err := kube.ForNode(ctx, nc.Paths, kc, "unitlet-volumes", "running standalone: configMap, secret and token volumes cannot be served", log)
	if err != nil {
		return daemon.ConfigError(err)
	}
	machine, err := nodeinfo.ReadMachine(nc.Paths.GetRootDir())
	if err != nil {
		return fmt.Errorf("read the machine's resources: %w", err)
	}
	node, err := nodeinfo.Node(kc, nc.Identity(), machine)
	if err != nil {
		return daemon.ConfigError(err)
	}
	rt, err := cri.Dial(kc.ContainerRuntimeEndpoint, cri.FromConfig(kc)...)
	if err != nil {
		return daemon.ConfigError(fmt.Errorf("containerRuntimeEndpoint: %w", err))
	}
	defer rt.Close()
	podsyncConn, err := bus.Dial(cfg.SocketDir, "podsync")
	if err != nil {
		return err
	}
	defer podsyncConn.Close()

	tokens, forgetTokens := newTokens(client, clk, log)
	drivers := csi.NewHandler(csi.NewAPINodeInfo(client, node.Name), log.With("component", "csi"))
	api, err := newAPIParts(client, restConfig, kc, node.Name, drivers, tokens, nc.Paths.GetRootDir(), log)
	if err != nil {
		return err
	}
	m := NewManager(ManagerOptions{
		PodsDir:  filepath.Join(nc.Paths.GetRootDir(), "pods"),
		Payloads: &apiPayloads{client: client, objects: objects{client: client}, tokens: tokens, allocatable: node.Status.Allocatable},
		Claims:   api.claims,
		CSI:      api.csi,
		Recorder: api.recorder,
		Memory:   node.Status.Allocatable.Memory(),
		Released: forgetTokens,
		Clock:    clk,
		Log:      log.With("component", "volumes"),
	})
	d := daemon.New(daemon.Options{Service: ServiceName, Settings: cfg.Settings, Logger: log})
	volumesv1.RegisterVolumesServiceServer(d.Server(), NewServer(m, newMetrics(d.Registry(), m)))
	for _, method := range []string{"PrepareVolumes", "ReleaseVolumes"} {
		d.Authorizer().Allow("/"+volumesv1.VolumesService_ServiceDesc.ServiceName+"/"+method, peercred.Root())
	}
	loops := liveness.New(time.Now)
	rec := &reconciler{m: m, pods: podsyncv1.NewPodSyncServiceClient(podsyncConn), sandboxes: rt, log: log.With("component", "reconcile"), loops: loops}
	// Healthy while no set-up hangs and the reconcile loop turns: else the watchdog has
	// systemd restart it.
	d.SetHealthCheck(func(context.Context) error { return errors.Join(m.Healthy(), loops.Check()) })

	// Reconcile: volumes of podsync's pods kept current (configMaps, secrets, labels,
	// tokens), rebuilt after a restart; volumes of pods podsync and the runtime no longer
	// have released.
	d.Go("reconcile", func(ctx context.Context) error { return rec.Run(ctx, reconcilePeriod(kc)) })
	// CSI node plugins: registration sockets in <root-dir>/plugins_registry, as the
	// kubelet's plugin watcher; each driver recorded in CSINode and on the Node.
	plugins := pluginwatcher.New(filepath.Join(nc.Paths.GetRootDir(), "plugins_registry"), map[string]pluginwatcher.Handler{registerapi.CSIPlugin: drivers}, log.With("component", "pluginwatcher"))
	d.Go("plugins", plugins.Run)
	// Usage: every volume's bytes and inodes.
	d.Go("usage", func(ctx context.Context) error { return m.MeasureEvery(ctx, measureEvery) })
	// A new configuration generation that changes what this service applies at start
	// restarts it (systemd starts it again); other generations are taken as they come.
	d.Go("configuration", nodeconfig.Follow(d, ServiceName, cfg.SocketDir, nc, nil, log))
	// Credentials: a kubeconfig that comes to name other client credentials restarts the
	// service with a client made from them.
	d.Go("credentials", kube.FollowClientCredentials(nc.Paths.GetKubeconfig(), restConfig, log))
	return d.Run(ctx)
}

// apiParts are the parts that need the API server: none on a standalone node.
type apiParts struct {
	claims   Claims
	csi      CSIVolumes
	recorder record.EventRecorder
}

// newAPIParts reads claims and volumes, mounts CSI volumes through the registered drivers
// (with service account tokens for the drivers that ask for them) and records pods'
// volume events, with the node's client (nil: standalone).
func newAPIParts(client kubeapi.Interface, rc *rest.Config, kc *kubeletv1beta1.KubeletConfiguration, nodeName string, drivers *csi.Handler, tokens *token.Manager, rootDir string, log *slog.Logger) (apiParts, error) {
	if client == nil {
		return apiParts{}, nil
	}
	recorder, err := kube.EventRecorder(rc, kc, nodeName)
	if err != nil {
		return apiParts{}, err
	}
	return apiParts{
		claims:   apiClaims{client: client, node: nodeName},
		csi:      csi.NewMounter(csi.MounterOptions{Drivers: drivers, API: apiCSIObjects{client: client, node: nodeName, reads: &singleflight.Group{}}, Tokens: tokens, RootDir: rootDir, NodeName: nodeName, Log: log.With("component", "csi")}),
		recorder: recorder,
	}, nil
}
