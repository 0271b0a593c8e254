package faultstest

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/unitlet/unitlet/shared/bus"
)

// podRecord is what the pod watcher saw of one pod (by UID) over its life.
type podRecord struct {
	name      string
	kind      string
	phaseRank int // the furthest phase seen: 0 Pending, 1 Running, 2 Succeeded or Failed
	lastPhase corev1.PodPhase
	restarts  map[string]int    // the highest restartCount seen per container (init ones too)
	lastExit  map[string]string // a restarted container's last termination, as the API had it
	// ranBefore: the API showed a restarted container's last state with a start time (an
	// earlier instance ran).
	ranBefore map[string]bool
	succeeded bool
	failed    string // the reason and message when the pod was seen Failed
	// lostExits are, per container, the instances (by container ID) that ended with the
	// runtime's lost-exit status (runtimeLostExit); lostFailed: the pod Failed with one
	// such instance as its only failed container.
	lostExits  map[string]map[string]bool
	lostFailed bool
	// stoppedUnstarted: deleted, it Failed only because a container was stopped before
	// it had started.
	stoppedUnstarted bool
	deleted          time.Time
	graceful         bool // deleted with a grace period (not forced)
	wasRunning       bool // seen Running with every container running before its deletion
	finalOK          bool // its last status before it left the API had every container terminated
	gone             bool // it left the API
	// finalUnknown: it left the API while the watch was broken (an outage).
	finalUnknown bool
	backwards    []string
}

// podWatch follows the namespace's pods through an informer and records each pod's
// statuses in the order the API server had them.
type podWatch struct {
	mu   sync.Mutex
	pods map[string]*podRecord // by UID
	// live counts the pods that exist in the API and are not being deleted.
	live map[string]string // name -> UID
}

func watchPods(ctx context.Context, c kubernetes.Interface) *podWatch {
	w := &podWatch{pods: map[string]*podRecord{}, live: map[string]string{}}
	lw := cache.NewListWatchFromClient(c.CoreV1().RESTClient(), "pods", ns, fields.Everything())
	inf := cache.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, cache.Indexers{})
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { w.saw(obj.(*corev1.Pod), false) },
		UpdateFunc: func(_, obj any) { w.saw(obj.(*corev1.Pod), false) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				// Gone while the watch was broken: its last status is not known.
				if p, ok := d.Obj.(*corev1.Pod); ok {
					w.saw(p, true)
					w.unknownFinal(string(p.UID))
				}
				return
			}
			if p, ok := obj.(*corev1.Pod); ok {
				w.saw(p, true)
			}
		},
	})
	go inf.Run(ctx.Done())
	return w
}

func phaseRank(p corev1.PodPhase) int {
	switch p {
	case corev1.PodRunning:
		return 1
	case corev1.PodSucceeded, corev1.PodFailed:
		return 2
	}
	return 0
}

