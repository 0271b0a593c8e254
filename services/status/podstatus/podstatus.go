// Package podstatus writes the statuses podsync observes to the pods in the API server,
// as the kubelet's status manager does: per pod in order, newest status wins, only when
// the API's status differs, merged so that a restart changes nothing (condition transition
// times and the start time stay the API's), rate limited, retried with backoff. Static
// pods' statuses go to their mirror pods. A terminated pod the API is deleting is deleted
// for good (grace period 0, UID precondition) once its final status is written.
package podstatus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	podsyncv1 "github.com/unitlet/unitlet/proto/unitlet/podsync/v1"
	"github.com/unitlet/unitlet/shared/bus"
	"github.com/unitlet/unitlet/shared/kubeapi"
	"github.com/unitlet/unitlet/shared/payload"
)

// SourceAPI is podsync's source name for pods from the API server; "file" and "http" are
// static pods, written to their mirror pods.
const SourceAPI = "api"

// Defaults.
const (
	DefaultQPS     = 50
	DefaultWorkers = 4
	// retry backoff bounds for a pod whose write failed.
	minRetry = 200 * time.Millisecond
	maxRetry = 30 * time.Second
)

// Watcher opens podsync's pod watch after a sequence number.
type Watcher interface {
	WatchPods(ctx context.Context, after uint64) (bus.Stream[*podsyncv1.WatchPodsResponse], error)
}

// FromClient adapts podsync's gRPC client to a Watcher.
func FromClient(c podsyncv1.PodSyncServiceClient) Watcher { return clientWatcher{c} }

type clientWatcher struct {
	c podsyncv1.PodSyncServiceClient
}

func (w clientWatcher) WatchPods(ctx context.Context, after uint64) (bus.Stream[*podsyncv1.WatchPodsResponse], error) {
	s, err := w.c.WatchPods(ctx, &podsyncv1.WatchPodsRequest{AfterSequence: after})
	if err != nil {
		return nil, fmt.Errorf("watch podsync's pods: %w", err)
	}
	return s, nil
}

// Options configure a Manager.
type Options struct {
	// Client is the node's API client; nil means standalone (Run writes nothing).
	Client   kubernetes.Interface
	NodeName string
	Pods     Watcher
	// QPS bounds API calls (status writes, deletions, reads) per second; default 50 when
	// 0, burst 2*QPS.
	QPS float32
	// Workers sync that many pods at once (default 4); one pod is never synced twice at once.
	Workers int
	Clock   clock.Clock
	Log     *slog.Logger
	// Registry receives the metrics; nil registers nothing.
	Registry prometheus.Registerer
	// BusBackoff bounds the wait between reconnects to podsync (bus.Resume's defaults when 0).
	BusMinBackoff, BusMaxBackoff time.Duration
}

// Manager writes podsync's pod statuses to the API server.
type Manager struct {
	o       Options
	log     *slog.Logger
	clock   clock.Clock
	limiter *rate.Limiter
	metrics *metrics
	queue   workqueue.TypedRateLimitingInterface[string]
	lister  corelisters.PodLister

	mu      sync.Mutex
	pods    map[string]*entry    // by podsync's UID
	targets map[types.UID]string // API UID → podsync's UID
	pending int
	writes  uint64
	changes uint64 // numbers entries' versions, unique across forgotten and new entries
	// parts gathers a snapshot that podsync sends in parts until its last part; gathering
	// is true meanwhile.
	parts     []*podsyncv1.Pod
	gathering bool
}

// entry is one pod as podsync last reported it, and what this manager knows of its API
// object.
type entry struct {
	uid             string
	namespace, name string
	source          string
	mirrorUID       types.UID
	raw             []byte
	status          corev1.PodStatus
	terminated      bool
	removed         bool

	// version numbers podsync's last change; dirty is true until the API is known to carry
	// version's status; since is when it became dirty.
	version uint64
	dirty   bool
	since   time.Time

	// written is the API's status after this manager's last write, and writtenRV the
	// informer's resourceVersion when it was made: while the informer still shows that
	// version, written is newer than what it holds.
	written    *corev1.PodStatus
	writtenFor types.UID
	writtenRV  string
	reread     bool // the last write conflicted: read the pod from the API server
	deleted    bool
}

// target is the UID of the API object carrying the pod's status ("" while unknown).
func (e *entry) target() types.UID {
	if e.source == SourceAPI {
		return types.UID(e.uid)
	}
	return e.mirrorUID
}

