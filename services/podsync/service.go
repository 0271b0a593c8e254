// Package podsync is unitlet-podsync: it runs the pods the node should run. It gathers the
// desired pods from the API server and from static manifests, admits them, runs them on
// the CRI runtime (sandboxes, containers, images, probes, hooks, restarts with backoff,
// graceful termination), relists the runtime every second, and reports each pod's
// observed status over the bus.
package podsync

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/timestamppb"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	podsyncv1 "github.com/unitlet/unitlet/proto/unitlet/podsync/v1"
	"github.com/unitlet/unitlet/services/podsync/admission"
	"github.com/unitlet/unitlet/services/podsync/criconfig"
	"github.com/unitlet/unitlet/services/podsync/podsource"
	"github.com/unitlet/unitlet/services/podsync/podworker"
	"github.com/unitlet/unitlet/services/podsync/relist"
	"github.com/unitlet/unitlet/shared/payload"
	"github.com/unitlet/unitlet/shared/watch"
)

// watchHistory is how many pod changes the hub remembers for subscribers that reconnect.
const watchHistory = 1024

// Service is the desired pods, their workers and what they observed.
type Service struct {
	log      *slog.Logger
	clk      clock.WithTicker
	workers  *podworker.Manager
	relister *relist.Relister
	node     func() (*corev1.Node, string)
	maxPods  int
	sysctls  *admission.Sysctls
	runtime  admission.Runtime
	metrics  *metrics
	// sourcesWanted are the sources that must report once before podsync removes pods
	// the runtime has and nobody wants (after a restart, not before it knows them all).
	sourcesWanted []string

	mu       sync.Mutex
	sources  map[string][]*corev1.Pod // the desired pods of each source
	seen     map[string]bool          // sources that have reported
	desired  map[types.UID]*corev1.Pod
	sourceOf map[types.UID]string
	admitted map[types.UID]bool
	rejected map[types.UID]admission.Result
	observed map[types.UID]*podsyncv1.Pod
	// encoded is the pod object whose metadata and spec observed[uid].Pod holds.
	encoded map[types.UID]*corev1.Pod
	mirrors map[string]*corev1.Pod // mirror pods by namespace/name
	hub     *watch.Hub[[]*podsyncv1.Pod]
	// staticChanged has a value when static or mirror pods changed since it was last read.
	staticChanged chan struct{}
	// eviction is unitlet-eviction's admission verdict, nil without it (eviction.go); a pod
	// it holds waits, neither admitted nor rejected, and is admitted again when the pods
	// change or when evictionRetryArmed's timer fires.
	eviction           *evictionCheck
	evictionRetryArmed bool
	// shutdown is graceful node shutdown's admission check, nil when it is off.
	shutdown func() (ok bool, reason, message string)
	events   podworker.Recorder
}

// ServiceOptions are what a Service is built from.
type ServiceOptions struct {
	Log      *slog.Logger
	Clock    clock.WithTicker
	Registry prometheus.Registerer
	// Node gives the node admission judges pods against, and which view of it that is
	// (the API server's Node or the local one), for the log.
	Node    func() (*corev1.Node, string)
	MaxPods int
	// Sysctls is the sysctl allowlist admission applies (nil: the kernel's safe sysctls).
	Sysctls *admission.Sysctls
	// Runtime is the container runtime as admission names it (what it lacks).
	Runtime admission.Runtime
	// SourcesWanted are the pod sources that must report once before pods the runtime has
	// and nobody wants are removed.
	SourcesWanted []string
	// EvictionSocket is unitlet-eviction's bus socket and Eviction its client: admission
	// asks it for its verdict on node pressure (eviction.go). Either empty: no verdicts.
	EvictionSocket string
	Eviction       EvictionAdmitter
	// Events records pod events (AdmittedWithoutEvictionCheck, WaitingForEvictionCheck);
	// nil: none.
	Events podworker.Recorder
	// Shutdown refuses new pods while the node shuts down (nodeshutdown.Manager.Admit);
	// nil: graceful node shutdown is off.
	Shutdown func() (ok bool, reason, message string)
}

