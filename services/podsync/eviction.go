package podsync

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc"
	grpcstatus "google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	evictionv1 "github.com/unitlet/unitlet/proto/unitlet/eviction/v1"
	"github.com/unitlet/unitlet/services/podsync/admission"
	"github.com/unitlet/unitlet/services/podsync/podsource"
	"github.com/unitlet/unitlet/shared/payload"
)

// EvictionAdmitter gives unitlet-eviction's admission verdict on a new pod
// (evictionv1.EvictionServiceClient).
type EvictionAdmitter interface {
	AdmitPod(ctx context.Context, in *evictionv1.AdmitPodRequest, opts ...grpc.CallOption) (*evictionv1.AdmitPodResponse, error)
}

// evictionTimeout bounds one AdmitPod call.
const evictionTimeout = time.Second

// evictionRetry is how long after a failed AdmitPod call admission does not call again.
const evictionRetry = 10 * time.Second

// reasonEvicted is the kubelet's reason for a pod its eviction manager refuses or evicts.
const reasonEvicted = "Evicted"

// evictionHold is how long a new pod that is not critical waits, neither admitted nor
// refused, for unitlet-eviction's verdict while unitlet-eviction does not answer; then it
// is refused (reasonNoVerdict). systemd starts a failed unitlet-eviction again within a
// second (Restart=always, RestartSec=1) and its socket queues the calls meanwhile, so a
// restart or an upgrade usually costs a pod seconds, and at worst, on a loaded node, a
// minute (integration/faultstest's restartLimit allows two). Five minutes without an
// answer (the kubelet's default evictionPressureTransitionPeriod) is an unitlet-eviction
// that is broken; a pod refused is made again by its controller, which a scheduler may
// place on another node, where a pod held would stay Pending here.
const evictionHold = 5 * time.Minute

// reasonNoVerdict is the kubelet's reason for a pod an admit handler could not judge.
const reasonNoVerdict = "UnexpectedAdmissionError"

// Event reasons of the eviction check.
const (
	// eventAdmittedWithoutCheck: admitted without asking, when no unitlet-eviction runs on
	// the node (no socket), or a critical pod while it does not answer.
	eventAdmittedWithoutCheck = "AdmittedWithoutEvictionCheck"
	// eventWaitingForCheck: a pod is held until unitlet-eviction answers.
	eventWaitingForCheck = "WaitingForEvictionCheck"
)

// evictionCheck asks unitlet-eviction whether node pressure lets a new pod in, as the
// kubelet's eviction admit handler decides, and does not admit a pod without its verdict
// while unitlet-eviction is part of the node and does not answer:
//
//   - It answers: its verdict, Admit or refused (reasonEvicted).
//   - No socket at its path: no unitlet-eviction runs on this node (its socket unit owns the
//     path, which stays while the service restarts, and a node set up without it has none).
//     The pod is admitted, with an AdmittedWithoutEvictionCheck event saying so, as the
//     kubelet admits every pod without eviction thresholds.
//   - A socket, but no answer (unitlet-eviction restarting, crashing in a loop, hung, an
//     older one without AdmitPod): a critical pod (static, mirror, system-critical
//     priority) is admitted with an AdmittedWithoutEvictionCheck event, as the kubelet's
//     eviction manager admits a critical pod under any pressure, so the verdict on it is
//     known without asking. Any other pod is held: not admitted and not refused, a Warning
//     WaitingForEvictionCheck event when the hold starts, and podsync asks again every
//     evictionRetry and whenever the pods change. A held pod gets the verdict as soon as
//     unitlet-eviction answers; without one for evictionHold it is refused with the
//     kubelet's UnexpectedAdmissionError and a message saying why.
//
// It runs within admission, with the service's lock held: the kubelet admits new pods one
// at a time, in order, each against those admitted before it, and podsync does the same
// under its lock, so asking outside of it would mean admitting in two passes and checking
// again what changed in between. The wait under the lock is bounded instead: a call gets
// evictionTimeout (unitlet-eviction answers from its last observation, at once),
// and after a call that failed no call is made for evictionRetry: the pods met meanwhile
// are held (or admitted, if critical) at once. While it does not answer, podsync thus
// waits at most 1 s in 10, and a burst of new pods waits 1 s in all.
//
// Its fields are guarded by the service's lock.
type evictionCheck struct {
	socket string
	client EvictionAdmitter
	clk    clock.Clock
	// failedAt is when the last call failed (zero once one succeeds); failure is how.
	failedAt time.Time
	failure  string
	// held is when each held pod was first held.
	held map[types.UID]time.Time
}

// evictionVerdict is what admission does with a new pod after the eviction check.
type evictionVerdict struct {
	// result is the pod's admission: Admit, or refused with a reason and message.
	result admission.Result
	// hold: neither, the pod waits for unitlet-eviction (result is not used).
	hold bool
	// eventType, eventReason and event are an event to record on the pod; event "": none.
	eventType, eventReason, event string
}