// New returns a Manager; Run starts it.
func New(o Options) *Manager {
	if o.QPS <= 0 {
		o.QPS = DefaultQPS
	}
	if o.Workers <= 0 {
		o.Workers = DefaultWorkers
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	burst := max(1, int(2*o.QPS))
	m := &Manager{
		o:       o,
		log:     o.Log.With("component", "podstatus"),
		clock:   o.Clock,
		limiter: rate.NewLimiter(rate.Limit(o.QPS), burst),
		metrics: newMetrics(o.Registry),
		pods:    map[string]*entry{},
		targets: map[types.UID]string{},
	}
	cfg := workqueue.TypedRateLimitingQueueConfig[string]{}
	if c, ok := o.Clock.(clock.WithTicker); ok {
		cfg.Clock = c
	}
	m.queue = workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](minRetry, maxRetry), cfg)
	return m
}

// Stats reports the status writes made and the pods whose newest status is not yet in the
// API server.
func (m *Manager) Stats() (writes uint64, pending int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.writes, m.pending
}

// Run follows podsync's pods and writes their statuses until ctx ends; it returns nil
// then. Without an API client it only waits for ctx.
func (m *Manager) Run(ctx context.Context) error {
	defer m.queue.ShutDown()
	if m.o.Client == nil {
		<-ctx.Done()
		return nil
	}
	factory := informers.NewSharedInformerFactoryWithOptions(m.o.Client, 0,
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
			lo.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", m.o.NodeName).String()
		}),
		informers.WithTransform(kubeapi.DropManagedFields))
	pods := factory.Core().V1().Pods()
	inf := pods.Informer()
	m.lister = pods.Lister()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    m.apiChanged,
		UpdateFunc: func(_, obj any) { m.apiChanged(obj) },
	}); err != nil {
		return fmt.Errorf("watch the node's pods: %w", err)
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return nil
	}

	var wg sync.WaitGroup
	for range m.o.Workers {
		wg.Go(func() {
			for m.work(ctx) {
			}
		})
	}
	err := bus.Resume(ctx, m.o.Pods.WatchPods,
		func(r *podsyncv1.WatchPodsResponse) uint64 { return r.GetSequence() },
		func(r *podsyncv1.WatchPodsResponse) error { m.take(r); return nil },
		bus.ResumeOptions{
			MinBackoff: m.o.BusMinBackoff,
			MaxBackoff: m.o.BusMaxBackoff,
			OnDisconnect: func(err error, retryIn time.Duration) {
				m.log.Warn("podsync's pod watch ended; reconnecting", "err", err, "retry_in", retryIn)
			},
		})
	m.queue.ShutDown()
	wg.Wait()
	if ctx.Err() != nil {
		return nil
	}
	return fmt.Errorf("follow podsync's pods: %w", err)
}

// take applies one message of podsync's watch: a snapshot, whole or gathered from its
// parts, replaces every pod; a change updates the pods it carries.
func (m *Manager) take(r *podsyncv1.WatchPodsResponse) {
	m.mu.Lock()
	pods, snapshot := r.GetPods(), r.GetSnapshot()
	switch {
	case snapshot && r.GetSnapshotContinues():
		// The first part; a snapshot left unfinished by a broken stream is dropped.
		m.parts, m.gathering = append([]*podsyncv1.Pod(nil), pods...), true
		m.mu.Unlock()
		return
	case snapshot:
		m.parts, m.gathering = nil, false
	case m.gathering:
		m.parts = append(m.parts, pods...)
		if r.GetSnapshotContinues() {
			m.mu.Unlock()
			return
		}
		pods, snapshot = m.parts, true
		m.parts, m.gathering = nil, false
	}
	var wake []string
	if snapshot {
		keep := make(map[string]bool, len(pods))
		for _, p := range pods {
			keep[p.GetUid()] = true
		}
		for uid := range m.pods {
			if !keep[uid] {
				m.forgetLocked(uid)
			}
		}
	}
	for _, p := range pods {
		if m.updateLocked(p) {
			wake = append(wake, p.GetUid())
		}
	}
	m.metrics.pending.Set(float64(m.pending))
	m.mu.Unlock()
	for _, uid := range wake {
		m.queue.Add(uid)
	}
}

