package podsync

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"

	podsyncv1 "github.com/unitlet/unitlet/proto/unitlet/podsync/v1"
	volumesv1 "github.com/unitlet/unitlet/proto/unitlet/volumes/v1"
	"github.com/unitlet/unitlet/services/podsync/criconfig"
	"github.com/unitlet/unitlet/services/podsync/imagegc"
	"github.com/unitlet/unitlet/services/podsync/lifecycle"
	"github.com/unitlet/unitlet/services/podsync/mirrorpod"
	"github.com/unitlet/unitlet/services/podsync/podsource"
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
type Config struct{ daemon.Settings }

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
	kc := nc.KubeletConfiguration
	nodeName := nc.Node.GetName()
	rootDir := nc.Paths.GetRootDir()
	clk := clock.RealClock{}

	rt, err := cri.Dial(kc.ContainerRuntimeEndpoint)
	if err != nil {
		return daemon.ConfigError(fmt.Errorf("containerRuntimeEndpoint: %w", err))
	}
	defer rt.Close()

	machine, err := nodeinfo.ReadMachine(rootDir)
	if err != nil {
		return fmt.Errorf("read the machine's resources: %w", err)
	}
	localNode, err := nodeinfo.Node(kc, nc.Identity(), machine)
	if err != nil {
		return daemon.ConfigError(err)
	}

	if err := kube.WaitForKubeconfig(ctx, nc.Paths, log); err != nil {
		return err
	}
	kube.FollowRotatedCertificates()
	client, _, err := kube.Client(nc.Paths.GetKubeconfig(), "unitlet-podsync", kc)
	if errors.Is(err, kube.ErrStandalone) {
		log.Info("running standalone, static pods only", "reason", err)
		client = nil
	} else if err != nil {
		return daemon.ConfigError(err)
	}

	d := daemon.New(daemon.Options{Service: ServiceName, Settings: cfg.Settings, Logger: log})
	reg := d.Registry()

	var wanted []string
	if kc.StaticPodPath != "" {
		wanted = append(wanted, podsource.SourceFile)
	}
	if kc.StaticPodURL != "" {
		wanted = append(wanted, podsource.SourceHTTP)
	}
	if client != nil {
		wanted = append(wanted, podsource.SourceAPI)
	}
	svc := NewService(log, clk, reg, func() *corev1.Node { return localNode }, int(kc.MaxPods), wanted)
	probes := prober.NewManager(rt, clk, reg, log.With("component", "prober"))
	defer probes.Stop()

	volumesConn, err := bus.Dial(cfg.SocketDir, "volumes")
	if err != nil {
		return err
	}
	defer volumesConn.Close()
	volumes := &busVolumes{socket: bus.SocketPath(cfg.SocketDir, "volumes"), client: volumesv1.NewVolumesServiceClient(volumesConn)}

	hostIPs := nc.Node.GetIps()
	events := newRecorder(client, nodeName, log)
	var workers *podworker.Manager
	relister := relist.New(rt, time.Second, clk, reg, log.With("component", "relist"), func(uids []types.UID) { workers.Trigger(uids...) })
	workers = podworker.NewManager(podworker.Options{
		Runtime: rt,
		View:    relister,
		CRI: criconfig.Options{
			ClusterDNS: kc.ClusterDNS, ClusterDomain: kc.ClusterDomain, ResolvConf: ptrOr(kc.ResolverConfig, ""),
			PodLogsDir: kc.PodLogsDir, PodsDir: filepath.Join(rootDir, "pods"), CgroupDriver: kc.CgroupDriver,
			NodeName: nodeName, NodeIPs: hostIPs,
		},
		Objects: apiObjects{client},
		Probes:  probes,
		Hooks: func(ctx context.Context, pod *corev1.Pod, c *corev1.Container, containerID, podIP string, h *corev1.LifecycleHandler) error {
			return lifecycle.RunHook(ctx, rt, pod, c, containerID, podIP, h)
		},
		Events:      events,
		Report:      svc.Report,
		Allocatable: func() corev1.ResourceList { return localNode.Status.Allocatable },
		HostIPs:     func() []string { return hostIPs },
		Clock:       clk,
		Log:         log.With("component", "podworker"),
		Registry:    reg,
		Resync:      kc.SyncFrequency.Duration,
		Volumes:     volumes,
		StateDir:    filepath.Join(rootDir, "podsync"),
	})
	svc.Attach(workers, relister)
	svc.evictionSocket = bus.SocketPath(cfg.SocketDir, "eviction")
	svc.events = events

	health := &runtimeHealth{rt: rt, relister: relister}
	podsyncv1.RegisterPodSyncServiceServer(d.Server(), NewServer(svc, health, &streamer{rt: rt, view: relister}))
	for _, m := range []string{"KillPod", "GetStreamingURL"} {
		d.Authorizer().Allow("/"+podsyncv1.PodSyncService_ServiceDesc.ServiceName+"/"+m, peercred.Root())
	}
	d.SetHealthCheck(func(context.Context) error {
		ok, _, err := relister.Health()
		if !ok {
			return err
		}
		return nil
	})

	// Relist: the runtime's state every second.
	d.Go("relist", relister.Run)
	// Workers: one per pod.
	d.Go("pod workers", workers.Run)
	// Housekeeping: pods the runtime has and nobody wants.
	d.Go("housekeeping", svc.Housekeeping)
	// Probe results: liveness failures restart containers, the rest changes statuses.
	d.Go("probe results", func(ctx context.Context) error {
		for {
			select {
			case <-ctx.Done():
				return nil
			case r := <-probes.Updates():
				if r.Kind == prober.Liveness && !r.Success {
					workers.RestartContainer(r.PodUID, r.ContainerName, r.ContainerID, "Unhealthy", fmt.Sprintf("Container %s failed liveness probe, will be restarted", r.ContainerName))
				} else if r.Kind == prober.Startup && !r.Success {
					workers.RestartContainer(r.PodUID, r.ContainerName, r.ContainerID, "Unhealthy", fmt.Sprintf("Container %s failed startup probe, will be restarted", r.ContainerName))
				} else {
					workers.Trigger(r.PodUID)
				}
			}
		}
	})
	// Runtime status: CRI Status every 5 s for the health report.
	d.Go("runtime status", health.Run)
	// Image garbage collection by disk thresholds.
	gc := imagegc.New(rt, imagegc.Policy{
		HighThresholdPercent: int(ptrOr(kc.ImageGCHighThresholdPercent, 85)),
		LowThresholdPercent:  int(ptrOr(kc.ImageGCLowThresholdPercent, 80)),
		MinAge:               kc.ImageMinimumGCAge.Duration,
		Keep:                 sandboxImage(ctx, rt, log),
	}, clk, reg, log.With("component", "imagegc"))
	d.Go("image gc", gc.Run)
	// Pod sources.
	if kc.StaticPodPath != "" {
		d.Go("static pods", func(ctx context.Context) error {
			return podsource.WatchDir(ctx, kc.StaticPodPath, nodeName, kc.FileCheckFrequency.Duration, svc, svc, log.With("component", "source-file"))
		})
	}
	if kc.StaticPodURL != "" {
		d.Go("static pod URL", func(ctx context.Context) error {
			return podsource.PollURL(ctx, kc.StaticPodURL, httpHeader(kc.StaticPodURLHeader), nodeName, kc.HTTPCheckFrequency.Duration, svc, svc, log.With("component", "source-http"))
		})
	}
	if client != nil {
		d.Go("API pods", func(ctx context.Context) error {
			return podsource.WatchAPI(ctx, client, nodeName, svc, svc, log.With("component", "source-api"))
		})
		mirrors := mirrorpod.NewManager(client, nodeName, log.With("component", "mirror"))
		d.Go("mirror pods", func(ctx context.Context) error { return reconcileMirrors(ctx, svc, mirrors, log) })
	}
	return d.Run(ctx)
}

