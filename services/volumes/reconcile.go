package volumes

import (
	"context"
	"log/slog"
	"maps"
	"time"

	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	podsyncv1 "github.com/unitlet/unitlet/proto/unitlet/podsync/v1"
	"github.com/unitlet/unitlet/shared/bus"
	"github.com/unitlet/unitlet/shared/liveness"
	"github.com/unitlet/unitlet/shared/payload"
)

// PodLister is podsync's ListPodsStream, and ListPods for a podsync that predates it.
type PodLister = bus.PodLister

// listPods is every pod podsync has, whole or an error (bus.ListPods): a list cut short
// would make the pods it lacks look like orphans.
func listPods(ctx context.Context, l PodLister) ([]*podsyncv1.Pod, error) {
	return bus.ListPods(ctx, l)
}

// SandboxLister is the runtime's ListPodSandbox.
type SandboxLister interface {
	ListPodSandbox(ctx context.Context, req *runtimeapi.ListPodSandboxRequest, opts ...grpc.CallOption) (*runtimeapi.ListPodSandboxResponse, error)
}

// reconciler keeps the volumes of podsync's pods current and releases orphans.
type reconciler struct {
	m         *Manager
	pods      PodLister
	sandboxes SandboxLister
	log       *slog.Logger
	// loops, when set, is told of each round (loopReconcile).
	loops *liveness.Loops
	// suspects are the pods with volumes on disk that neither podsync nor the runtime had
	// at the last round: released if they are still unknown at this one.
	suspects map[types.UID]bool
	// orphanAge, when set, stands in for that earlier round across a restart: a pod
	// unknown now whose volumes were set up at least orphanAge ago is released at once.
	orphanAge time.Duration
}

// loopReconcile names the reconcile loop in the health check.
const loopReconcile = "the reconcile loop"

// reconcilePeriod is the configuration's syncFrequency, a minute when unset.
func reconcilePeriod(kc *kubeletv1beta1.KubeletConfiguration) time.Duration {
	if kc.SyncFrequency.Duration <= 0 {
		return time.Minute
	}
	return kc.SyncFrequency.Duration
}

// Run reconciles at start and every period.
func (r *reconciler) Run(ctx context.Context, period time.Duration) error {
	r.orphanAge = orphanAge(period)
	if r.loops != nil {
		// A round waits at most 30 s on podsync and the runtime, plus the set-ups it redoes.
		r.loops.Watch(loopReconcile, max(10*period, 10*time.Minute))
	}
	for {
		if r.loops != nil {
			r.loops.Beat(loopReconcile)
		}
		r.once(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(period):
		}
	}
}

// once rewrites the API-backed volumes of every running pod podsync has (configMap, secret
// and label changes, refreshed tokens), prepares again pods whose volumes exist on disk
// but not in memory (after a restart), and releases volumes of pods that neither podsync
// nor the runtime has. Nothing is released while podsync or the runtime cannot answer.
func (r *reconciler) once(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	since := r.m.clk.Now()
	pods, err := listPods(cctx, r.pods)
	if err != nil {
		st := grpcstatus.Convert(err)
		if c := st.Code(); c == codes.Unavailable || c == codes.DeadlineExceeded {
			r.log.Debug("podsync does not answer; nothing reconciled", "err", st.Message())
		} else {
			r.log.Warn("list podsync's pods; nothing reconciled", "code", c, "err", st.Message())
		}
		return
	}
	known := map[types.UID]bool{}
	onDisk := map[types.UID]bool{}
	uids, err := r.m.OnDisk()
	if err != nil {
		r.log.Warn("list volumes on disk", "err", err)
		return
	}
	for _, uid := range uids {
		onDisk[uid] = true
	}
	for _, bp := range pods {
		uid := types.UID(bp.GetUid())
		known[uid] = true
		if bp.GetTerminated() || bp.GetRemoved() || len(bp.GetPod()) == 0 {
			continue
		}
		if !onDisk[uid] && !r.m.Prepared(uid) {
			continue // podsync has not asked for them yet
		}
		pod := &corev1.Pod{}
		if err := payload.PodsyncPod.DecodeJSON(bp.GetPodSchema(), bp.GetPod(), pod); err != nil {
			r.log.Warn("a pod from unitlet-podsync does not decode; its volumes are not updated", "pod", bp.GetNamespace()+"/"+bp.GetName(), "err", err)
			continue
		}
		pod.UID = uid
		if err := r.m.Resync(cctx, pod); err != nil {
			r.log.Warn("update volumes", "pod", pod.Namespace+"/"+pod.Name, "err", err)
		}
	}
	sbs, err := r.sandboxes.ListPodSandbox(cctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		r.log.Debug("the runtime does not answer; no orphans released", "err", err)
		return
	}
	for _, sb := range sbs.GetItems() {
		known[types.UID(sb.GetMetadata().GetUid())] = true
	}
	for _, uid := range r.m.CleanupOrphans(cctx, r.confirmOrphans(known), since) {
		r.log.Info("released the volumes of a pod that is gone", "pod", uid)
	}
	if err := r.m.UnstageOrphans(cctx); err != nil {
		r.log.Warn("unstage CSI volumes no pod uses", "err", err)
	}
	r.m.ExpandClaims(ctx)
}

// orphanAge is how old the volumes of a pod nobody has must be for a round to release them
// without an earlier round's word (confirmOrphans): two reconcile periods, and at least
// two minutes, so that a step of the wall clock (the directory's time is the wall clock's)
// does not make a pod in its first sync look old.
func orphanAge(period time.Duration) time.Duration {
	return max(2*period, 2*time.Minute)
}

// confirmOrphans is known plus every pod on disk that was not already unknown at the last
// round: a pod is released only when two rounds in a row found no one who has it. A pod
// in its first sync has its volumes prepared but is in podsync's list only once that sync
// reports, and in the runtime's only once its sandbox is made; a unitlet-volumes restarted
// in between has no memory of having prepared it, and must not take its volumes away.
// That memory does not survive a restart, and a unitlet-volumes restarted more often than
// every period would then never release anything (the fault suite's kills left pods'
// volumes on disk for the whole run): a pod whose volumes directory is older than
// orphanAge counts as one the last round found unknown.
func (r *reconciler) confirmOrphans(known map[types.UID]bool) map[types.UID]bool {
	keep := maps.Clone(known)
	next := map[types.UID]bool{}
	uids, err := r.m.OnDisk()
	if err != nil {
		r.log.Warn("list volumes on disk", "err", err)
		return keep
	}
	for _, uid := range uids {
		if known[uid] {
			continue
		}
		next[uid] = true
		if !r.suspects[uid] && !r.old(uid) {
			keep[uid] = true
		}
	}
	r.suspects = next
	return keep
}

// old reports whether the volumes of pod uid were set up at least orphanAge ago, by the
// time of its volumes directory (written when a volume of it was first set up).
func (r *reconciler) old(uid types.UID) bool {
	if r.orphanAge <= 0 {
		return false
	}
	at, ok := r.m.SetUpAt(uid)
	return ok && r.m.clk.Since(at) >= r.orphanAge
}