// NewService returns the service. Its workers and relister come with Attach, as they need
// the service's own callbacks (Report and RuntimeChanged).
func NewService(o ServiceOptions) *Service {
	s := &Service{
		log: o.Log, clk: o.Clock, node: o.Node, maxPods: o.MaxPods, sysctls: o.Sysctls, runtime: o.Runtime, sourcesWanted: o.SourcesWanted,
		events:        o.Events,
		shutdown:      o.Shutdown,
		staticChanged: make(chan struct{}, 1),
		metrics:       newMetrics(o.Registry),
		sources:       map[string][]*corev1.Pod{},
		seen:          map[string]bool{},
		desired:       map[types.UID]*corev1.Pod{},
		sourceOf:      map[types.UID]string{},
		admitted:      map[types.UID]bool{},
		rejected:      map[types.UID]admission.Result{},
		observed:      map[types.UID]*podsyncv1.Pod{},
		encoded:       map[types.UID]*corev1.Pod{},
		mirrors:       map[string]*corev1.Pod{},
	}
	if o.EvictionSocket != "" && o.Eviction != nil {
		s.eviction = &evictionCheck{socket: o.EvictionSocket, client: o.Eviction, clk: o.Clock}
	}
	s.hub = watch.NewHub(0, watchHistory, s.snapshotLocked)
	return s
}

// Attach gives the service its workers and relister (they need the service's callbacks).
func (s *Service) Attach(w *podworker.Manager, r *relist.Relister) {
	s.workers, s.relister = w, r
}

// SetPods takes the complete desired set of one source (podsource.Sink).
func (s *Service) SetPods(source string, pods []*corev1.Pod) {
	s.mu.Lock()
	s.sources[source] = pods
	s.seen[source] = true
	s.recomputeLocked()
	s.mu.Unlock()
	if source != podsource.SourceAPI {
		s.noteStaticChanged()
	}
}

// SetMirrorPods takes the mirror pods the API has for this node (podsource.MirrorSink).
func (s *Service) SetMirrorPods(pods []*corev1.Pod) {
	s.mu.Lock()
	s.mirrors = map[string]*corev1.Pod{}
	for _, p := range pods {
		s.mirrors[p.Namespace+"/"+p.Name] = p
	}
	for uid, o := range s.observed {
		if p := s.desired[uid]; p != nil {
			if m := s.mirrors[p.Namespace+"/"+p.Name]; m != nil && o.MirrorUid != string(m.UID) {
				o.MirrorUid = string(m.UID)
				s.publishLocked(o)
			}
		}
	}
	s.mu.Unlock()
	s.noteStaticChanged()
}

// noteStaticChanged marks static or mirror pods as changed, without waiting for a reader.
func (s *Service) noteStaticChanged() {
	select {
	case s.staticChanged <- struct{}{}:
	default:
	}
}

// BadManifest counts and logs a manifest a source skipped (podsource.Reporter).
func (s *Service) BadManifest(source, name string, err error) {
	s.metrics.badManifests.WithLabelValues(source).Inc()
	s.log.Warn("skipped a bad pod manifest", "source", source, "manifest", name, "err", err)
}

// StaticPods are the desired pods from static sources, and the mirror pods the API has.
// ok is false until every static source has reported once: before that, a mirror pod
// without a static pod may only mean its manifest has not been read yet.
func (s *Service) StaticPods() (static, mirrors []*corev1.Pod, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ok = true
	for _, src := range s.sourcesWanted {
		if src != podsource.SourceAPI && !s.seen[src] {
			ok = false
		}
	}
	for src, pods := range s.sources {
		if src != podsource.SourceAPI {
			static = append(static, pods...)
		}
	}
	for _, m := range s.mirrors {
		mirrors = append(mirrors, m)
	}
	return static, mirrors, ok
}

