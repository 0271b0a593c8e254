package containerlogs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"
)

// Label keys the runtime keeps on containers (the kubelet's), naming the link.
const (
	labelPodName       = "io.kubernetes.pod.name"
	labelPodNamespace  = "io.kubernetes.pod.namespace"
	labelContainerName = "io.kubernetes.container.name"
)

// Runtime is what the manager needs of the CRI runtime. shared/cri.Client satisfies it.
type Runtime interface {
	ListContainers(ctx context.Context, in *runtimeapi.ListContainersRequest, opts ...grpc.CallOption) (*runtimeapi.ListContainersResponse, error)
	ContainerStatus(ctx context.Context, in *runtimeapi.ContainerStatusRequest, opts ...grpc.CallOption) (*runtimeapi.ContainerStatusResponse, error)
	ReopenContainerLog(ctx context.Context, in *runtimeapi.ReopenContainerLogRequest, opts ...grpc.CallOption) (*runtimeapi.ReopenContainerLogResponse, error)
}

// Manager rotates the running containers' logs, removes removed containers' log files and
// keeps the links to the logs in a directory.
type Manager struct {
	rt      Runtime
	linkDir string
	clk     clock.WithTicker
	log     *slog.Logger

	rotations, failures prometheus.Counter

	// mu keeps a rotation and the removal of a container's files apart, as the kubelet's
	// log manager does.
	mu sync.Mutex

	policyMu sync.Mutex
	policy   Policy
	changed  chan struct{}

	// podLogsDir holds the pods' log directories; those of pods whose content may go
	// (podContent) are removed with the dangling links (CollectPodDirs).
	podLogsDir string
	podContent PodContent
}

// New returns a manager that rotates by p and links in linkDir (/var/log/containers); its
// metrics go to reg (nil: none).
func New(rt Runtime, linkDir string, p Policy, clk clock.WithTicker, reg prometheus.Registerer, log *slog.Logger) *Manager {
	m := &Manager{
		rt: rt, linkDir: linkDir, clk: clk, log: log, policy: p, changed: make(chan struct{}, 1),
		rotations: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "unitlet_podsync_container_log_rotations_total",
			Help: "Container log files rotated (renamed and reopened by the runtime).",
		}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "unitlet_podsync_container_log_rotation_errors_total",
			Help: "Container log rotations that failed (tried again at the next check).",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.rotations, m.failures)
	}
	return m
}

// SetPolicy replaces the policy; the next check uses it, and a new interval starts now.
func (m *Manager) SetPolicy(p Policy) {
	m.policyMu.Lock()
	m.policy = p
	m.policyMu.Unlock()
	select {
	case m.changed <- struct{}{}:
	default:
	}
}

// Policy is the policy in force.
func (m *Manager) Policy() Policy {
	m.policyMu.Lock()
	defer m.policyMu.Unlock()
	return m.policy
}

// CollectPodDirs has Run remove the log directories in podLogsDir of the pods whose
// content may go, as the kubelet's container garbage collection does. Call it before Run.
func (m *Manager) CollectPodDirs(podLogsDir string, content PodContent) {
	m.podLogsDir, m.podContent = podLogsDir, content
}

// collectPeriod is how often removed pods' log directories and dangling links go: the
// kubelet's container garbage collection period.
const collectPeriod = time.Minute

// Run checks the running containers' logs every interval, and removes removed pods' log
// directories and dangling links (of containers removed while podsync was down) at start
// and then every collectPeriod, until ctx ends.
func (m *Manager) Run(ctx context.Context) error {
	m.collect(ctx)
	t := m.clk.NewTicker(m.Policy().Interval)
	links := m.clk.NewTicker(collectPeriod)
	defer func() { t.Stop(); links.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-m.changed:
			t.Stop()
			t = m.clk.NewTicker(m.Policy().Interval)
		case <-links.C():
			m.collect(ctx)
		case <-t.C():
			if err := m.RotateAll(ctx); err != nil {
				m.log.Warn("container log rotation", "err", err)
			}
		}
	}
}

// RotateAll rotates the logs of the running containers that reached the policy's size,
// Workers at a time.
func (m *Manager) RotateAll(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.Policy()
	resp, err := m.rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
		State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
	}})
	if err != nil {
		return fmt.Errorf("list running containers: %w", err)
	}
	ids := make(chan string)
	var wg sync.WaitGroup
	for range p.Workers {
		wg.Go(func() {
			for id := range ids {
				if err := m.rotate(ctx, id, p); err != nil {
					m.failures.Inc()
					m.log.Warn("rotate a container's log", "container", id, "err", err)
				}
			}
		})
	}
	for _, c := range resp.GetContainers() {
		// Only running containers write: a stopped one's log is left as it is.
		if c.GetState() == runtimeapi.ContainerState_CONTAINER_RUNNING {
			ids <- c.GetId()
		}
	}
	close(ids)
	wg.Wait()
	return nil
}

