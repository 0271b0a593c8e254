package eviction

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/unitlet/unitlet/services/eviction/observe"
	"github.com/unitlet/unitlet/services/eviction/policy"
	"github.com/unitlet/unitlet/shared/checkpoint"
	"github.com/unitlet/unitlet/shared/watch"
)

// The kubelet's timings around an eviction.
const (
	// cleanupTimeout is how long the loop waits for an evicted pod to be gone before it
	// measures again; cleanupPoll how often it looks.
	cleanupTimeout = 30 * time.Second
	cleanupPoll    = time.Second
	// keepEvictions is how many evictions GetState reports.
	keepEvictions = 20
)

// Observer measures the node and its pods (observe.Source).
type Observer interface {
	Node(ctx context.Context) (observe.Node, error)
	Pods(ctx context.Context) (map[types.UID]observe.Pod, error)
}

// PodSync is what the manager needs of unitlet-podsync.
type PodSync interface {
	// ActivePods are the pods podsync runs and does not already stop.
	ActivePods(ctx context.Context) ([]ActivePod, error)
	// Gone reports whether podsync has finished with the pod (terminated or forgotten).
	Gone(ctx context.Context, uid types.UID) (bool, error)
	Kill(ctx context.Context, uid types.UID, reason, message string, grace int64) error
	ReclaimDisk(ctx context.Context, images bool) (Reclaimed, error)
}

// ActivePod is a pod podsync runs.
type ActivePod struct {
	Pod *corev1.Pod
	// Static: from a manifest file or URL, not the API.
	Static bool
}

// Reclaimed is what a node-level reclaim freed.
type Reclaimed struct {
	Containers, Sandboxes, Images int
	ImageBytes                    uint64
}

// Eviction is one pod evicted for node pressure.
type Eviction struct {
	Time      time.Time `json:"time"`
	UID       types.UID `json:"uid"`
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	Signal    string    `json:"signal"`
	Message   string    `json:"message"`
	Grace     int64     `json:"gracePeriodSeconds"`
	Error     string    `json:"error,omitempty"`
}

// Condition is a pressure condition as last computed.
type Condition struct {
	Type               corev1.NodeConditionType
	True               bool
	LastTransitionTime time.Time
}

// Snapshot is the manager's view for GetState.
type Snapshot struct {
	Observed   time.Time
	Node       observe.Node
	Config     policy.Config
	Result     policy.Result
	FirstSeen  map[string]time.Time
	Conditions []Condition
	Evictions  []Eviction
	Error      string
}

// persisted is the checkpoint: what a restart must not lose. Soft thresholds' first
// crossings and the conditions' last observations (the grace periods and the transition
// period count from them), the conditions as published, the last signal times acted on,
// the evictions, and an eviction still in progress.
type persisted struct {
	State       policy.State         `json:"state"`
	Transitions map[string]time.Time `json:"transitions,omitempty"`
	Pressure    map[string]bool      `json:"pressure,omitempty"`
	Evictions   []Eviction           `json:"evictions,omitempty"`
	Pending     *Eviction            `json:"pending,omitempty"`
}

// Store keeps the checkpoint.
type Store interface {
	WriteJSON(name string, v any) error
	ReadJSON(name string, v any) error
}

const checkpointName = "eviction-state"

// Options is what a Manager needs.
type Options struct {
	Observer Observer
	PodSync  PodSync
	Store    Store
	Clock    clock.WithTicker
	Log      *slog.Logger
	Metrics  *metrics
}

// Manager is the eviction loop and its state.
type Manager struct {
	o Options

	mu      sync.Mutex
	cfg     policy.Config
	active  policy.Config // cfg for the filesystem layout last measured
	st      persisted
	node    observe.Node
	result  policy.Result
	err     string
	conds   map[corev1.NodeConditionType]*Condition
	hub     *watch.Hub[[]Condition]
	wake    chan struct{}
	turned  time.Time
	started time.Time
}

// pressureTypes are the conditions the manager owns, in the order it reports them.
var pressureTypes = []corev1.NodeConditionType{corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure}

