// Package relist keeps podsync's view of the runtime: every interval it lists the CRI
// runtime's sandboxes and containers, groups them by pod, fetches the details of those that
// changed, and tells podsync which pods changed (the kubelet's PLEG, generic relist). Where
// the runtime streams container events (containerd 1.7 and later), FollowEvents re-reads a
// pod the moment one of its containers changes and the relist becomes a slower safety net
// (the kubelet's evented PLEG); containerd 1.6 sends none, so there relisting every second
// is how podsync sees a container exit.
package relist

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubetypes "k8s.io/kubelet/pkg/types"
	"k8s.io/utils/clock"

	"github.com/unitlet/unitlet/services/podsync/criconfig"
)

// HealthyThreshold is how long a relist may take or be late before podsync's runtime view
// is unhealthy (the kubelet's PLEG threshold).
const HealthyThreshold = 3 * time.Minute

// Runtime is the part of the CRI runtime service the relister reads.
type Runtime interface {
	ListPodSandbox(ctx context.Context, in *runtimeapi.ListPodSandboxRequest, opts ...grpc.CallOption) (*runtimeapi.ListPodSandboxResponse, error)
	PodSandboxStatus(ctx context.Context, in *runtimeapi.PodSandboxStatusRequest, opts ...grpc.CallOption) (*runtimeapi.PodSandboxStatusResponse, error)
	ListContainers(ctx context.Context, in *runtimeapi.ListContainersRequest, opts ...grpc.CallOption) (*runtimeapi.ListContainersResponse, error)
	ContainerStatus(ctx context.Context, in *runtimeapi.ContainerStatusRequest, opts ...grpc.CallOption) (*runtimeapi.ContainerStatusResponse, error)
}

// Sandbox is one pod sandbox.
type Sandbox struct {
	ID        string
	Attempt   uint32
	Ready     bool
	CreatedAt time.Time
	// IPs are the sandbox's pod IPs, the primary first; empty for host-network pods and
	// sandboxes that are not ready.
	IPs []string
}

// Container is one container instance.
type Container struct {
	ID   string
	Name string
	// Attempt is the container's restart count when it was created.
	Attempt     uint32
	SandboxID   string
	State       runtimeapi.ContainerState
	CreatedAt   time.Time
	StartedAt   time.Time
	FinishedAt  time.Time
	ExitCode    int32
	Reason      string
	Message     string
	Image       string
	ImageRef    string
	LogPath     string
	Labels      map[string]string
	Annotations map[string]string
	// TerminationMessageHostPath is the host file mounted at the container's
	// terminationMessagePath, "" when it has none.
	TerminationMessageHostPath string
	// User is the identity the container's first process runs as, as the runtime reports
	// it (containerd 2.x does; nil otherwise).
	User *runtimeapi.LinuxContainerUser
}

// Running reports whether the container is running.
func (c *Container) Running() bool { return c.State == runtimeapi.ContainerState_CONTAINER_RUNNING }

// Pod is everything the runtime has of one pod.
type Pod struct {
	UID       types.UID
	Name      string
	Namespace string
	// Sandboxes, newest first.
	Sandboxes []*Sandbox
	// Containers, newest first.
	Containers []*Container
}

