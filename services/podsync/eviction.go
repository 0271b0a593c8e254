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
	"k8s.io/utils/clock"

	evictionv1 "github.com/unitlet/unitlet/proto/unitlet/eviction/v1"
	"github.com/unitlet/unitlet/services/podsync/admission"
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

// evictionCheck asks unitlet-eviction whether node pressure lets a new pod in, as the
// kubelet's eviction admit handler decides, and fails open: when it cannot ask, or gets
// no answer, the pod is admitted and the caller records why.
//
// It runs within admission, with the service's lock held: the kubelet admits new pods one
// at a time, in order, each against those admitted before it, and podsync does the same
// under its lock, so asking outside of it would mean admitting in two passes and checking
// again what changed in between. The wait under the lock is bounded instead: a call gets
// evictionTimeout (unitlet-eviction answers from its last observation, at once),
// and after a call that failed (unitlet-eviction down, hung or starting) no call is made
// for evictionRetry: pods are admitted at once without a verdict, each with an event
// saying when unitlet-eviction last did not answer. While it does not answer, podsync
// thus waits at most 1 s in 10, and a burst of new pods waits 1 s in all. Without its
// socket no call is made at all.
//
// Its fields are guarded by the service's lock.
type evictionCheck struct {
	socket string
	client EvictionAdmitter
	clk    clock.Clock
	// failedAt is when the last call failed (zero once one succeeds); failure is how.
	failedAt time.Time
	failure  string
}

// verdict is unitlet-eviction's verdict on pod: Admit, or the reason and message it was
// refused with. When the pod is admitted without a verdict, unchecked says why.
func (e *evictionCheck) verdict(pod *corev1.Pod) (r admission.Result, unchecked string) {
	admit := admission.Result{Admit: true}
	if _, err := os.Stat(e.socket); err != nil {
		return admit, fmt.Sprintf("unitlet-eviction is not running (no socket at %s)", e.socket)
	}
	now := e.clk.Now()
	if !e.failedAt.IsZero() && now.Before(e.failedAt.Add(evictionRetry)) {
		return admit, fmt.Sprintf("unitlet-eviction did not answer at %s (%s); podsync asks again from %s",
			e.failedAt.Format(time.RFC3339), e.failure, e.failedAt.Add(evictionRetry).Format(time.RFC3339))
	}
	b, err := json.Marshal(&corev1.Pod{TypeMeta: podTypeMeta, ObjectMeta: busMeta(pod.ObjectMeta), Spec: pod.Spec})
	if err != nil {
		return admit, fmt.Sprintf("encode the pod for unitlet-eviction: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), evictionTimeout)
	defer cancel()
	resp, err := e.client.AdmitPod(ctx, &evictionv1.AdmitPodRequest{Pod: b, PodSchema: payload.EvictionPod.Write})
	if err != nil {
		st := grpcstatus.Convert(err)
		e.failedAt, e.failure = now, fmt.Sprintf("%s: %s", st.Code(), st.Message())
		return admit, fmt.Sprintf("unitlet-eviction did not answer at %s (%s)", now.Format(time.RFC3339), e.failure)
	}
	e.failedAt, e.failure = time.Time{}, ""
	if resp.GetAdmit() {
		return admit, ""
	}
	reason := resp.GetReason()
	if reason == "" {
		reason = reasonEvicted
	}
	return admission.Result{Reason: reason, Message: resp.GetMessage()}, ""
}