// NewManager restores the checkpoint (an unreadable one is set aside and the manager
// starts fresh, saying so) and returns a manager for cfg.
func NewManager(o Options, cfg policy.Config) *Manager {
	m := &Manager{o: o, cfg: cfg, conds: map[corev1.NodeConditionType]*Condition{}, wake: make(chan struct{}, 1)}
	if err := o.Store.ReadJSON(checkpointName, &m.st); err != nil && !errors.Is(err, checkpoint.ErrNotFound) {
		o.Log.Warn("eviction checkpoint unreadable; starting without it", "err", err)
		m.st = persisted{}
	}
	if m.st.State.FirstCrossed == nil {
		m.st.State.FirstCrossed = map[string]time.Time{}
	}
	if m.st.State.ConditionLastObserved == nil {
		m.st.State.ConditionLastObserved = map[corev1.NodeConditionType]time.Time{}
	}
	now := o.Clock.Now()
	for _, t := range pressureTypes {
		c := &Condition{Type: t, LastTransitionTime: now}
		if at, ok := m.st.Transitions[string(t)]; ok {
			c.LastTransitionTime = at
		}
		c.True = m.st.Pressure[string(t)]
		m.conds[t] = c
	}
	m.started = now
	// Numbered from the start time: a subscriber that saw an earlier process's events is
	// behind this one's and gets a snapshot, never a number that means something else here.
	m.hub = watch.NewHub(uint64(now.UnixNano()), 16, m.Conditions)
	// The first event is the restored conditions, so a subscriber that has seen nothing
	// (sequence 0) gets them at once rather than at the first change.
	m.hub.Publish(func(uint64) []Condition { return m.Conditions() })
	return m
}

// SetConfig replaces the thresholds (a reload of the node's configuration).
func (m *Manager) SetConfig(cfg policy.Config) {
	m.mu.Lock()
	m.cfg = cfg
	m.mu.Unlock()
	m.Wake()
}

// Wake makes the loop measure now (a memory notification).
func (m *Manager) Wake() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// Run measures every monitoring period, and at once when woken, until ctx ends.
func (m *Manager) Run(ctx context.Context) error {
	m.resumePending(ctx)
	for {
		evicted := m.synchronize(ctx)
		if evicted != "" {
			m.waitCleanup(ctx, evicted)
		}
		m.mu.Lock()
		period := m.cfg.MonitoringPeriod
		m.mu.Unlock()
		if period <= 0 {
			period = 10 * time.Second
		}
		t := m.o.Clock.NewTimer(period)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-m.wake:
			t.Stop()
		case <-t.C():
		}
	}
}

// Healthy fails when the loop has not turned for three periods.
func (m *Manager) Healthy(context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	last := m.turned
	if last.IsZero() {
		last = m.started
	}
	// A round may take two node measurements and one of the pods, each bounded, and a
	// wait for an evicted pod's cleanup.
	limit := 3*max(m.cfg.MonitoringPeriod, 10*time.Second) + cleanupTimeout + 3*measureTimeout
	if since := m.o.Clock.Since(last); since > limit {
		return fmt.Errorf("the eviction loop has not turned for %s", since.Round(time.Second))
	}
	return nil
}

// resumePending waits for the pod a previous process evicted before it was killed, so a
// restart does not evict a second pod for the same observation.
func (m *Manager) resumePending(ctx context.Context) {
	m.mu.Lock()
	p := m.st.Pending
	m.mu.Unlock()
	if p == nil {
		return
	}
	m.o.Log.Info("waiting for the pod evicted before the restart to be gone", "pod", p.Namespace+"/"+p.Name)
	m.waitCleanup(ctx, p.UID)
}

// waitCleanup waits until podsync has finished with uid, at most cleanupTimeout, as the
// kubelet waits before it measures again after an eviction.
func (m *Manager) waitCleanup(ctx context.Context, uid types.UID) {
	deadline := m.o.Clock.Now().Add(cleanupTimeout)
	for m.o.Clock.Now().Before(deadline) {
		gone, err := m.o.PodSync.Gone(ctx, uid)
		if err == nil && gone {
			break
		}
		select {
		case <-ctx.Done():
			return
		case <-m.o.Clock.After(cleanupPoll):
		}
		m.beat()
	}
	m.mu.Lock()
	m.st.Pending = nil
	m.saveLocked()
	m.mu.Unlock()
}