// Latest is the newest instance of the named container, nil when there is none.
func (p *Pod) Latest(name string) *Container {
	if p == nil {
		return nil
	}
	for _, c := range p.Containers {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// Instances are the instances of the named container, newest first.
func (p *Pod) Instances(name string) []*Container {
	var out []*Container
	if p == nil {
		return out
	}
	for _, c := range p.Containers {
		if c.Name == name {
			out = append(out, c)
		}
	}
	return out
}

// GetSandboxes is the pod's sandboxes, newest first; none for a nil pod.
func (p *Pod) GetSandboxes() []*Sandbox {
	if p == nil {
		return nil
	}
	return p.Sandboxes
}

// ReadySandbox is the newest sandbox when it is ready, nil otherwise.
func (p *Pod) ReadySandbox() *Sandbox {
	if p == nil || len(p.Sandboxes) == 0 || !p.Sandboxes[0].Ready {
		return nil
	}
	return p.Sandboxes[0]
}

// Empty reports whether the runtime has nothing of the pod.
func (p *Pod) Empty() bool { return p == nil || len(p.Sandboxes) == 0 && len(p.Containers) == 0 }

// Relister keeps the latest view of the runtime's pods.
type Relister struct {
	rt       Runtime
	clk      clock.WithTicker
	interval time.Duration
	log      *slog.Logger
	changed  func(uids []types.UID)
	duration prometheus.Histogram
	interv   prometheus.Histogram

	mu       sync.RWMutex
	pods     map[types.UID]*Pod
	prints   map[types.UID]string
	last     time.Time // when the last relist finished
	lastErr  error
	started  time.Time
	details  map[string]*Container // container details by ID, kept while the ID exists
	sbIPs    map[string][]string   // sandbox IPs by sandbox ID and state
	lastTick time.Time
	// seq numbers each read of the runtime as it begins; readAt is the read that last set a
	// pod from a container event, so that a read that began earlier (a slow relist, an
	// older event's re-read) never replaces a newer view of the pod.
	seq    uint64
	readAt map[types.UID]uint64

	events *eventFollower
}

// New returns a relister that lists rt every interval and calls changed with the pods whose
// runtime state changed (from the relist goroutine; it must not block for long).
func New(rt Runtime, interval time.Duration, clk clock.WithTicker, reg prometheus.Registerer, log *slog.Logger, changed func(uids []types.UID)) *Relister {
	r := &Relister{
		rt: rt, clk: clk, interval: interval, log: log, changed: changed,
		pods: map[types.UID]*Pod{}, prints: map[types.UID]string{},
		details: map[string]*Container{}, sbIPs: map[string][]string{},
		readAt:  map[types.UID]uint64{},
		started: clk.Now(),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "kubelet_pleg_relist_duration_seconds",
			Help:    "Duration in seconds for relisting pods in PLEG.",
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10},
		}),
		interv: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "kubelet_pleg_relist_interval_seconds",
			Help:    "Interval in seconds between relisting in PLEG.",
			Buckets: []float64{0.5, 1, 1.5, 2, 3, 5, 10, 30},
		}),
	}
	r.events = newEventFollower(reg)
	if reg != nil {
		reg.MustRegister(r.duration, r.interv)
	}
	return r
}

// Run relists every interval (EventedInterval while container events are followed) until
// ctx ends, and at once when events start or stop being followed.
func (r *Relister) Run(ctx context.Context) error {
	t := r.clk.NewTimer(r.period())
	defer t.Stop()
	for {
		if err := r.Relist(ctx); err != nil && ctx.Err() == nil {
			r.log.Warn("relist failed", "err", err)
		}
		t.Reset(r.period())
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		case <-r.events.relistNow:
			if !t.Stop() {
				// Drain a tick that fired meanwhile, so Reset starts a fresh period.
				select {
				case <-t.C():
				default:
				}
			}
		}
	}
}

// period is how long the relist waits for the next one.
func (r *Relister) period() time.Duration {
	if r.events.inUse.Load() {
		return r.events.interval
	}
	return r.interval
}

// Relist lists the runtime once, updates the view, and reports changed pods.
func (r *Relister) Relist(ctx context.Context) error {
	start := r.clk.Now()
	if !r.lastTick.IsZero() {
		r.interv.Observe(start.Sub(r.lastTick).Seconds())
	}
	r.lastTick = start
	seq := r.nextSeq()
	rd, err := r.list(ctx)
	r.duration.Observe(r.clk.Since(start).Seconds())
	r.mu.Lock()
	if err != nil {
		r.lastErr = err
		r.mu.Unlock()
		return err
	}
	pods := rd.pods
	prints := make(map[types.UID]string, len(pods))
	for uid, p := range pods {
		prints[uid] = fingerprint(p)
	}
	// A pod this relist could not read keeps its last view, to be read again next time.
	for uid, err := range rd.unread {
		r.log.Warn("read the pod's runtime state; keeping its last view", "pod", uid, "err", err)
		if p, ok := r.pods[uid]; ok {
			pods[uid], prints[uid] = p, r.prints[uid]
		}
	}
	// A pod an event re-read after this relist began keeps that newer view.
	for uid, at := range r.readAt {
		if at < seq {
			delete(r.readAt, uid)
			continue
		}
		if p, ok := r.pods[uid]; ok {
			pods[uid], prints[uid] = p, r.prints[uid]
		} else {
			delete(pods, uid)
			delete(prints, uid)
		}
	}
	var changed []types.UID
	for uid := range pods {
		if prints[uid] != r.prints[uid] {
			changed = append(changed, uid)
		}
	}
	for uid := range r.pods {
		if _, ok := pods[uid]; !ok {
			changed = append(changed, uid)
		}
	}
	r.pods, r.prints = pods, prints
	r.last, r.lastErr = r.clk.Now(), nil
	r.mu.Unlock()
	if len(changed) > 0 && r.changed != nil {
		slices.Sort(changed)
		r.changed(changed)
	}
	return nil
}