func (w *podWatch) saw(p *corev1.Pod, gone bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	uid := string(p.UID)
	r := w.pods[uid]
	if r == nil {
		r = &podRecord{name: p.Name, kind: p.Labels[kindLabel], restarts: map[string]int{}, lastExit: map[string]string{}, ranBefore: map[string]bool{}, lostExits: map[string]map[string]bool{}}
		w.pods[uid] = r
	}
	rank := phaseRank(p.Status.Phase)
	if rank < r.phaseRank {
		r.backwards = append(r.backwards, fmt.Sprintf("phase %s after %s at %s", p.Status.Phase, r.lastPhase, time.Now().Format("15:04:05.0")))
	}
	r.phaseRank = max(r.phaseRank, rank)
	r.lastPhase = p.Status.Phase
	allRunning, allTerminated := len(p.Status.ContainerStatuses) > 0, len(p.Status.ContainerStatuses) > 0
	for _, cs := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		if int(cs.RestartCount) < r.restarts[cs.Name] {
			r.backwards = append(r.backwards, fmt.Sprintf("%s restartCount %d after %d at %s", cs.Name, cs.RestartCount, r.restarts[cs.Name], time.Now().Format("15:04:05.0")))
		}
		r.restarts[cs.Name] = max(r.restarts[cs.Name], int(cs.RestartCount))
		if t := cs.LastTerminationState.Terminated; cs.RestartCount > 0 && t != nil {
			r.lastExit[cs.Name] = fmt.Sprintf("exit %d %s %q, ran %s to %s", t.ExitCode, t.Reason, t.Message, t.StartedAt.Format("15:04:05"), t.FinishedAt.Format("15:04:05"))
			if !t.StartedAt.IsZero() {
				r.ranBefore[cs.Name] = true
			}
		}
		for _, t := range []*corev1.ContainerStateTerminated{cs.State.Terminated, cs.LastTerminationState.Terminated} {
			if runtimeLostExit(t) {
				if r.lostExits[cs.Name] == nil {
					r.lostExits[cs.Name] = map[string]bool{}
				}
				r.lostExits[cs.Name][t.ContainerID] = true
			}
		}
	}
	for _, cs := range p.Status.ContainerStatuses {
		allRunning = allRunning && cs.State.Running != nil
		allTerminated = allTerminated && cs.State.Terminated != nil
	}
	if allRunning && p.DeletionTimestamp == nil {
		r.wasRunning = true
	}
	switch p.Status.Phase {
	case corev1.PodSucceeded:
		r.succeeded = true
	case corev1.PodFailed:
		r.failed = fmt.Sprintf("%q %q at %s", p.Status.Reason, p.Status.Message, time.Now().Format("15:04:05.0"))
		lost, unstarted, other := 0, 0, 0
		for _, cs := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
			switch t := cs.State.Terminated; {
			case runtimeLostExit(t):
				lost++
			case t != nil && t.ExitCode != 0 && t.StartedAt.IsZero():
				unstarted++
			case t != nil && t.ExitCode != 0:
				other++
			case cs.State.Waiting != nil && !neverCreated(cs.State.Waiting.Reason):
				other++
			}
			if t := cs.State.Terminated; t != nil {
				r.failed += fmt.Sprintf(", %s exited %d %s %q (started %s)", cs.Name, t.ExitCode, t.Reason, t.Message, t.StartedAt.Format("15:04:05"))
			} else if w := cs.State.Waiting; w != nil {
				r.failed += fmt.Sprintf(", %s waiting %s", cs.Name, w.Reason)
			}
		}
		r.lostFailed = p.Status.Reason == "" && lost > 0 && other == 0 && unstarted == 0
		// Deleted while a container was being started: it was stopped before it ran, and
		// the kubelet's phase for such a pod is Failed too.
		r.stoppedUnstarted = p.DeletionTimestamp != nil && p.Status.Reason == "" && unstarted > 0 && other == 0
	}
	if p.DeletionTimestamp != nil || gone {
		delete(w.live, p.Name)
	} else {
		w.live[p.Name] = uid
	}
	if gone {
		r.gone, r.finalOK = true, allTerminated
	}
}

// neverCreated reports whether a waiting reason is that of a container not created yet
// (behind an init container, or its volumes): no failure of its own.
func neverCreated(reason string) bool {
	return reason == "PodInitializing" || reason == "ContainerCreating"
}

// runtimeLostExit reports whether t is the status containerd gives an instance whose exit
// it lost (its task gone when it loaded the container back after a restart, or a
// container in unknown state that was stopped): exit code 255, reason "Unknown". unitlet
// never writes that reason itself; the kubelet reports the same for the same runtime.
func runtimeLostExit(t *corev1.ContainerStateTerminated) bool {
	return t != nil && t.ExitCode == 255 && t.Reason == "Unknown"
}

// unknownFinal marks a pod whose deletion the watch did not see: its final status is
// not known, and not counted.
func (w *podWatch) unknownFinal(uid string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if r := w.pods[uid]; r != nil {
		r.finalUnknown = true
	}
}

// markDeleted records that the churn deleted the pod, gracefully or not.
func (w *podWatch) markDeleted(name, uid string, graceful bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.live, name)
	if r := w.pods[uid]; r != nil {
		r.deleted, r.graceful = time.Now(), graceful
	}
}