func ptrOr[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

// reconcileMirrors keeps the mirror pods of static pods in the API, when static pods or
// mirror pods change and every 10 s.
func reconcileMirrors(ctx context.Context, svc *Service, m *mirrorpod.Manager, log *slog.Logger) error {
	changed := make(chan struct{}, 1)
	svc.mu.Lock()
	svc.onStatic = func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	svc.mu.Unlock()
	t := time.NewTicker(10 * time.Second)
	defer t.Stop()
	var lastErr string
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-t.C:
		}
		static, mirrors, ok := svc.StaticPods()
		if !ok {
			continue
		}
		if err := m.Reconcile(ctx, static, mirrors); err != nil && err.Error() != lastErr {
			log.Warn("mirror pods", "err", err)
			lastErr = err.Error()
		} else if err == nil {
			lastErr = ""
		}
	}
}

// runtimeHealth polls the runtime's Status.
type runtimeHealth struct {
	rt       *cri.Client
	relister *relist.Relister
	mu       sync.Mutex
	last     *podsyncv1.RuntimeHealth
}

func (h *runtimeHealth) Run(ctx context.Context) error {
	for {
		h.poll(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(5 * time.Second):
		}
	}
}

func (h *runtimeHealth) poll(ctx context.Context) {
	out := &podsyncv1.RuntimeHealth{}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if v, err := h.rt.Version(cctx, &runtimeapi.VersionRequest{}); err == nil {
		out.RuntimeName, out.RuntimeVersion = v.RuntimeName, v.RuntimeVersion
	}
	st, err := h.rt.Status(cctx, &runtimeapi.StatusRequest{})
	if err != nil {
		out.Message = fmt.Sprintf("container runtime is down: %v", err)
	} else {
		for _, c := range st.GetStatus().GetConditions() {
			switch c.Type {
			case runtimeapi.RuntimeReady:
				out.RuntimeReady = c.Status
				if !c.Status {
					out.Message = fmt.Sprintf("container runtime not ready: %s: %s", c.Reason, c.Message)
				}
			case runtimeapi.NetworkReady:
				out.NetworkReady = c.Status
				if !c.Status && out.Message == "" {
					out.Message = fmt.Sprintf("container runtime network not ready: %s: %s", c.Reason, c.Message)
				}
			}
		}
	}
	h.mu.Lock()
	h.last = out
	h.mu.Unlock()
}