// recomputeLocked brings the workers in line with the union of the sources: new pods are
// admitted (in creation order, as the kubelet does) and started, changed ones updated,
// vanished ones stopped and forgotten.
func (s *Service) recomputeLocked() {
	next := map[types.UID]*corev1.Pod{}
	src := map[types.UID]string{}
	for source, pods := range s.sources {
		for _, p := range pods {
			if _, dup := next[p.UID]; dup {
				continue
			}
			next[p.UID], src[p.UID] = p, source
		}
	}
	var added []*corev1.Pod
	for uid, p := range next {
		if _, ok := s.desired[uid]; ok {
			if s.admitted[uid] {
				s.workers.Update(p, src[uid])
			} else if s.eviction != nil && s.eviction.isHeld(uid) {
				added = append(added, p) // still waits for eviction: admitted in order
			}
			continue
		}
		added = append(added, p)
	}
	for uid := range s.desired {
		if _, ok := next[uid]; !ok {
			if !s.workers.Terminate(uid, nil, "", "") {
				s.forgetLocked(uid)
			}
		}
	}
	s.desired, s.sourceOf = next, src
	s.admitInOrderLocked(added)
}

// admitInOrderLocked admits pods in the kubelet's order: by creation, then UID.
func (s *Service) admitInOrderLocked(pods []*corev1.Pod) {
	sort.Slice(pods, func(i, j int) bool {
		a, b := pods[i], pods[j]
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.CreationTimestamp.Before(&b.CreationTimestamp)
		}
		return a.UID < b.UID
	})
	for _, p := range pods {
		s.admitLocked(p, s.sourceOf[p.UID])
	}
}

// retryHeld admits again the pods held for unitlet-eviction's verdict, in order.
func (s *Service) retryHeld() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.evictionRetryArmed = false
	var held []*corev1.Pod
	for _, uid := range s.eviction.heldPods() {
		if p := s.desired[uid]; p != nil {
			held = append(held, p)
		} else {
			s.eviction.forget(uid)
		}
	}
	s.admitInOrderLocked(held)
}

// admitLocked runs admission for a new pod, then asks unitlet-eviction; an admitted pod
// gets a worker, a rejected one ends Failed with the kubelet's reason and never runs.
func (s *Service) admitLocked(p *corev1.Pod, source string) {
	if p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		// Nothing to admit: a worker still stops whatever the runtime has of it.
		if s.eviction != nil {
			s.eviction.forget(p.UID)
		}
		s.admitted[p.UID] = true
		s.workers.Update(p, source)
		return
	}
	var active []*corev1.Pod
	for uid := range s.admitted {
		if q := s.desired[uid]; q != nil && q.UID != p.UID && !s.terminal(uid) {
			// Counted with the resources it was allocated: a Deferred resize holds none.
			active = append(active, s.workers.Allocated(q))
		}
	}
	node, view := s.node()
	r := admission.Admit(p, node, active, s.maxPods, s.sysctls, s.runtime)
	if s.shutdown != nil && r.Admit && !s.running(p.UID) {
		// As the kubelet's shutdown manager, an admit handler after the others: while
		// the node shuts down no new pod starts. A pod the runtime already runs (podsync
		// restarted during the shutdown) is admitted again, so that it gets a worker and
		// the shutdown ends it; refused, it would keep running with a Failed status.
		if ok, reason, message := s.shutdown(); !ok {
			r = admission.Result{Reason: reason, Message: message}
		}
	}
	if r.Admit && s.eviction != nil && !s.running(p.UID) {
		// Node pressure: unitlet-eviction's verdict, or a hold while it does not answer
		// (eviction.go). Static pods are asked too: it is eviction that lets critical pods
		// in. A pod the runtime already runs was admitted by an earlier podsync: a restart
		// of podsync must not turn it away for pressure (the kubelet's eviction manager has
		// no verdict yet when the kubelet re-admits its pods at start; eviction itself
		// decides what goes).
		v := s.eviction.verdict(p)
		if v.event != "" && s.events != nil {
			s.events.Event(p, v.eventType, v.eventReason, v.event)
		}
		if v.hold {
			if v.event != "" {
				s.log.Info("pod held until unitlet-eviction answers", "pod", p.Namespace+"/"+p.Name, "why", v.event)
			}
			if !s.evictionRetryArmed {
				s.evictionRetryArmed = true
				t := s.clk.NewTimer(evictionRetry)
				go func() {
					<-t.C()
					s.retryHeld()
				}()
			}
			return
		}
		if !v.result.Admit {
			r = v.result
		}
	} else if s.eviction != nil {
		s.eviction.forget(p.UID)
	}
	if !r.Admit {
		s.metrics.rejected.WithLabelValues(r.Reason).Inc()
		s.log.Info("pod rejected by admission", "pod", p.Namespace+"/"+p.Name, "node", view, "reason", r.Reason, "message", r.Message)
		s.rejected[p.UID] = r
		st := admission.Reject(p, r)
		o := s.observedLocked(p, source)
		setStatus(o, st)
		o.Terminated = true
		s.publishLocked(o)
		return
	}
	s.log.Debug("pod admitted", "pod", p.Namespace+"/"+p.Name, "node", view)
	s.admitted[p.UID] = true
	s.workers.Update(p, source)
}