// liveNames are the pods that exist and are not being deleted, oldest name first.
func (w *podWatch) liveNames() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for name := range w.live {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

func (w *podWatch) uidOf(name string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.live[name]
}

func (w *podWatch) record(uid string) (podRecord, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	r, ok := w.pods[uid]
	if !ok {
		return podRecord{}, false
	}
	return *r, true
}

// criWatch polls the runtime for the namespace's sandboxes and containers: each pod must
// get one sandbox, and each container one started instance per attempt.
type criWatch struct {
	mu        sync.Mutex
	sandboxes map[string]map[string]*sandboxSeen // pod UID -> sandbox ID ->
	// containers: pod UID/container/attempt -> container ID -> started (seen running, or
	// exited with a start time)
	containers map[string]map[string]bool
	polls      int
	errors     int
}

// sandboxSeen is what the polls saw of one sandbox.
type sandboxSeen struct {
	created   time.Time
	lastReady time.Time // the last poll that saw it READY
}

func watchCRI(ctx context.Context) *criWatch {
	w := &criWatch{sandboxes: map[string]map[string]*sandboxSeen{}, containers: map[string]map[string]bool{}}
	go func() {
		for ctx.Err() == nil {
			w.poll(ctx)
			select {
			case <-ctx.Done():
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	return w
}

func (w *criWatch) poll(ctx context.Context) {
	rt, err := stack.CRI()
	if err != nil {
		w.mu.Lock()
		w.errors++
		w.mu.Unlock()
		return
	}
	defer rt.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	sel := map[string]string{"io.kubernetes.pod.namespace": ns}
	sbs, err1 := rt.Runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{LabelSelector: sel}})
	cs, err2 := rt.Runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{LabelSelector: sel}})
	if err1 != nil || err2 != nil {
		w.mu.Lock()
		w.errors++ // containerd down: nothing to see
		w.mu.Unlock()
		return
	}
	now := time.Now()
	// An exited container the polls never saw running: ask whether it ever started.
	started := map[string]bool{}
	for _, c := range cs.GetContainers() {
		if c.GetState() == runtimeapi.ContainerState_CONTAINER_EXITED && !w.seenStarted(c) {
			st, err := rt.Runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: c.GetId()})
			started[c.GetId()] = err == nil && st.GetStatus().GetStartedAt() > 0
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.polls++
	for _, sb := range sbs.GetItems() {
		uid := sb.GetMetadata().GetUid()
		if w.sandboxes[uid] == nil {
			w.sandboxes[uid] = map[string]*sandboxSeen{}
		}
		seen := w.sandboxes[uid][sb.GetId()]
		if seen == nil {
			seen = &sandboxSeen{created: time.Unix(0, sb.GetCreatedAt())}
			w.sandboxes[uid][sb.GetId()] = seen
		}
		if sb.GetState() == runtimeapi.PodSandboxState_SANDBOX_READY {
			seen.lastReady = now
		}
	}
	for _, c := range cs.GetContainers() {
		uid, name := c.GetLabels()["io.kubernetes.pod.uid"], c.GetMetadata().GetName()
		key := fmt.Sprintf("%s/%s/%d", uid, name, c.GetMetadata().GetAttempt())
		if w.containers[key] == nil {
			w.containers[key] = map[string]bool{}
		}
		run := w.containers[key][c.GetId()] || c.GetState() == runtimeapi.ContainerState_CONTAINER_RUNNING || started[c.GetId()]
		w.containers[key][c.GetId()] = run
	}
}

// startedInstances counts the instances of a pod's container that ran, over all attempts.
func (w *criWatch) startedInstances(uid, name string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	prefix := uid + "/" + name + "/"
	for key, ids := range w.containers {
		if !strings.HasPrefix(key, prefix) {
			continue
		}
		for _, started := range ids {
			if started {
				n++
			}
		}
	}
	return n
}

func (w *criWatch) seenStarted(c *runtimeapi.Container) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	key := fmt.Sprintf("%s/%s/%d", c.GetLabels()["io.kubernetes.pod.uid"], c.GetMetadata().GetName(), c.GetMetadata().GetAttempt())
	return w.containers[key][c.GetId()]
}

// replacedReady lists the pods that got a new sandbox while an earlier one was still
// READY (a duplicate, or a working sandbox replaced), and, apart, those that got one
// after an earlier sandbox that never became READY (a creation the runtime lost).
func (w *criWatch) replacedReady() (replaced, afterLost []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for uid, sbs := range w.sandboxes {
		if len(sbs) < 2 {
			continue
		}
		dup, lost := false, false
		for id2, s2 := range sbs {
			for id1, s1 := range sbs {
				if id1 == id2 || !s1.created.Before(s2.created) {
					continue
				}
				if !s1.lastReady.IsZero() && !s1.lastReady.Before(s2.created) {
					dup = true
				} else if s1.lastReady.IsZero() {
					lost = true
				}
			}
		}
		switch {
		case dup:
			replaced = append(replaced, fmt.Sprintf("pod %s: %d sandboxes, a new one while an earlier was READY", uid, len(sbs)))
		case lost:
			afterLost = append(afterLost, fmt.Sprintf("pod %s: %d sandboxes", uid, len(sbs)))
		}
	}
	return replaced, afterLost
}