// list builds the pods from the runtime, fetching the details of new or changed sandboxes
// and containers.
func (r *Relister) list(ctx context.Context) (*read, error) {
	details, ips := r.caches()
	rd, err := collect(ctx, r.rt, r.log, "", details, ips)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.details, r.sbIPs = rd.details, rd.ips
	r.mu.Unlock()
	return rd, nil
}

// caches are the details the last relist and the reads of single pods since fetched. They
// are replaced, never changed, so a reader may use them without the lock.
func (r *Relister) caches() (map[string]*Container, map[string][]string) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.details, r.sbIPs
}

// nextSeq numbers a read of the runtime that begins now.
func (r *Relister) nextSeq() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seq++
	return r.seq
}

// refresh reads one pod afresh after a container event and, unless a read that began
// later already set it, puts it in the view; it reports whether the pod changed.
func (r *Relister) refresh(ctx context.Context, uid types.UID) (bool, error) {
	seq := r.nextSeq()
	details, ips := r.caches()
	rd, err := collect(ctx, r.rt, r.log, uid, details, ips)
	if err == nil {
		err = rd.unread[uid]
	}
	if err != nil {
		return false, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rememberLocked(rd.details, rd.ips)
	if r.readAt[uid] > seq {
		return false, nil
	}
	r.readAt[uid] = seq
	old, had := r.prints[uid]
	p := rd.pods[uid]
	if p == nil {
		delete(r.pods, uid)
		delete(r.prints, uid)
		return had, nil
	}
	print := fingerprint(p)
	r.pods[uid], r.prints[uid] = p, print
	return !had || old != print, nil
}

// Inspect asks the runtime afresh for everything of one pod (nil when it has nothing):
// what a worker reads before it acts, since the last relist may be a second old.
//
// The lists are asked afresh; the details of a sandbox or container whose state has not
// changed since a read fetched them (its IPs, start and finish times, exit code) come from
// the caches, so a pod read several times while it starts asks the runtime for each
// detail once.
func (r *Relister) Inspect(ctx context.Context, uid types.UID) (*Pod, error) {
	details, ips := r.caches()
	rd, err := collect(ctx, r.rt, r.log, uid, details, ips)
	if err == nil {
		err = rd.unread[uid]
	}
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.rememberLocked(rd.details, rd.ips)
	r.mu.Unlock()
	return rd.pods[uid], nil
}

// rememberLocked adds the details a read of one pod fetched to the caches. The caches are
// replaced, never changed: when the read fetched anything new they are copied first. The
// next relist replaces them with what it saw, so entries of what has gone do not last.
func (r *Relister) rememberLocked(details map[string]*Container, ips map[string][]string) {
	newDetail, newIPs := false, false
	for id, d := range details {
		newDetail = newDetail || r.details[id] != d
	}
	for key := range ips {
		_, had := r.sbIPs[key]
		newIPs = newIPs || !had
	}
	if newDetail {
		merged := maps.Clone(r.details)
		maps.Copy(merged, details)
		r.details = merged
	}
	if newIPs {
		merged := maps.Clone(r.sbIPs)
		maps.Copy(merged, ips)
		r.sbIPs = merged
	}
}

// read is what one read of the runtime saw.
type read struct {
	pods map[types.UID]*Pod
	// details and ips are the caches for the next read.
	details map[string]*Container
	ips     map[string][]string
	// unread are the pods left out because a detail of theirs could not be read, and why.
	unread map[types.UID]error
}

// collect lists the runtime's sandboxes and containers (of one pod when uid is set) and
// groups them by pod. Details of sandboxes and containers whose state has not changed come
// from the caches.
func collect(ctx context.Context, rt Runtime, log *slog.Logger, uid types.UID, cachedDetails map[string]*Container, cachedIPs map[string][]string) (*read, error) {
	sbReq, cReq := &runtimeapi.ListPodSandboxRequest{}, &runtimeapi.ListContainersRequest{}
	if uid != "" {
		sel := map[string]string{kubetypes.KubernetesPodUIDLabel: string(uid)}
		sbReq.Filter = &runtimeapi.PodSandboxFilter{LabelSelector: sel}
		cReq.Filter = &runtimeapi.ContainerFilter{LabelSelector: sel}
	}
	sbs, err := rt.ListPodSandbox(ctx, sbReq)
	if err != nil {
		return nil, fmt.Errorf("list pod sandboxes: %w", err)
	}
	ctrs, err := rt.ListContainers(ctx, cReq)
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	pods := map[types.UID]*Pod{}
	pod := func(labels map[string]string) *Pod {
		uid := types.UID(labels[kubetypes.KubernetesPodUIDLabel])
		if uid == "" {
			return nil // not a pod of a node agent
		}
		p := pods[uid]
		if p == nil {
			p = &Pod{UID: uid, Name: labels[kubetypes.KubernetesPodNameLabel], Namespace: labels[kubetypes.KubernetesPodNamespaceLabel]}
			pods[uid] = p
		}
		return p
	}
	ips := map[string][]string{}
	for _, s := range sbs.Items {
		p := pod(s.Labels)
		if p == nil {
			continue
		}
		sb := &Sandbox{
			ID: s.Id, Attempt: s.GetMetadata().GetAttempt(),
			Ready:     s.State == runtimeapi.PodSandboxState_SANDBOX_READY,
			CreatedAt: time.Unix(0, s.CreatedAt),
		}
		key := s.Id + "/" + s.State.String()
		if cached, ok := cachedIPs[key]; ok {
			sb.IPs = cached
		} else if sb.Ready {
			st, err := rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: s.Id})
			if err != nil {
				return nil, fmt.Errorf("status of pod sandbox %s of %s/%s: %w", s.Id, p.Namespace, p.Name, err)
			}
			sb.IPs = SandboxIPs(st.GetStatus())
		}
		ips[key] = sb.IPs
		p.Sandboxes = append(p.Sandboxes, sb)
	}
	details := map[string]*Container{}
	unread := map[types.UID]error{}
	for _, c := range ctrs.Containers {
		p := pod(c.Labels)
		if p == nil {
			continue
		}
		d := cachedDetails[c.Id]
		if d == nil || d.State != c.State {
			st, err := rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: c.Id})
			if status.Code(err) == codes.NotFound {
				// Removed between the list and now: the next relist does not see it.
				log.Debug("container status", "container", c.Id, "err", err)
				continue
			}
			if err != nil {
				// The pod is not read this time: a view without this container would
				// show it gone (its restart count lost, the pod back to Pending).
				unread[p.UID] = fmt.Errorf("status of container %s of %s/%s: %w", c.Id, p.Namespace, p.Name, err)
				continue
			}
			d = fromStatus(st.Status, c)
		}
		details[c.Id] = d
		p.Containers = append(p.Containers, d)
	}
	for uid := range unread {
		delete(pods, uid)
	}
	for _, p := range pods {
		// A pod's sandboxes are numbered by attempt, each one more than the newest before.
		sort.SliceStable(p.Sandboxes, func(i, j int) bool {
			a, b := p.Sandboxes[i], p.Sandboxes[j]
			if a.Attempt != b.Attempt {
				return a.Attempt > b.Attempt
			}
			return a.CreatedAt.After(b.CreatedAt)
		})
		sort.SliceStable(p.Containers, func(i, j int) bool {
			a, b := p.Containers[i], p.Containers[j]
			if a.CreatedAt.Equal(b.CreatedAt) {
				return a.Attempt > b.Attempt
			}
			return a.CreatedAt.After(b.CreatedAt)
		})
		byAttempt(p.Containers)
	}
	return &read{pods: pods, details: details, ips: ips, unread: unread}, nil
}