func (m *Manager) beat() {
	m.mu.Lock()
	m.turned = m.o.Clock.Now()
	m.mu.Unlock()
}

// synchronize is one round: measure, decide, publish the conditions, and reclaim or evict
// at most one pod. It returns the UID of the pod it evicted, if any.
func (m *Manager) synchronize(ctx context.Context) types.UID {
	m.beat()
	m.mu.Lock()
	cfg := m.cfg
	m.mu.Unlock()

	node, err := m.measureNode(ctx)
	if err != nil {
		m.mu.Lock()
		m.err = err.Error()
		m.mu.Unlock()
		m.o.Log.Warn("measure the node", "err", err)
		return ""
	}
	layout := policy.FsLayout{DedicatedImageFs: node.SplitImageFs, SplitContainerFs: node.SplitContainerFs}
	cfg = cfg.ForLayout(layout)
	obs := observations(node)
	m.o.Metrics.observed(node, cfg)

	m.mu.Lock()
	now := m.o.Clock.Now()
	res := policy.Evaluate(cfg, obs, &m.st.State, now)
	m.node, m.result, m.err, m.active = node, res, "", cfg
	changed := m.setConditionsLocked(res.Conditions, now)
	m.saveLocked()
	m.mu.Unlock()
	if changed {
		m.hub.Publish(func(uint64) []Condition { return m.Conditions() })
	}

	if cfg.LocalStorageCapacityIsolation {
		if uid := m.localStorage(ctx, layout); uid != "" {
			return uid
		}
	}
	// Only thresholds measured anew since the last round act, the first (memory before
	// the others) decides: a stale figure does not evict a second pod.
	if len(res.Actionable) == 0 {
		return ""
	}
	t := res.Actionable[0]
	m.o.Log.Info("eviction threshold met: reclaiming", "signal", t.Signal, "threshold", t.Raw, "soft", t.Soft)
	if m.reclaimNodeLevel(ctx, cfg, t, layout) {
		m.o.Log.Info("pressure relieved without evicting a pod", "signal", t.Signal)
		return ""
	}
	return m.evictOne(ctx, cfg, t, obs, layout)
}

// reclaimNodeLevel frees what the node can free for t's signal (dead containers, unused
// images) and measures again: true when every threshold is then clear by its minimum
// reclaim, as the kubelet judges it.
func (m *Manager) reclaimNodeLevel(ctx context.Context, cfg policy.Config, t policy.Threshold, layout policy.FsLayout) bool {
	containers, images := policy.NodeReclaim(t.Signal, layout)
	if !containers && !images {
		return false
	}
	r, err := m.o.PodSync.ReclaimDisk(ctx, images)
	if err != nil {
		m.o.Log.Warn("node-level reclaim failed", "signal", t.Signal, "err", err)
	} else {
		m.o.Metrics.reclaimed(r)
		m.o.Log.Info("node-level reclaim", "signal", t.Signal, "containers", r.Containers, "sandboxes", r.Sandboxes, "images", r.Images, "imageBytes", r.ImageBytes)
	}
	node, err := m.measureNode(ctx)
	if err != nil {
		m.o.Log.Warn("measure the node after reclaim", "err", err)
		return false
	}
	return policy.ReclaimedAll(cfg, observations(node))
}