// rotate rotates one container's log when it reached p.MaxSize. A missing live file (a
// rotation cut short between the rename and the reopen) is reopened first.
func (m *Manager) rotate(ctx context.Context, id string, p Policy) error {
	st, err := m.rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
	if err != nil {
		return fmt.Errorf("container status: %w", err)
	}
	path := st.GetStatus().GetLogPath()
	if path == "" {
		return nil
	}
	reopen := func() error {
		_, err := m.rt.ReopenContainerLog(ctx, &runtimeapi.ReopenContainerLogRequest{ContainerId: id})
		return err
	}
	info, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		if err := reopen(); err != nil {
			return fmt.Errorf("reopen the missing log %s: %w", path, err)
		}
		info, err = os.Stat(path)
	}
	if err != nil {
		return fmt.Errorf("log file: %w", err)
	}
	if info.Size() < p.MaxSize {
		return nil
	}
	if err := prepareRotation(path, p.MaxFiles); err != nil {
		return err
	}
	rotated, err := rotateLive(path, m.clk.Now(), reopen)
	if err != nil {
		return err
	}
	m.rotations.Inc()
	m.log.Debug("rotated a container's log", "container", id, "rotated", rotated, "size", info.Size())
	return nil
}

// Started links a container that has just started, when its log file exists (a runtime
// that logs elsewhere would leave a dangling link).
func (m *Manager) Started(ctx context.Context, id string) error {
	st, err := m.rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
	if err != nil {
		return fmt.Errorf("link the log of container %s: container status: %w", id, err)
	}
	s := st.GetStatus()
	path := s.GetLogPath()
	if path == "" {
		return nil
	}
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	l := s.GetLabels()
	return link(path, linkName(m.linkDir, l[labelPodName], l[labelPodNamespace], l[labelContainerName], id))
}

// Removing removes the log files and the link of a container about to be removed. A
// container the runtime no longer knows has nothing left to remove.
func (m *Manager) Removing(ctx context.Context, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	st, err := m.rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
	if status.Code(err) == codes.NotFound {
		return nil
	}
	if err != nil {
		return fmt.Errorf("remove the logs of container %s: container status: %w", id, err)
	}
	s := st.GetStatus()
	if path := s.GetLogPath(); filepath.IsAbs(path) {
		if err := removeFiles(path); err != nil {
			return fmt.Errorf("remove the logs of container %s: %w", id, err)
		}
	}
	l := s.GetLabels()
	name := linkName(m.linkDir, l[labelPodName], l[labelPodNamespace], l[labelContainerName], id)
	if err := os.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove the log link of container %s: %w", id, err)
	}
	return nil
}

// collect removes the log directories of pods whose content may go, then the links
// that dangle, those to the removed directories among them, as the kubelet does.
func (m *Manager) collect(ctx context.Context) {
	if m.podContent != nil {
		// Apart from rotations and container removals, as those.
		m.mu.Lock()
		removed, err := removePodDirs(m.podLogsDir, m.podContent)
		m.mu.Unlock()
		for _, dir := range removed {
			m.log.Debug("removed a removed pod's log directory", "dir", dir)
		}
		if err != nil {
			m.log.Warn("clean removed pods' log directories", "err", err)
		}
	}
	m.removeDanglingLinks(ctx)
}

// removeDanglingLinks removes the links whose log file is gone, except those of
// containers still running (whose log may be between a rename and the reopen).
func (m *Manager) removeDanglingLinks(ctx context.Context) {
	links, err := danglingLinks(m.linkDir)
	if err != nil {
		m.log.Warn("clean container log links", "err", err)
		return
	}
	for _, l := range links {
		if id, ok := idOfLink(l); ok {
			st, err := m.rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
			if err == nil && st.GetStatus().GetState() != runtimeapi.ContainerState_CONTAINER_EXITED {
				continue
			}
		}
		if err := os.Remove(l); err != nil && !errors.Is(err, fs.ErrNotExist) {
			m.log.Warn("remove a dangling container log link", "link", l, "err", err)
			continue
		}
		m.log.Debug("removed a dangling container log link", "link", l)
	}
}