// verdict is unitlet-eviction's verdict on pod, or what admission does without it.
func (e *evictionCheck) verdict(pod *corev1.Pod) evictionVerdict {
	admit := evictionVerdict{result: admission.Result{Admit: true}}
	if _, err := os.Stat(e.socket); err != nil {
		e.forget(pod.UID)
		admit.eventType, admit.eventReason = corev1.EventTypeNormal, eventAdmittedWithoutCheck
		admit.event = fmt.Sprintf("Admitted without a node-pressure check: unitlet-eviction is not running (no socket at %s)", e.socket)
		return admit
	}
	now := e.clk.Now()
	var away string
	if !e.failedAt.IsZero() && now.Before(e.failedAt.Add(evictionRetry)) {
		away = fmt.Sprintf("unitlet-eviction did not answer at %s (%s); podsync asks again from %s",
			e.failedAt.Format(time.RFC3339), e.failure, e.failedAt.Add(evictionRetry).Format(time.RFC3339))
	} else {
		b, err := json.Marshal(&corev1.Pod{TypeMeta: podTypeMeta, ObjectMeta: busMeta(pod.ObjectMeta), Spec: pod.Spec})
		if err != nil {
			// Not unitlet-eviction's doing, and no later call does better: refused.
			e.forget(pod.UID)
			return evictionVerdict{result: admission.Result{Reason: reasonNoVerdict, Message: fmt.Sprintf("encode the pod for unitlet-eviction: %v", err)}}
		}
		ctx, cancel := context.WithTimeout(context.Background(), evictionTimeout)
		defer cancel()
		resp, err := e.client.AdmitPod(ctx, &evictionv1.AdmitPodRequest{Pod: b, PodSchema: payload.EvictionPod.Write})
		if err == nil {
			e.failedAt, e.failure = time.Time{}, ""
			e.forget(pod.UID)
			if resp.GetAdmit() {
				return admit
			}
			reason := resp.GetReason()
			if reason == "" {
				reason = reasonEvicted
			}
			return evictionVerdict{result: admission.Result{Reason: reason, Message: resp.GetMessage()}}
		}
		st := grpcstatus.Convert(err)
		e.failedAt, e.failure = now, fmt.Sprintf("%s: %s", st.Code(), st.Message())
		away = fmt.Sprintf("unitlet-eviction did not answer at %s (%s)", now.Format(time.RFC3339), e.failure)
	}

	if criticalPod(pod) {
		e.forget(pod.UID)
		admit.eventType, admit.eventReason = corev1.EventTypeNormal, eventAdmittedWithoutCheck
		admit.event = "Admitted without a node-pressure check: " + away + "; a critical pod is admitted under any node pressure"
		return admit
	}
	since, held := e.held[pod.UID]
	if !held {
		if e.held == nil {
			e.held = map[types.UID]time.Time{}
		}
		e.held[pod.UID] = now
		return evictionVerdict{hold: true, eventType: corev1.EventTypeWarning, eventReason: eventWaitingForCheck,
			event: fmt.Sprintf("Not admitted yet: waiting for unitlet-eviction's node-pressure verdict: %s; the pod is refused at %s without one",
				away, now.Add(evictionHold).Format(time.RFC3339))}
	}
	if now.Before(since.Add(evictionHold)) {
		return evictionVerdict{hold: true}
	}
	e.forget(pod.UID)
	return evictionVerdict{result: admission.Result{Reason: reasonNoVerdict,
		Message: fmt.Sprintf("unitlet-eviction gave no node-pressure verdict in %s: %s", evictionHold, away)}}
}

// isHeld reports whether the pod waits for unitlet-eviction's verdict.
func (e *evictionCheck) isHeld(uid types.UID) bool {
	_, ok := e.held[uid]
	return ok
}

// heldPods are the pods that wait for unitlet-eviction's verdict.
func (e *evictionCheck) heldPods() []types.UID {
	out := make([]types.UID, 0, len(e.held))
	for uid := range e.held {
		out = append(out, uid)
	}
	return out
}

// forget ends the pod's hold, if any.
func (e *evictionCheck) forget(uid types.UID) {
	delete(e.held, uid)
}

// criticalPod is the kubelet's IsCriticalPod: a static pod (its source annotation set, and
// not to the API server), a mirror pod, or one of system-critical priority.
func criticalPod(p *corev1.Pod) bool {
	if src, ok := p.Annotations[podsource.AnnotationConfigSource]; ok && src != podsource.SourceAPI {
		return true
	}
	if _, ok := p.Annotations[podsource.AnnotationConfigMirror]; ok {
		return true
	}
	return p.Spec.Priority != nil && *p.Spec.Priority >= systemCriticalPriority
}

// systemCriticalPriority is the lowest priority of a critical pod (the kubelet's
// scheduling.SystemCriticalPriority).
const systemCriticalPriority = 2 * 1000000000