// byAttempt orders the instances of each container among the places they hold in cs,
// the highest attempt first: each instance is one attempt more than the newest before, while
// the runtime's creation times are readings of the node's wall clock, which may step
// back (an instance created after a step back of two minutes would otherwise sort behind
// the one it replaced, and Latest would name the old one). Instances of different
// containers keep their order by creation time.
func byAttempt(cs []*Container) {
	slots := map[string][]int{}
	for i, c := range cs {
		slots[c.Name] = append(slots[c.Name], i)
	}
	for _, idx := range slots {
		if len(idx) < 2 {
			continue
		}
		inst := make([]*Container, len(idx))
		for k, i := range idx {
			inst[k] = cs[i]
		}
		sort.SliceStable(inst, func(i, j int) bool { return inst[i].Attempt > inst[j].Attempt })
		for k, i := range idx {
			cs[i] = inst[k]
		}
	}
}

// SandboxIPs are a sandbox's pod IPs from its CRI status, the primary first.
func SandboxIPs(st *runtimeapi.PodSandboxStatus) []string {
	n := st.GetNetwork()
	if n.GetIp() == "" {
		return nil
	}
	ips := []string{n.GetIp()}
	for _, ip := range n.GetAdditionalIps() {
		ips = append(ips, ip.GetIp())
	}
	return ips
}