// evictOne ranks the active pods for t's signal and evicts the first that podsync kills.
func (m *Manager) evictOne(ctx context.Context, cfg policy.Config, t policy.Threshold, obs policy.Observations, layout policy.FsLayout) types.UID {
	stats, err := m.podStats(ctx)
	if err != nil {
		m.o.Log.Warn("rank pods for eviction", "err", err)
		return ""
	}
	ranked := policy.Rank(t.Signal, stats, layout)
	if len(ranked) == 0 {
		m.o.Log.Error("eviction threshold met, but no pod may be evicted", "signal", t.Signal)
		return ""
	}
	o := obs[t.Signal]
	m.o.Metrics.statsAge(t.Signal, m.o.Clock.Since(o.Time))
	for _, p := range ranked {
		msg, _ := policy.Message(t.Signal, t, o, p)
		grace := policy.GracePeriod(t, cfg, p.Pod)
		if m.evict(ctx, p.Pod, string(t.Signal), msg, grace) {
			return p.Pod.UID
		}
	}
	return ""
}

// localStorage evicts every pod over an ephemeral-storage limit; it returns one of them.
func (m *Manager) localStorage(ctx context.Context, layout policy.FsLayout) types.UID {
	stats, err := m.podStats(ctx)
	if err != nil {
		m.o.Log.Warn("measure pods' local storage", "err", err)
		return ""
	}
	var last types.UID
	for _, v := range policy.LocalStorageViolations(stats, layout) {
		if m.evict(ctx, v.Pod.Pod, v.Kind, v.Message, policy.ImmediateGracePeriodSeconds) {
			last = v.Pod.Pod.UID
		}
	}
	return last
}

// evict asks podsync to kill p, records the eviction and checkpoints it first, so a
// restart in between waits for this pod instead of choosing another.
func (m *Manager) evict(ctx context.Context, p *corev1.Pod, signal, msg string, grace int64) bool {
	ev := Eviction{Time: m.o.Clock.Now(), UID: p.UID, Namespace: p.Namespace, Name: p.Name, Signal: signal, Message: msg, Grace: grace}
	m.mu.Lock()
	m.st.Pending = &ev
	m.saveLocked()
	m.mu.Unlock()
	m.o.Log.Info("evicting pod", "pod", p.Namespace+"/"+p.Name, "uid", p.UID, "signal", signal, "grace", grace, "message", msg)
	err := m.o.PodSync.Kill(ctx, p.UID, policy.Reason, msg, grace)
	if err != nil {
		ev.Error = err.Error()
		m.o.Log.Error("evict pod", "pod", p.Namespace+"/"+p.Name, "err", err)
	}
	m.mu.Lock()
	m.st.Evictions = append([]Eviction{ev}, m.st.Evictions...)
	if len(m.st.Evictions) > keepEvictions {
		m.st.Evictions = m.st.Evictions[:keepEvictions]
	}
	if err != nil {
		m.st.Pending = nil
	}
	m.saveLocked()
	m.mu.Unlock()
	if err != nil {
		return false
	}
	m.o.Metrics.evicted(signal)
	return true
}

// measureTimeout bounds one measurement (the node's signals, or the pods and their usage),
// so a runtime or podsync that does not answer delays a round, never stops the loop.
const measureTimeout = 30 * time.Second

func (m *Manager) measureNode(ctx context.Context) (observe.Node, error) {
	ctx, cancel := context.WithTimeout(ctx, measureTimeout)
	defer cancel()
	return m.o.Observer.Node(ctx)
}

// podStats joins the active pods with their measured usage.
func (m *Manager) podStats(ctx context.Context) ([]policy.PodStats, error) {
	ctx, cancel := context.WithTimeout(ctx, measureTimeout)
	defer cancel()
	active, err := m.o.PodSync.ActivePods(ctx)
	if err != nil {
		return nil, fmt.Errorf("list pods from unitlet-podsync: %w", err)
	}
	usage, err := m.o.Observer.Pods(ctx)
	if err != nil {
		return nil, fmt.Errorf("measure pods: %w", err)
	}
	out := make([]policy.PodStats, 0, len(active))
	for _, a := range active {
		u, ok := usage[a.Pod.UID]
		if !ok {
			// The kubelet ranks only pods it has stats for; one without is skipped.
			continue
		}
		eph := u.EphemeralStorage()
		ps := policy.PodStats{Pod: a.Pod, Memory: u.Memory, Volumes: map[string]int64{}, VolumeInodes: u.VolumeInodes, EphemeralStorage: &eph, Processes: u.Processes, Static: a.Static}
		// Memory-backed emptyDirs count against their sizeLimit only; the policy tells
		// volumes apart by the pod's spec.
		maps.Copy(ps.Volumes, u.Volumes)
		maps.Copy(ps.Volumes, u.MemoryVolumes)
		for _, c := range u.Containers {
			ps.Containers = append(ps.Containers, policy.ContainerUsage{Name: c.Name, Memory: c.Memory, Rootfs: c.Rootfs, Logs: c.Logs, RootfsInodes: c.RootfsInodes, LogsInodes: c.LogsInodes})
		}
		out = append(out, ps)
	}
	return out, nil
}