// RuntimeHealth is the last runtime status with the relist's health.
func (h *runtimeHealth) RuntimeHealth(ctx context.Context) *podsyncv1.RuntimeHealth {
	h.mu.Lock()
	last := h.last
	h.mu.Unlock()
	if last == nil {
		h.poll(ctx)
		h.mu.Lock()
		last = h.last
		h.mu.Unlock()
	}
	out := clonePodHealth(last)
	relistHealth(out, h.relister)
	return out
}

// sandboxImage is the runtime's sandbox (pause) image, which image GC must keep: containerd
// 1.6 does not mark it pinned, and without it no sandbox starts. It is read from the CRI
// verbose status (containerd's "config" info).
func sandboxImage(ctx context.Context, rt *cri.Client, log *slog.Logger) []string {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := rt.Status(cctx, &runtimeapi.StatusRequest{Verbose: true})
	if err != nil {
		log.Warn("read the runtime's sandbox image; image GC cannot protect it", "err", err)
		return nil
	}
	var cfg struct {
		SandboxImage string `json:"sandboxImage"`
	}
	if err := json.Unmarshal([]byte(st.GetInfo()["config"]), &cfg); err != nil || cfg.SandboxImage == "" {
		log.Warn("the runtime's status names no sandbox image; image GC cannot protect it", "err", err)
		return nil
	}
	return []string{cfg.SandboxImage}
}