// running reports whether the runtime has a sandbox of the pod (at the last relist).
func (s *Service) running(uid types.UID) bool {
	return s.relister != nil && s.relister.Pod(uid) != nil
}

// terminal reports whether an admitted pod has finished (it no longer counts against the
// node's resources).
func (s *Service) terminal(uid types.UID) bool {
	o := s.observed[uid]
	return o != nil && o.Terminated
}

func (s *Service) forgetLocked(uid types.UID) {
	if s.eviction != nil {
		s.eviction.forget(uid)
	}
	delete(s.admitted, uid)
	delete(s.rejected, uid)
	if o := s.observed[uid]; o != nil {
		delete(s.observed, uid)
		delete(s.encoded, uid)
		o.Removed = true
		s.publishLocked(o)
	}
}

func (s *Service) observedLocked(p *corev1.Pod, source string) *podsyncv1.Pod {
	o := s.observed[p.UID]
	if o == nil {
		o = &podsyncv1.Pod{Uid: string(p.UID), FirstSeen: timestamppb.New(s.clk.Now())}
		s.observed[p.UID] = o
	}
	o.Namespace, o.Name, o.Source = p.Namespace, p.Name, source
	if s.encoded[p.UID] != p {
		// Sources replace a pod's object when it changes, so the pointer tells.
		o.Pod, _ = json.Marshal(&corev1.Pod{TypeMeta: podTypeMeta, ObjectMeta: busMeta(p.ObjectMeta), Spec: p.Spec})
		o.PodSchema = payload.PodsyncPod.Write
		s.encoded[p.UID] = p
	}
	if m := s.mirrors[p.Namespace+"/"+p.Name]; m != nil && source != podsource.SourceAPI {
		o.MirrorUid = string(m.UID)
	}
	return o
}

// setStatus puts st in o as the bus carries it.
func setStatus(o *podsyncv1.Pod, st corev1.PodStatus) {
	o.Status, _ = json.Marshal(st)
	o.StatusSchema = payload.PodsyncPodStatus.Write
}

// Report takes a worker's observation of its pod.
func (s *Service) Report(ob podworker.Observed) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.observedLocked(ob.Pod, ob.Source)
	o.FirstSeen = timestamppb.New(ob.FirstSeen)
	setStatus(o, ob.Status)
	o.Terminating, o.Terminated = ob.Terminating, ob.Terminated
	o.Containers = o.Containers[:0]
	for _, c := range ob.Containers {
		o.Containers = append(o.Containers, &podsyncv1.Container{Name: c.Name, Id: c.ID, LogPath: c.LogPath, Init: c.Init})
	}
	s.metrics.observe(ob)
	// The final state first (terminated), then the removal: a subscriber sees both.
	s.publishLocked(o)
	if ob.Removed {
		s.forgetLocked(ob.Pod.UID)
	}
}

