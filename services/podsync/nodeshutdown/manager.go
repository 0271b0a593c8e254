package nodeshutdown

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	v1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/clock"

	"github.com/unitlet/unitlet/shared/checkpoint"
)

// The kubelet's words: the pods' final status, the admission refusal, the Node's Ready
// message and events while the node shuts down.
const (
	ReasonTerminated   = "Terminated"
	MessageTerminated  = "Pod was terminated in response to imminent node shutdown."
	ReasonNotAdmitted  = "NodeShutdown"
	MessageNotAdmitted = "Pod was rejected as the node is shutting down."
	// NotReadyMessage is the Ready condition's message part while the node shuts down.
	NotReadyMessage = "node is shutting down"
	eventReason     = "Shutdown"
	eventShutdown   = "Shutdown manager detected shutdown event"
	eventCancelled  = "Shutdown manager detected shutdown cancellation"
)

// ReasonInhibitDelayTooShort is the Node's Warning event when logind would cut the
// shutdown short (unitlet's own; the kubelet rewrites logind's configuration instead).
const ReasonInhibitDelayTooShort = "InhibitDelayMaxSecTooShort"

// Logind is what the manager needs of systemd-logind.
type Logind interface {
	// InhibitDelayMax is logind's InhibitDelayMaxSec: how long it waits for delay
	// inhibitors once a shutdown begins.
	InhibitDelayMax() (time.Duration, error)
	// PreparingForShutdown reports whether a shutdown is already under way.
	PreparingForShutdown() (bool, error)
	// Inhibit takes a delay inhibitor on shutdown; closing it lets the shutdown go on.
	Inhibit() (io.Closer, error)
	// ShutdownSignals delivers PrepareForShutdown's argument (true: the shutdown begins,
	// false: it was cancelled); the channel closes when the connection to logind ends.
	ShutdownSignals() (<-chan bool, error)
	Close() error
}

// Pods is what the manager needs of podsync's pods (podworker.Manager).
type Pods interface {
	// ActivePods is the pods running or starting: admitted and not terminated.
	ActivePods() []*corev1.Pod
	// Shutdown stops a pod within grace seconds; it ends with reason and message.
	Shutdown(uid types.UID, grace int64, reason, message string) bool
	// Ended reports whether a pod has stopped and its final status has reached the API
	// server (for a pod that came from there).
	Ended(uid types.UID) bool
}

// Events records the Node's events.
type Events interface {
	NodeEvent(eventType, reason, message string)
}

// Options are a Manager's parts.
type Options struct {
	// Groups are the priority groups, lowest priority first (Groups).
	Groups []Group
	// Dial connects to logind.
	Dial   func() (Logind, error)
	Events Events
	Clock  clock.WithTicker
	Log    *slog.Logger
	// Poll is how often a group's pods are checked for their end; 0: 100 ms.
	Poll time.Duration
	// Retry is how long after a lost or failed connection to logind the manager tries
	// again; 0: 1 s, growing to 30 s.
	Retry time.Duration
	// Sweep is how often, while the node shuts down, pods that became active since are
	// looked for and ended; 0: 1 s.
	Sweep time.Duration
	// Registry gets the kubelet's kubelet_graceful_shutdown_{start,end}_time_seconds; nil:
	// none.
	Registry prometheus.Registerer
	// State keeps the last shutdown's times across restarts; nil: not kept.
	State StateStore
}

// Manager is graceful node shutdown: Follow's loop holds the inhibitor and ends the pods
// on a shutdown; ShuttingDown and Admit tell admission and the node's health. A Manager
// without groups (ForNode, when the configuration gives no time) is off.
type Manager struct {
	o       Options
	metrics *metrics

	// stopped are the pods this shutdown has stopped (the manager's loop only).
	stopped map[types.UID]bool

	mu           sync.Mutex
	shuttingDown bool
	// delayShort is the last InhibitDelayMaxSec found shorter than the groups' total.
	delayShort time.Duration
}

// ForNode is graceful node shutdown as the configuration kc sets it (Groups): logind on the
// system bus, the last shutdown's times kept in <rootDir>/nodeshutdown. When kc gives it
// no time it is off: the Manager admits every pod, never reports a shutdown, registers no
// metrics and opens no state, and its loop only waits for its end.
func ForNode(kc *v1beta1.KubeletConfiguration, rootDir string, events Events, clk clock.WithTicker, reg prometheus.Registerer, log *slog.Logger) (*Manager, error) {
	groups := Groups(kc)
	if len(groups) == 0 {
		return &Manager{}, nil
	}
	// The last shutdown's times, for the kubelet's gauges after the reboot.
	state, err := checkpoint.Open(filepath.Join(rootDir, "nodeshutdown"))
	if err != nil {
		return nil, err
	}
	return New(Options{Groups: groups, Dial: DialLogind, Events: events, Clock: clk, Log: log, Registry: reg, State: state}), nil
}

// New makes a Manager; Follow gives its loop.
func New(o Options) *Manager {
	if o.Poll == 0 {
		o.Poll = 100 * time.Millisecond
	}
	if o.Retry == 0 {
		o.Retry = time.Second
	}
	if o.Sweep == 0 {
		o.Sweep = time.Second
	}
	m := &Manager{o: o, metrics: newMetrics(o.Registry)}
	m.loadState()
	return m
}