// updateLocked records podsync's view of one pod and reports whether it needs a sync.
func (m *Manager) updateLocked(p *podsyncv1.Pod) bool {
	uid := p.GetUid()
	if uid == "" {
		return false
	}
	e := m.pods[uid]
	if e == nil {
		e = &entry{uid: uid}
		m.pods[uid] = e
	} else if e.source == p.GetSource() && e.mirrorUID == types.UID(p.GetMirrorUid()) &&
		e.terminated == p.GetTerminated() && e.removed == p.GetRemoved() && string(e.raw) == string(p.GetStatus()) {
		return false
	}
	if len(p.GetStatus()) > 0 && string(e.raw) != string(p.GetStatus()) {
		var st corev1.PodStatus
		if err := payload.PodsyncPodStatus.DecodeJSON(p.GetStatusSchema(), p.GetStatus(), &st); err != nil {
			m.log.Warn("ignored a pod status podsync sent", "pod", p.GetNamespace()+"/"+p.GetName(), "uid", uid, "err", err)
		} else {
			e.raw, e.status = p.GetStatus(), st
		}
	}
	if t := e.target(); t != "" && m.targets[t] == uid {
		delete(m.targets, t)
	}
	e.namespace, e.name, e.source = p.GetNamespace(), p.GetName(), p.GetSource()
	e.mirrorUID = types.UID(p.GetMirrorUid())
	e.terminated, e.removed = p.GetTerminated(), p.GetRemoved()
	if t := e.target(); t != "" {
		m.targets[t] = uid
	}
	m.changes++
	e.version = m.changes
	if !e.dirty {
		e.dirty, e.since = true, m.clock.Now()
		m.pending++
	}
	return true
}

func (m *Manager) forgetLocked(uid string) {
	e := m.pods[uid]
	if e == nil {
		return
	}
	if e.dirty {
		m.pending--
	}
	if t := e.target(); t != "" && m.targets[t] == uid {
		delete(m.targets, t)
	}
	delete(m.pods, uid)
}

// apiChanged wakes the pod an API object carries the status of: the API may now differ
// from what podsync observes (another writer, or a deletionTimestamp to act on).
func (m *Manager) apiChanged(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	m.mu.Lock()
	uid, ok := m.targets[pod.UID]
	m.mu.Unlock()
	if ok {
		m.queue.Add(uid)
	}
}

// work syncs one pod from the queue; false once the queue is shut down.
func (m *Manager) work(ctx context.Context) bool {
	uid, shutdown := m.queue.Get()
	if shutdown {
		return false
	}
	defer m.queue.Done(uid)
	if err := m.sync(ctx, uid); err != nil {
		if ctx.Err() != nil {
			return true
		}
		m.log.Warn("pod status sync failed; retrying", "uid", uid, "err", err)
		m.queue.AddRateLimited(uid)
		return true
	}
	m.queue.Forget(uid)
	return true
}

// errGone means the API object the status belongs to no longer exists.
var errGone = errors.New("pod is gone from the API server")

// sync brings one pod's API object in line with podsync's newest status and deletes it
// once terminated if the API is deleting it.
func (m *Manager) sync(ctx context.Context, uid string) error {
	m.mu.Lock()
	e := m.pods[uid]
	if e == nil {
		m.mu.Unlock()
		return nil
	}
	version, target := e.version, e.target()
	ns, name, src := e.namespace, e.name, e.source
	want := *e.status.DeepCopy()
	terminated, deleted, reread := e.terminated, e.deleted, e.reread
	var written *corev1.PodStatus
	writtenRV := e.writtenRV
	if e.written != nil && e.writtenFor == target {
		written = e.written.DeepCopy()
	}
	m.mu.Unlock()

	if target == "" || len(want.Conditions) == 0 && want.Phase == "" {
		// A static pod without its mirror pod yet, or nothing observed yet.
		m.synced(uid, version, nil, nil)
		m.forgetRemoved(uid, version)
		return nil
	}
	pod, err := m.current(ctx, ns, name, target, reread)
	if errors.Is(err, errGone) {
		m.synced(uid, version, nil, nil)
		m.forgetRemoved(uid, version)
		return nil
	}
	if err != nil {
		return err
	}
	base := pod.Status
	if written != nil && pod.ResourceVersion == writtenRV {
		base = *written
	}
	next := merge(base, want)
	patch, changed, err := statusPatch(target, base, next)
	if err != nil {
		return fmt.Errorf("pod %s/%s: %w", ns, name, err)
	}
	if changed {
		res, err := m.patch(ctx, ns, name, patch)
		switch {
		case apierrors.IsNotFound(err):
			m.synced(uid, version, nil, nil)
			m.forgetRemoved(uid, version)
			return nil
		case apierrors.IsConflict(err) || apierrors.IsInvalid(err):
			m.mu.Lock()
			e.reread, e.written = true, nil
			m.mu.Unlock()
			return fmt.Errorf("write status of pod %s/%s (will reread it): %w", ns, name, err)
		case err != nil:
			return fmt.Errorf("write status of pod %s/%s: %w", ns, name, err)
		}
		m.mu.Lock()
		m.writes++
		if e.version == version && e.dirty {
			m.metrics.syncDuration.Observe(m.clock.Since(e.since).Seconds())
		}
		m.mu.Unlock()
		st := res.Status
		m.synced(uid, version, &st, ptr.To(pod.ResourceVersion))
	} else {
		m.synced(uid, version, nil, nil)
	}

	if src == SourceAPI && terminated && pod.DeletionTimestamp != nil && !deleted {
		if err := m.delete(ctx, ns, name, target); err != nil {
			return err
		}
		m.mu.Lock()
		e.deleted = true
		m.mu.Unlock()
	}
	m.forgetRemoved(uid, version)
	return nil
}