func (s *Service) publishLocked(o *podsyncv1.Pod) {
	c := clonePod(o)
	s.hub.Publish(func(uint64) []*podsyncv1.Pod { return []*podsyncv1.Pod{c} })
}

// snapshotLocked is every pod (called by the hub under its lock, with s.mu held by the
// caller of Subscribe).
func (s *Service) snapshotLocked() []*podsyncv1.Pod {
	out := make([]*podsyncv1.Pod, 0, len(s.observed))
	for _, o := range s.observed {
		out = append(out, clonePod(o))
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// List is every pod and the sequence number of the newest change included.
func (s *Service) List() ([]*podsyncv1.Pod, uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snapshotLocked(), s.hub.Seq()
}

// Subscribe starts a watch after the given sequence number. A subscriber that has seen
// nothing (after 0) gets a snapshot first, even before the first change.
func (s *Service) Subscribe(after uint64) (*watch.Event[[]*podsyncv1.Pod], *watch.Subscription[[]*podsyncv1.Pod]) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if after == 0 {
		// Changes are published under s.mu: none slips between the snapshot and the
		// subscription.
		seq := s.hub.Seq()
		return &watch.Event[[]*podsyncv1.Pod]{Seq: seq, Snapshot: true, Value: s.snapshotLocked()}, s.hub.Subscribe(seq)
	}
	return nil, s.hub.Subscribe(after)
}

// FinalStatusInAPI reports whether a pod from the API server has a terminal phase there
// (its final status was written), or is gone from it. Pods of other sources (static
// pods) count as written: their mirror pods are not waited for.
func (s *Service) FinalStatusInAPI(uid types.UID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.desired[uid]
	if p == nil || s.sourceOf[uid] != podsource.SourceAPI {
		return true
	}
	return p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded
}

// shutdownPods are the pods graceful node shutdown ends (nodeshutdown.Pods): a pod has
// ended once its worker terminated it and its final status is in the API.
type shutdownPods struct {
	*podworker.Manager
	svc *Service
}

func (p shutdownPods) Ended(uid types.UID) bool {
	return p.Manager.Ended(uid) && p.svc.FinalStatusInAPI(uid)
}

// Kill evicts a pod (unitlet-eviction's KillPod), as the kubelet's eviction manager does:
// a Warning event with reason and message, then the pod is stopped with grace (nil: its own
// grace period, 0: at once) and ends Failed with reason and message and the condition
// DisruptionTarget=True, reason TerminationByKubelet. The kubelet's event also carries
// annotations naming the starved resource and the offending containers; KillPod does not
// carry them, so the event has none.
func (s *Service) Kill(uid types.UID, grace *int64, reason, message string) error {
	if !s.workers.Evict(uid, grace, reason, message) {
		return fmt.Errorf("pod %s: %w", uid, errUnknownPod)
	}
	return nil
}

// Housekeeping stops and removes what the runtime runs of pods nobody wants (pods deleted
// while podsync was down), once every source has reported.
func (s *Service) Housekeeping(ctx context.Context) error {
	t := s.clk.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		}
		s.mu.Lock()
		ready := s.sourcesSeenLocked()
		s.mu.Unlock()
		if !ready || !s.relister.Synced() {
			continue
		}
		for uid, rp := range s.relister.Pods() {
			if s.workers.Known(uid) {
				continue
			}
			s.mu.Lock()
			_, wanted := s.desired[uid]
			s.mu.Unlock()
			if wanted {
				continue
			}
			s.log.Info("stopping a pod nobody wants", "pod", rp.Namespace+"/"+rp.Name, "uid", uid)
			orphan := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: uid, Name: rp.Name, Namespace: rp.Namespace}}
			if g := orphanGrace(rp); g != nil {
				orphan.Spec.TerminationGracePeriodSeconds = g
			}
			s.workers.Update(orphan, "runtime")
			s.workers.Terminate(uid, nil, "", "")
		}
	}
}