// setConditionsLocked applies the conditions of a round; true when one changed.
func (m *Manager) setConditionsLocked(on map[corev1.NodeConditionType]bool, now time.Time) bool {
	changed := false
	if m.st.Transitions == nil {
		m.st.Transitions = map[string]time.Time{}
	}
	if m.st.Pressure == nil {
		m.st.Pressure = map[string]bool{}
	}
	for _, t := range pressureTypes {
		c := m.conds[t]
		if c.True != on[t] {
			c.True, c.LastTransitionTime, changed = on[t], now, true
			m.st.Transitions[string(t)] = now
			m.st.Pressure[string(t)] = on[t]
			m.o.Log.Info("pressure condition changed", "condition", t, "pressure", on[t])
		}
	}
	return changed
}

// Conditions are the pressure conditions as last computed.
func (m *Manager) Conditions() []Condition {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.conditionsLocked()
}

func (m *Manager) conditionsLocked() []Condition {
	out := make([]Condition, 0, len(pressureTypes))
	for _, t := range pressureTypes {
		out = append(out, *m.conds[t])
	}
	return out
}

// Subscribe follows the conditions from after.
func (m *Manager) Subscribe(after uint64) *watch.Subscription[[]Condition] {
	return m.hub.Subscribe(after)
}

// Admit is the eviction admission verdict for p under the current conditions.
func (m *Manager) Admit(p *corev1.Pod) (bool, string, string) {
	var on []corev1.NodeConditionType
	for _, c := range m.Conditions() {
		if c.True {
			on = append(on, c.Type)
		}
	}
	return policy.Admit(p, on)
}

// State is the manager's view for GetState.
func (m *Manager) State() Snapshot {
	m.mu.Lock()
	defer m.mu.Unlock()
	first := make(map[string]time.Time, len(m.st.State.FirstCrossed))
	for k, v := range m.st.State.FirstCrossed {
		first[k] = v
	}
	return Snapshot{
		Observed: m.node.Time, Node: m.node, Config: m.activeLocked(), Result: m.result, FirstSeen: first,
		Conditions: m.conditionsLocked(), Evictions: append([]Eviction(nil), m.st.Evictions...), Error: m.err,
	}
}

// activeLocked is the thresholds in force: for the layout last measured, once measured.
func (m *Manager) activeLocked() policy.Config {
	if m.node.Time.IsZero() {
		return m.cfg
	}
	return m.active
}

func (m *Manager) saveLocked() {
	if err := m.o.Store.WriteJSON(checkpointName, &m.st); err != nil {
		m.o.Log.Error("write the eviction checkpoint", "err", err)
	}
}

// observations turns the measured signals into the policy's terms.
func observations(n observe.Node) policy.Observations {
	out := policy.Observations{}
	for name, v := range n.Signals {
		if v.Err != nil {
			continue
		}
		format := resource.BinarySI
		if name == string(policy.SignalPIDAvailable) || name == string(policy.SignalNodeFsInodesFree) || name == string(policy.SignalImageFsInodesFree) || name == string(policy.SignalContainerFsInodesFree) {
			format = resource.DecimalSI
		}
		out[policy.Signal(name)] = policy.Observation{
			Available: *resource.NewQuantity(v.Available, format),
			Capacity:  *resource.NewQuantity(v.Capacity, format),
			Time:      n.Time,
		}
	}
	return out
}
