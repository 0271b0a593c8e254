package status

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	podsyncv1 "github.com/unitlet/unitlet/proto/unitlet/podsync/v1"
	statusv1 "github.com/unitlet/unitlet/proto/unitlet/status/v1"
	"github.com/unitlet/unitlet/services/status/nodeapi"
	"github.com/unitlet/unitlet/services/status/nodestatus"
	"github.com/unitlet/unitlet/services/status/podlogs"
	"github.com/unitlet/unitlet/services/status/podstatus"
	"github.com/unitlet/unitlet/services/status/stats"
	"github.com/unitlet/unitlet/shared/bus"
	"github.com/unitlet/unitlet/shared/cri"
	"github.com/unitlet/unitlet/shared/daemon"
	"github.com/unitlet/unitlet/shared/kube"
	"github.com/unitlet/unitlet/shared/nodeconfig"
	"github.com/unitlet/unitlet/shared/nodeinfo"
)

// ServiceName is unitlet-status's name on the bus.
const ServiceName = "status"

// Config is unitlet-status's configuration: the process settings, from UNITLET_*
// variables. The node's configuration comes from unitlet-config over the bus.
type Config struct{ daemon.Settings }

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
	nodeName := nc.Node.GetName()
	clk := clock.RealClock{}

	if err := kube.WaitForKubeconfig(ctx, nc.Paths, log); err != nil {
		return err
	}
	kube.FollowRotatedCertificates()
	client, restConfig, err := kube.Client(nc.Paths.GetKubeconfig(), "unitlet-status", kc)
	if errors.Is(err, kube.ErrStandalone) {
		log.Info("running standalone: no API writes; the node API serves /healthz and /pods", "reason", err)
		client = nil
	} else if err != nil {
		return daemon.ConfigError(err)
	}
	rt, err := cri.Dial(kc.ContainerRuntimeEndpoint)
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
	podsync := podsyncClient{c: podsyncv1.NewPodSyncServiceClient(podsyncConn)}

	d := daemon.New(daemon.Options{Service: ServiceName, Settings: cfg.Settings, Logger: log})
	reg := d.Registry()
	server := &Server{nodeName: nodeName}

	if client != nil {
		events := eventRecorder(client, nodeName)
		node, err := nodestatus.New(nodestatus.Options{
			Client:     client,
			RESTConfig: restConfig,
			NodeName:   nodeName,
			Build:      func() (*corev1.Node, error) { return nodeinfo.Node(kc, nc.Identity(), machine) },
			Config:     kc,
			Runtime:    podsync,
			Services:   checkServices(cfg.SocketDir),
			Images:     imageLister{rt: rt},
			Recorder:   events,
			Clock:      clk,
			Log:        log.With("component", "node"),
			Registry:   reg,
		})
		if err != nil {
			return daemon.ConfigError(err)
		}
		pods := podstatus.New(podstatus.Options{
			Client:   client,
			NodeName: nodeName,
			Pods:     podstatus.FromClient(podsync.c),
			QPS:      float32(ptrOr(kc.KubeAPIQPS, 50)),
			Clock:    clk,
			Log:      log.With("component", "pods"),
			Registry: reg,
		})
		server.node, server.pods = node, pods
		// Node: registration, then the status loop.
		d.Go("node status", node.Run)
		// Lease: the heartbeat, on its own client.
		d.Go("node lease", node.RunLease)
		// Pod statuses: podsync's watch to the API, and final deletions.
		d.Go("pod statuses", pods.Run)
	}

	api, err := nodeapi.New(nodeapi.Options{
		Address:            net.JoinHostPort(kc.Address, strconv.Itoa(int(kc.Port))),
		CertFile:           kc.TLSCertFile,
		KeyFile:            kc.TLSPrivateKeyFile,
		CertDir:            nc.Paths.GetCertDir(),
		ServerTLSBootstrap: kc.ServerTLSBootstrap,
		Hostname:           nc.Node.GetHostname(),
		IPs:                nc.Node.GetIps(),
		Authentication:     kc.Authentication,
		Authorization:      kc.Authorization,
		Client:             client,
		NodeName:           nodeName,
		Pods:               podsync,
		Logs:               podlogs.New(podsync, rt),
		Stats:              stats.New(stats.Options{Runtime: rt, NodeName: nodeName, RootDir: nc.Paths.GetRootDir(), CgroupRoot: "/sys/fs/cgroup", Clock: clk}),
		Metrics:            promhttp.HandlerFor(reg, promhttp.HandlerOpts{}),
		Configz:            func() ([]byte, error) { return configz(nc.Raw), nil },
		Healthz:            func(context.Context) error { return nil },
		Log:                log.With("component", "node-api"),
	})
	if err != nil {
		return daemon.ConfigError(fmt.Errorf("node API: %w", err))
	}
	// Bound before READY=1: a port in use fails the start with the reason.
	if err := api.Listen(); err != nil {
		return fmt.Errorf("node API: %w", err)
	}
	server.nodeAPI = api.Address()
	// Node API: :10250.
	d.Go("node API", api.Run)

	statusv1.RegisterStatusServiceServer(d.Server(), server)
	return d.Run(ctx)
}

// configz is the body of /configz: the configuration in effect under "kubeletconfig", as the
// kubelet serves it.
func configz(raw []byte) []byte {
	return append(append([]byte(`{"kubeletconfig":`), raw...), '}')
}

// eventRecorder records node events in the API as the kubelet does (component "kubelet").
func eventRecorder(client kubernetes.Interface, nodeName string) record.EventRecorder {
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	return b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "kubelet", Host: nodeName})
}

func ptrOr[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}