func fromStatus(st *runtimeapi.ContainerStatus, c *runtimeapi.Container) *Container {
	d := &Container{
		ID: c.Id, Name: c.GetMetadata().GetName(), Attempt: c.GetMetadata().GetAttempt(),
		SandboxID: c.PodSandboxId, State: c.State,
		CreatedAt: time.Unix(0, c.CreatedAt),
		Image:     c.GetImage().GetImage(), ImageRef: c.ImageRef,
		Labels: c.Labels, Annotations: c.Annotations,
	}
	if name := c.Labels[kubetypes.KubernetesContainerNameLabel]; name != "" {
		d.Name = name
	}
	if st != nil {
		d.State = st.State
		if st.StartedAt > 0 {
			d.StartedAt = time.Unix(0, st.StartedAt)
		}
		if st.FinishedAt > 0 {
			d.FinishedAt = time.Unix(0, st.FinishedAt)
		}
		d.ExitCode, d.Reason, d.Message, d.LogPath = st.ExitCode, st.Reason, st.Message, st.LogPath
		if st.GetImage().GetImage() != "" {
			d.Image = st.GetImage().GetImage()
		}
		if st.ImageRef != "" {
			d.ImageRef = st.ImageRef
		}
		d.User = st.GetUser().GetLinux()
		if p := c.Annotations[criconfig.AnnotationContainerTerminationMessagePath]; p != "" {
			for _, m := range st.Mounts {
				if m.ContainerPath == p {
					d.TerminationMessageHostPath = m.HostPath
				}
			}
		}
	}
	return d
}

// fingerprint sums up what of a pod's runtime state matters to podsync.
func fingerprint(p *Pod) string {
	var b strings.Builder
	for _, s := range p.Sandboxes {
		fmt.Fprintf(&b, "s%s:%t:%v;", s.ID, s.Ready, s.IPs)
	}
	for _, c := range p.Containers {
		fmt.Fprintf(&b, "c%s:%d;", c.ID, c.State)
	}
	return b.String()
}

// Pod is the runtime's view of the pod with uid, nil when the runtime has nothing of it.
func (r *Relister) Pod(uid types.UID) *Pod {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.pods[uid]
}

// Pods is every pod the runtime has.
func (r *Relister) Pods() map[types.UID]*Pod {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return maps.Clone(r.pods)
}

// Synced reports whether at least one relist has succeeded.
func (r *Relister) Synced() bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return !r.last.IsZero()
}

// Health reports whether relisting is healthy: the last relist finished within
// HealthyThreshold (counted from the start while there has been none).
func (r *Relister) Health() (healthy bool, last time.Time, err error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	since := r.last
	if since.IsZero() {
		since = r.started
	}
	if d := r.clk.Since(since); d > HealthyThreshold {
		return false, r.last, fmt.Errorf("pod runtime relist is not healthy: last relist %s ago (threshold %s); last error: %v", d.Round(time.Second), HealthyThreshold, r.lastErr)
	}
	return true, r.last, r.lastErr
}