// spell is a time during which something was not as it should be.
type spell struct {
	from, to time.Time
	why      string
}

func (s spell) length() time.Duration { return s.to.Sub(s.from) }

// nodeWatch polls the Node's Ready condition once a second and records the spells in
// which the API server answered with Ready other than True.
type nodeWatch struct {
	mu       sync.Mutex
	spells   []spell
	notReady *spell
}

func watchNode(ctx context.Context, c kubernetes.Interface) *nodeWatch {
	w := &nodeWatch{}
	go func() {
		for ctx.Err() == nil {
			gctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			n, err := c.CoreV1().Nodes().Get(gctx, node, metav1.GetOptions{})
			cancel()
			if err == nil {
				w.saw(n)
			}
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
		w.mu.Lock()
		if w.notReady != nil {
			w.notReady.to = time.Now()
			w.spells = append(w.spells, *w.notReady)
		}
		w.mu.Unlock()
	}()
	return w
}

func (w *nodeWatch) saw(n *corev1.Node) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	if nodeReady(n) {
		if w.notReady != nil {
			w.notReady.to = now
			w.spells = append(w.spells, *w.notReady)
			w.notReady = nil
		}
		return
	}
	if w.notReady == nil {
		why := "no Ready condition"
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				why = fmt.Sprintf("%s %s: %s", c.Status, c.Reason, c.Message)
			}
		}
		w.notReady = &spell{from: now, why: now.Format("15:04:05.0") + ": " + why}
	}
}

func (w *nodeWatch) all() []spell {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]spell{}, w.spells...)
}

// busProbe calls one service's health check over its bus socket ten times a second on a
// new connection each time. A call that fails (refused, reset, no socket) starts a spell
// of unreachability, when it fails, that the next answered call ends; a call that waits in
// the socket's queue while the service restarts and is then answered is waiting, not
// failing, and so is the wait of a call that then fails.
type busProbe struct {
	svc         string
	mu          sync.Mutex
	unreachable []spell
	failing     *spell
	longestWait time.Duration
	calls       int
}

func probeBus(ctx context.Context, svc string) *busProbe {
	p := &busProbe{svc: svc}
	go func() {
		for ctx.Err() == nil {
			start := time.Now()
			err := healthCall(ctx, svc)
			took := time.Since(start)
			if ctx.Err() != nil {
				break
			}
			p.mu.Lock()
			p.calls++
			switch {
			case err != nil && p.failing == nil:
				// From the failure, not the call's start: the call may have waited in the
				// socket's queue, or been served, before the service went away under it.
				end := start.Add(took)
				p.failing = &spell{from: end, why: fmt.Sprintf("%s: %v (the call began %s before)", end.Format("15:04:05.0"), err, took.Round(10*time.Millisecond))}
			case err == nil && p.failing != nil:
				p.failing.to = start
				p.unreachable = append(p.unreachable, *p.failing)
				p.failing = nil
			}
			if err == nil {
				p.longestWait = max(p.longestWait, took)
			}
			p.mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return p
}

// healthCall is one health check; an answer of any status is an answer.
func healthCall(ctx context.Context, svc string) error {
	conn, err := bus.Dial(stack.NodeSocketDir(node), svc)
	if err != nil {
		return err
	}
	defer conn.Close()
	// A minute: a call that waits in the socket's queue while the service restarts is
	// waiting, not failing, however long the restart takes (the slowest restart is its
	// own column).
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if status.Code(err) == codes.Unimplemented {
		return nil
	}
	return err
}

func (p *busProbe) longest() (spell, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var worst spell
	for _, s := range p.unreachable {
		if s.length() > worst.length() {
			worst = s
		}
	}
	if p.failing != nil {
		s := *p.failing
		s.to = time.Now()
		if s.length() > worst.length() {
			worst = s
		}
	}
	return worst, len(p.unreachable)
}

func joinMax(items []string, n int) string {
	if len(items) > n {
		return strings.Join(items[:n], "; ") + fmt.Sprintf("; and %d more", len(items)-n)
	}
	return strings.Join(items, "; ")
}