// RuntimeRemovable returns, as of the call, whether all that is dead of a pod in the
// runtime may be removed (disk reclaim) and what is left in its cgroup killed: no worker
// runs it (its worker has terminated, or it has none), it does not wait for
// unitlet-eviction's verdict (a held pod is still wanted: what it has in the runtime, an
// init container that ran, is its own), and every source has reported (before, a pod
// without a worker may only not be known yet). These are the kubelet's pods whose runtime
// should be removed.
func (s *Service) RuntimeRemovable() func(types.UID) bool {
	s.mu.Lock()
	ready := s.sourcesSeenLocked()
	held := s.heldLocked()
	s.mu.Unlock()
	if !ready {
		return func(types.UID) bool { return false }
	}
	active := s.workers.Active()
	return func(uid types.UID) bool { return !active[uid] && !held[uid] }
}

// ActiveOrHeld returns the pods whose cgroups stay: those a worker runs
// (podworker.Manager.Active) and those held for unitlet-eviction's verdict, which the
// runtime may already run (admitted by an earlier podsync) and which are admitted as soon
// as it answers.
func (s *Service) ActiveOrHeld() map[types.UID]bool {
	s.mu.Lock()
	held := s.heldLocked()
	s.mu.Unlock()
	out := s.workers.Active()
	for uid := range held {
		out[uid] = true
	}
	return out
}

// sourcesSeenLocked reports whether every wanted pod source has reported: before, a pod
// without a worker may only not be known yet.
func (s *Service) sourcesSeenLocked() bool {
	for _, src := range s.sourcesWanted {
		if !s.seen[src] {
			return false
		}
	}
	return true
}

// heldLocked are the pods held for unitlet-eviction's verdict.
func (s *Service) heldLocked() map[types.UID]bool {
	held := map[types.UID]bool{}
	if s.eviction != nil {
		for _, uid := range s.eviction.heldPods() {
			held[uid] = true
		}
	}
	return held
}

// PodContentRemovable returns, as of the call, whether a pod's content on the node (its
// log directory) may go, by the kubelet's rule (ShouldPodContentBeRemoved): a pod that a
// source still has may go once it was deleted and its worker has terminated; one that no
// source has, once it has no running worker; none before every source has reported (a
// pod may only not be known yet). A pod that ended but was not deleted keeps its logs.
func (s *Service) PodContentRemovable() func(types.UID) bool {
	s.mu.Lock()
	ready := s.sourcesSeenLocked()
	kept := map[types.UID]bool{}
	for uid, p := range s.desired {
		if p.DeletionTimestamp == nil {
			kept[uid] = true
		}
	}
	s.mu.Unlock()
	if !ready {
		return func(types.UID) bool { return false }
	}
	// Asked after the desired pods, and by the caller after it listed what it removes: a
	// listed directory's pod had a worker before either.
	active := s.workers.Active()
	return func(uid types.UID) bool { return !kept[uid] && !active[uid] }
}

// orphanGrace is the grace period the kubelet's annotations recorded on the pod's
// containers.
func orphanGrace(rp *relist.Pod) *int64 {
	for _, c := range rp.Containers {
		if g := criconfig.ParseContainerLabels(c.Labels, c.Annotations).PodTerminationGracePeriod; g != nil {
			return g
		}
	}
	return nil
}

// RuntimeChanged is the relister's callback: wake the workers of the pods that changed.
func (s *Service) RuntimeChanged(uids []types.UID) {
	s.workers.Trigger(uids...)
}

// podTypeMeta is a Pod's kind and apiVersion, for pods encoded on the bus.
var podTypeMeta = metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"}

// busMeta is a pod's metadata as it crosses the bus: without managedFields, the API
// server's field-ownership records, which no service reads and which can outweigh the
// rest of the pod.
func busMeta(m metav1.ObjectMeta) metav1.ObjectMeta {
	m.ManagedFields = nil
	return m
}