// forgetRemoved forgets a pod podsync has removed once its last state is handled.
func (m *Manager) forgetRemoved(uid string, version uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e := m.pods[uid]; e != nil && e.removed && e.version == version {
		m.forgetLocked(uid)
		m.metrics.pending.Set(float64(m.pending))
	}
}

// synced records that the API carries the pod's status as of version (written: what the
// API answered to a write, made while the informer showed resourceVersion *rv).
func (m *Manager) synced(uid string, version uint64, written *corev1.PodStatus, rv *string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.pods[uid]
	if e == nil {
		return
	}
	e.reread = false
	if written != nil {
		e.written, e.writtenFor, e.writtenRV = written, e.target(), *rv
	}
	if e.version == version && e.dirty {
		e.dirty = false
		m.pending--
		m.metrics.pending.Set(float64(m.pending))
	}
}

// current is the API object with the given UID: from the informer's cache, or read from
// the API server when the cache lacks it or a write conflicted. errGone when absent or
// replaced by another pod of the same name.
func (m *Manager) current(ctx context.Context, ns, name string, uid types.UID, reread bool) (*corev1.Pod, error) {
	if !reread {
		pod, err := m.lister.Pods(ns).Get(name)
		if err == nil && pod.UID == uid {
			return pod, nil
		}
	}
	if err := m.wait(ctx); err != nil {
		return nil, err
	}
	pod, err := m.o.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, errGone
	case apierrors.IsForbidden(err) && !m.cached(ns, name, uid):
		// The node authorizer knows a pod only while it is bound to this node: one deleted
		// from the API reads as Forbidden ("no relationship found"), not NotFound. The
		// informer, which sees every pod of this node, agrees that it is gone.
		return nil, errGone
	case err != nil:
		return nil, fmt.Errorf("read pod %s/%s: %w", ns, name, err)
	case pod.UID != uid:
		return nil, errGone
	}
	return pod, nil
}

// cached reports whether the informer holds the pod with the given UID.
func (m *Manager) cached(ns, name string, uid types.UID) bool {
	pod, err := m.lister.Pods(ns).Get(name)
	return err == nil && pod.UID == uid
}

func (m *Manager) patch(ctx context.Context, ns, name string, patch []byte) (*corev1.Pod, error) {
	if err := m.wait(ctx); err != nil {
		return nil, err
	}
	res, err := m.o.Client.CoreV1().Pods(ns).Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	switch {
	case err == nil:
		m.metrics.writes.WithLabelValues(resultSuccess).Inc()
	case apierrors.IsNotFound(err):
		m.metrics.writes.WithLabelValues(resultNotFound).Inc()
	case apierrors.IsConflict(err):
		m.metrics.writes.WithLabelValues(resultConflict).Inc()
	default:
		m.metrics.writes.WithLabelValues(resultError).Inc()
	}
	return res, err
}

// delete removes a terminated pod from the API for good: grace period 0, and only the
// object with the pod's UID.
func (m *Manager) delete(ctx context.Context, ns, name string, uid types.UID) error {
	if err := m.wait(ctx); err != nil {
		return err
	}
	opts := metav1.NewPreconditionDeleteOptions(string(uid))
	opts.GracePeriodSeconds = ptr.To[int64](0)
	err := m.o.Client.CoreV1().Pods(ns).Delete(ctx, name, *opts)
	switch {
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		// Already gone, or the name now belongs to another pod.
		return nil
	case err != nil:
		return fmt.Errorf("delete terminated pod %s/%s: %w", ns, name, err)
	}
	m.metrics.deletions.Inc()
	m.log.Info("deleted terminated pod", "pod", ns+"/"+name, "uid", uid)
	return nil
}

// wait takes one token of the API rate limit, on the manager's clock.
func (m *Manager) wait(ctx context.Context) error {
	r := m.limiter.ReserveN(m.clock.Now(), 1)
	if !r.OK() {
		return errors.New("rate limit: burst too small")
	}
	d := r.DelayFrom(m.clock.Now())
	if d <= 0 {
		return nil
	}
	t := m.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		r.CancelAt(m.clock.Now())
		return ctx.Err()
	case <-t.C():
		return nil
	}
}
