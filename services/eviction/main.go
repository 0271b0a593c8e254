// Package eviction is unitlet-eviction: it watches the node for memory, disk and PID
// pressure as the kubelet's eviction manager does, reports the pressure conditions, gives
// podsync its admission verdicts, and when a threshold is met frees what the node can free
// and then evicts pods, one per cycle, through podsync.
package eviction

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/clock"

	evictionv1 "github.com/unitlet/unitlet/proto/unitlet/eviction/v1"
	"github.com/unitlet/unitlet/services/eviction/observe"
	"github.com/unitlet/unitlet/services/eviction/policy"
	"github.com/unitlet/unitlet/shared/checkpoint"
	"github.com/unitlet/unitlet/shared/cri"
	"github.com/unitlet/unitlet/shared/daemon"
	"github.com/unitlet/unitlet/shared/nodeconfig"
	"github.com/unitlet/unitlet/shared/nodeinfo"
)

// ServiceName is unitlet-eviction's name on the bus.
const ServiceName = "eviction"

// Config is unitlet-eviction's configuration: the process settings, from UNITLET_*
// variables. The node's configuration (the eviction thresholds among it) comes from
// unitlet-config over the bus.
type Config struct {
	daemon.Settings
	// CgroupMount is where the cgroup filesystem is mounted: the v2 hierarchy, or the v1
	// controllers' directories.
	CgroupMount string `env:"CGROUP_MOUNT" envDefault:"/sys/fs/cgroup"`
	// PodLogsDir is where the runtime writes container logs (the kubelet's /var/log/pods).
	PodLogsDir string `env:"POD_LOGS_DIR" envDefault:"/var/log/pods"`
}

// Command is unitlet-eviction's main.
func Command() daemon.Command[Config] {
	return daemon.Command[Config]{Service: ServiceName, About: "unitlet-eviction watches the node for memory, disk and PID pressure, reports the\npressure conditions, and evicts pods through unitlet-podsync when an eviction threshold is\nmet. It reads the node's configuration from unitlet-config over the bus.", Run: Run}
}

// Run runs unitlet-eviction until ctx ends or it fails.
func Run(ctx context.Context, cfg Config, log *slog.Logger) error {
	nc, err := nodeconfig.Get(ctx, cfg.SocketDir)
	if err != nil {
		return err
	}
	kc := nc.KubeletConfiguration
	thresholds, err := policy.Parse(kc)
	if err != nil {
		return daemon.ConfigError(err)
	}
	rt, err := cri.Dial(kc.ContainerRuntimeEndpoint, cri.FromConfig(kc)...)
	if err != nil {
		return daemon.ConfigError(fmt.Errorf("containerRuntimeEndpoint: %w", err))
	}
	defer rt.Close()
	rootDir := nc.Paths.GetRootDir()
	allocatable := allocatableMemory(nc, rootDir, log)
	driver := kc.CgroupDriver
	if driver == "" {
		driver = "cgroupfs"
	}
	cgroupRoot := kc.CgroupRoot
	if cgroupRoot == "" {
		cgroupRoot = "/"
	}
	src, err := observe.New(observe.Options{
		CgroupMount: cfg.CgroupMount, CgroupRoot: cgroupRoot, CgroupDriver: driver,
		RootDir: rootDir, PodLogsDir: cfg.PodLogsDir, Runtime: rt, ProcRoot: "/proc",
		AllocatableMemory: func() int64 { return allocatable },
	})
	if err != nil {
		return err
	}
	podsync, err := dialPodSync(cfg.SocketDir, log.With("component", "podsync"))
	if err != nil {
		return err
	}
	defer podsync.Close()
	store, err := checkpoint.Open(filepath.Join(rootDir, "eviction"))
	if err != nil {
		return err
	}

	d := daemon.New(daemon.Options{Service: ServiceName, Settings: cfg.Settings, Logger: log})
	m := NewManager(Options{
		Observer: src, PodSync: podsync, Store: store, Clock: clock.RealClock{},
		Log: log.With("component", "manager"), Metrics: newMetrics(d.Registry()),
	}, thresholds)
	evictionv1.RegisterEvictionServiceServer(d.Server(), NewServer(m))
	d.SetHealthCheck(m.Healthy)

	// The eviction loop: measure every monitoring period and when woken; reclaim or evict.
	d.Go("evict", m.Run)
	// Memory: with kernelMemcgNotification, a crossing is acted on at once (the kernel's
	// threshold event on cgroup v1, a 1 s sampler on v2); otherwise, as the kubelet, every
	// monitoring period.
	d.Go("memory notifications", memoryNotifications(kc.KernelMemcgNotification, src, m, log))
	// Reloads: a new generation of the configuration replaces the thresholds in place.
	// The thresholds follow the configuration live; a change to anything else restarts
	// the service.
	d.Go("configuration", nodeconfig.Follow(d, ServiceName, cfg.SocketDir, nc, func(next *nodeconfig.Config) error {
		c, err := policy.Parse(next.KubeletConfiguration)
		if err != nil {
			return err
		}
		log.Info("eviction thresholds reloaded", "generation", next.Generation, "thresholds", len(c.Thresholds))
		m.SetConfig(c)
		return nil
	}, log))
	return d.Run(ctx)
}