// ShuttingDown reports whether the node is shutting down: logind announced it and has not
// cancelled it.
func (m *Manager) ShuttingDown() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.shuttingDown
}

// Admit refuses new pods while the node shuts down, with the kubelet's reason and message.
func (m *Manager) Admit() (ok bool, reason, message string) {
	if m.ShuttingDown() {
		return false, ReasonNotAdmitted, MessageNotAdmitted
	}
	return true, "", ""
}

func (m *Manager) setShuttingDown(v bool) {
	m.mu.Lock()
	m.shuttingDown = v
	m.mu.Unlock()
}

// Follow is the loop that follows logind until ctx ends, connecting again whenever the
// connection is lost, and on a shutdown ends pods. The pods come here, not to New:
// podsync's workers are made after admission, which asks Admit. Off (no groups), the loop
// only waits for ctx to end.
func (m *Manager) Follow(pods Pods) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		if len(m.o.Groups) == 0 {
			<-ctx.Done()
			return nil
		}
		return m.run(ctx, pods)
	}
}

// run follows logind until ctx ends.
func (m *Manager) run(ctx context.Context, pods Pods) error {
	retry := m.o.Retry
	for {
		err := m.follow(ctx, pods)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			m.o.Log.Error("graceful node shutdown: no connection to logind; pods will not be ended before a shutdown until it is back", "err", err, "retry", retry)
		} else {
			retry = m.o.Retry // it had connected: start the backoff over
			m.o.Log.Warn("graceful node shutdown: the connection to logind ended; connecting again", "retry", retry)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-m.o.Clock.After(retry):
		}
		if err != nil {
			retry = min(2*retry, 30*time.Second)
		}
	}
}

// follow connects to logind once: it checks InhibitDelayMaxSec, takes the inhibitor (or,
// when a shutdown is already under way, ends the pods at once) and handles
// PrepareForShutdown until the connection ends (nil) or cannot be made (an error).
func (m *Manager) follow(ctx context.Context, pods Pods) error {
	l, err := m.o.Dial()
	if err != nil {
		return fmt.Errorf("connect to logind: %w", err)
	}
	defer l.Close()
	m.checkDelay(l)
	// Subscribe before reading the state, so no PrepareForShutdown falls in between.
	signals, err := l.ShutdownSignals()
	if err != nil {
		return fmt.Errorf("subscribe to logind's PrepareForShutdown: %w", err)
	}
	var lock io.Closer
	defer func() { release(lock, m.o.Log) }()
	preparing, err := l.PreparingForShutdown()
	if err != nil {
		return fmt.Errorf("read logind's PreparingForShutdown: %w", err)
	}
	if preparing {
		// podsync started (or restarted) while the machine shuts down: its inhibitor, if
		// an earlier podsync had one, went with that process, and logind takes no new
		// delay inhibitor now. What it can still do is end the pods it has, as far as
		// the machine lets it.
		m.o.Log.Warn("graceful node shutdown: the node is already shutting down; ending the pods without an inhibitor")
		m.shutdown(ctx, pods, nil)
	} else if lock, err = l.Inhibit(); err != nil {
		return fmt.Errorf("take logind's delay inhibitor: %w", err)
	}
	m.o.Log.Info("graceful node shutdown: watching for logind's PrepareForShutdown", "inhibitor", lock != nil, "groups", fmt.Sprint(m.o.Groups))
	sweep := m.o.Clock.NewTicker(m.o.Sweep)
	defer sweep.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-sweep.C():
			// While the node shuts down, a pod that became active since is ended too: after
			// a restart of podsync during the shutdown, the pods the runtime runs get their
			// workers only as the pod sources deliver them, after the first round.
			if m.ShuttingDown() {
				m.endPods(ctx, pods)
			}
		case begins, ok := <-signals:
			if !ok {
				return nil
			}
			if begins {
				m.o.Log.Info("graceful node shutdown: logind announced a shutdown")
				m.shutdown(ctx, pods, lock)
				lock = nil
				continue
			}
			m.o.Log.Info("graceful node shutdown: logind cancelled the shutdown")
			m.o.Events.NodeEvent(corev1.EventTypeNormal, eventReason, eventCancelled)
			m.setShuttingDown(false)
			m.stopped = nil
			if lock == nil {
				if lock, err = l.Inhibit(); err != nil {
					return fmt.Errorf("take logind's delay inhibitor again: %w", err)
				}
			}
		}
	}
}

// checkDelay reports an InhibitDelayMaxSec shorter than the groups' total: logind would go
// on with the shutdown before the last groups' budgets ran out.
func (m *Manager) checkDelay(l Logind) {
	total := Total(m.o.Groups)
	delay, err := l.InhibitDelayMax()
	if err != nil {
		m.o.Log.Warn("graceful node shutdown: cannot read logind's InhibitDelayMaxSec", "err", err)
		return
	}
	m.mu.Lock()
	prev := m.delayShort
	m.delayShort = 0
	if delay < total {
		m.delayShort = delay
	}
	m.mu.Unlock()
	if delay >= total || delay == prev {
		return
	}
	msg := DelayTooShortMessage(delay, total)
	m.o.Log.Error("graceful node shutdown: "+msg, "InhibitDelayMaxSec", delay, "shutdownGracePeriod", total)
	m.o.Events.NodeEvent(corev1.EventTypeWarning, ReasonInhibitDelayTooShort, msg)
}