// allocatableMemory is the node's allocatable memory for allocatableMemory.available;
// 0 when it cannot be worked out (the signal is then not measured).
func allocatableMemory(nc *nodeconfig.Config, rootDir string, log *slog.Logger) int64 {
	machine, err := nodeinfo.ReadMachine(rootDir)
	if err != nil {
		log.Warn("read the machine's resources: allocatableMemory.available is not measured", "err", err)
		return 0
	}
	node, err := nodeinfo.Node(nc.KubeletConfiguration, nc.Identity(), machine)
	if err != nil {
		log.Warn("work out node allocatable: allocatableMemory.available is not measured", "err", err)
		return 0
	}
	q, ok := node.Status.Allocatable["memory"]
	if !ok {
		return 0
	}
	return q.Value()
}

// memoryNotifications is the loop that wakes the manager on a memory threshold crossing
// (notifyMemory) when on (kernelMemcgNotification); off, it only waits for ctx to end.
func memoryNotifications(on bool, src *observe.Source, m *Manager, log *slog.Logger) func(context.Context) error {
	if !on {
		return func(ctx context.Context) error {
			<-ctx.Done()
			return nil
		}
	}
	return func(ctx context.Context) error { return notifyMemory(ctx, src, m, log) }
}

// notifyMemory wakes the manager when memory.available falls below the first memory
// threshold it would cross (the highest), as the kubelet's memory threshold notifier does.
func notifyMemory(ctx context.Context, src *observe.Source, m *Manager, log *slog.Logger) error {
	n, err := src.MemoryNotifier()
	if err != nil {
		log.Info("no memory notification: memory pressure is seen every monitoring period", "err", err)
		<-ctx.Done()
		return nil
	}
	defer n.Close()
	set := func() {
		st := m.State()
		capacity := st.Node.Signals[string(policy.SignalMemoryAvailable)].Capacity
		var highest int64 = -1
		for _, t := range st.Config.Thresholds {
			if t.Signal != policy.SignalMemoryAvailable {
				continue
			}
			r := t.Resolve(*resource.NewQuantity(capacity, resource.BinarySI))
			if v := r.Value(); v > highest {
				highest = v
			}
		}
		if highest > 0 {
			if err := n.Set(highest); err != nil {
				log.Warn("set the memory notification's threshold", "err", err)
			}
		}
	}
	set()
	refresh := m.o.Clock.NewTicker(notifierRefresh)
	defer refresh.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-n.C():
			m.Wake()
		case <-refresh.C():
			set()
		}
	}
}

// notifierRefresh is how often the notification's threshold follows the capacity and the
// configuration (the kubelet's notifierRefreshInterval).
const notifierRefresh = 10 * time.Second