// DelayTooShortMessage says that logind's InhibitDelayMaxSec (delay) is shorter than the
// shutdown's budgets (total), and what to do.
func DelayTooShortMessage(delay, total time.Duration) string {
	return fmt.Sprintf("logind's InhibitDelayMaxSec (%s) is shorter than the node's shutdown grace period "+
		"(shutdownGracePeriod, or the sum of shutdownGracePeriodByPodPriority: %s): logind goes on with a shutdown after %s, "+
		"before the last pods' budgets end; unitlet does not rewrite logind's configuration: set InhibitDelayMaxSec=%d "+
		"in a drop-in in /etc/systemd/logind.conf.d/ and restart systemd-logind",
		delay, total, delay, int64((total+time.Second-1)/time.Second))
}

// DelayShort is logind's InhibitDelayMaxSec when it was last found shorter than the
// groups' total, else 0.
func (m *Manager) DelayShort() time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.delayShort
}

// shutdown ends the pods group by group, then lets the shutdown go on (lock).
func (m *Manager) shutdown(ctx context.Context, pods Pods, lock io.Closer) {
	m.setShuttingDown(true)
	m.o.Events.NodeEvent(corev1.EventTypeNormal, eventReason, eventShutdown)
	began := m.o.Clock.Now()
	m.saveState(state{StartTime: began})
	defer func() {
		m.saveState(state{StartTime: began, EndTime: m.o.Clock.Now()})
		release(lock, m.o.Log)
		m.o.Log.Info("graceful node shutdown: pods ended; the node may shut down", "took", m.o.Clock.Since(began).Round(time.Millisecond))
	}()
	m.endPods(ctx, pods)
}

// endPods ends the active pods this shutdown has not stopped yet, group by group.
func (m *Manager) endPods(ctx context.Context, all Pods) {
	var todo []*corev1.Pod
	for _, p := range all.ActivePods() {
		if !m.stopped[p.UID] {
			todo = append(todo, p)
		}
	}
	if m.stopped == nil {
		m.stopped = map[types.UID]bool{}
	}
	for i, pods := range byGroup(m.o.Groups, todo) {
		if len(pods) == 0 {
			continue
		}
		g := m.o.Groups[i]
		start := m.o.Clock.Now()
		for _, p := range pods {
			m.stopped[p.UID] = true
			grace := podGrace(g, p)
			m.o.Log.Info("graceful node shutdown: stopping pod", "pod", p.Namespace+"/"+p.Name, "priority", g.Priority, "grace", grace)
			all.Shutdown(p.UID, grace, ReasonTerminated, MessageTerminated)
		}
		left := m.wait(ctx, all, pods, g.Budget)
		m.o.Log.Info("graceful node shutdown: priority group done", "priority", g.Priority, "budget", g.Budget,
			"took", m.o.Clock.Since(start).Round(time.Millisecond), "pods", len(pods), "not ended", left)
		if ctx.Err() != nil {
			return
		}
	}
}

// wait waits until every one of pods (of all) has ended, its final status in the API, or
// budget has passed; it returns how many have not.
//
// Waiting for the statuses is unitlet's own: the kubelet writes pod statuses in the
// process that holds the inhibitor, while here unitlet-status writes them, and systemd
// stops it with everything else once the inhibitor is let go. Without the wait, the last
// group's statuses could be lost with it. It is bounded by the group's budget, as the
// kubelet's wait for the group's volumes is.
func (m *Manager) wait(ctx context.Context, all Pods, pods []*corev1.Pod, budget time.Duration) int {
	began := m.o.Clock.Now()
	deadline := m.o.Clock.NewTimer(budget)
	defer deadline.Stop()
	tick := m.o.Clock.NewTicker(m.o.Poll)
	defer tick.Stop()
	ended := make(map[types.UID]bool, len(pods))
	for {
		left := 0
		for _, p := range pods {
			switch {
			case ended[p.UID]:
			case all.Ended(p.UID):
				ended[p.UID] = true
				m.o.Log.Info("graceful node shutdown: pod ended, its final status in the API", "pod", p.Namespace+"/"+p.Name, "after", m.o.Clock.Since(began).Round(time.Millisecond))
			default:
				left++
			}
		}
		if left == 0 {
			return 0
		}
		select {
		case <-ctx.Done():
			return left
		case <-deadline.C():
			return left
		case <-tick.C():
		}
	}
}

func release(lock io.Closer, log *slog.Logger) {
	if lock == nil {
		return
	}
	if err := lock.Close(); err != nil && !errors.Is(err, io.ErrClosedPipe) {
		log.Warn("graceful node shutdown: release logind's inhibitor", "err", err)
	}
}
