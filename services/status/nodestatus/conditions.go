package nodestatus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"

	podsyncv1 "github.com/unitlet/unitlet/proto/unitlet/podsync/v1"
	"github.com/unitlet/unitlet/shared/nodeinfo"
)

// The Ready condition's reasons and the kubelet's message when all is well.
const (
	reasonReady    = "KubeletReady"
	reasonNotReady = "KubeletNotReady"
	messageReady   = "kubelet is posting ready status"
	// messageShuttingDown is the kubelet's shutdown manager's part of the NotReady message.
	messageShuttingDown = "node is shutting down"
)

// relistThreshold is the kubelet's PLEG relist threshold, named in the message when podsync
// says the relist is unhealthy without saying why.
const relistThreshold = 3 * time.Minute

// Unreachable services: a service that stops answering is reported in Ready only once it
// has failed on two checks in a row, or has been failing for unreachableGrace, whichever
// comes first. systemd restarts a crashed podsync within a second or two; one missed check
// during that restart must not turn the node NotReady and back (which would also make the
// node lifecycle controller and anything watching Ready react). Until then the Ready
// condition the node already has is kept as it is.
//
// A check that only waited (ErrNoAnswerYet: the service's socket took the call, and it was
// still queued when the check's timeout ran out) is a restart under way, not an outage:
// systemd holds the socket while the service starts again, and the call would be answered
// by the new process. Such checks do not count towards unreachableChecks, and a spell of
// them is reported after waitingGrace, the units' WatchdogSec: a service that takes calls
// and answers none for that long is stuck, and its watchdog restarts it. On the one-CPU
// emulated vm node, a package upgrade's restart takes 8 to 15 s.
const (
	unreachableChecks = 2
	unreachableGrace  = 10 * time.Second
	waitingGrace      = 30 * time.Second
)

// ErrNoAnswerYet marks a failed check whose call was taken by the service's socket but not
// answered before the check's timeout (errors.Is).
var ErrNoAnswerYet = errors.New("no answer yet")

// NoAnswerYet wraps err, a check's call that timed out after its socket took it, as
// ErrNoAnswerYet; its message stays err's.
func NoAnswerYet(err error) error { return noAnswerYet{err} }

type noAnswerYet struct{ err error }

func (e noAnswerYet) Error() string        { return e.err.Error() }
func (e noAnswerYet) Unwrap() error        { return e.err }
func (e noAnswerYet) Is(target error) bool { return target == ErrNoAnswerYet }

// outage counts the consecutive failed checks of one service.
type outage struct {
	// failures are the spell's checks that failed other than by waiting.
	failures int
	// since is when the spell's first failed check was made.
	since time.Time
}

// observe records one check; it reports whether the failure now counts.
func (o *outage) observe(err error, now time.Time) bool {
	if err == nil {
		*o = outage{}
		return false
	}
	if o.since.IsZero() {
		o.since = now
	}
	if errors.Is(err, ErrNoAnswerYet) {
		return now.Sub(o.since) >= waitingGrace
	}
	o.failures++
	return o.failures >= unreachableChecks || now.Sub(o.since) >= unreachableGrace
}

// readiness is what the Ready condition is computed from.
type readiness struct {
	// errs make the node NotReady, in the kubelet's order: runtime, relist, network, then
	// unitlet services.
	errs []error
	// pending are failures inside their grace: they hold the existing Ready condition, or
	// count when there is none.
	pending []error
}

// checkReadiness asks podsync and the other services and sorts their answers.
func (c *Controller) checkReadiness(ctx context.Context) readiness {
	now := c.clock.Now()
	var r readiness

	health, err := c.runtime.RuntimeHealth(ctx)
	if err == nil && health == nil {
		err = fmt.Errorf("empty runtime health")
	}
	if err != nil {
		err = fmt.Errorf("unitlet-podsync unreachable: %w", err)
		if c.loop.podsync.observe(err, now) {
			r.errs = append(r.errs, err)
		} else {
			r.pending = append(r.pending, err)
		}
	} else {
		c.loop.podsync.observe(nil, now)
		c.loop.lastHealth = health
		r.errs = append(r.errs, runtimeErrors(health, now)...)
	}

	if c.services != nil {
		err := c.services(ctx)
		if c.loop.services.observe(err, now) {
			r.errs = append(r.errs, err)
		} else if err != nil {
			r.pending = append(r.pending, err)
		}
	}
	return r
}

// runtimeErrors turns podsync's health into the kubelet's Ready messages. podsync's own
// message already carries the kubelet's wording for a runtime or network failure; it is
// used when it matches the flag that is false.
func runtimeErrors(h *podsyncv1.RuntimeHealth, now time.Time) []error {
	msg := h.GetMessage()
	var errs []error
	runtimeDown := strings.HasPrefix(msg, "container runtime is down")
	if !h.GetRuntimeReady() {
		if runtimeDown || strings.HasPrefix(msg, "container runtime not ready") {
			errs = append(errs, fmt.Errorf("%s", msg))
		} else {
			errs = append(errs, fmt.Errorf("container runtime is down"))
		}
	}
	if !h.GetRelistHealthy() {
		switch {
		case msg != "" && !strings.HasPrefix(msg, "container runtime"):
			errs = append(errs, fmt.Errorf("PLEG is not healthy: %s", msg))
		case h.GetLastRelistTime() != nil:
			ago := now.Sub(h.GetLastRelistTime().AsTime()).Round(time.Millisecond)
			errs = append(errs, fmt.Errorf("PLEG is not healthy: pleg was last seen active %v ago; threshold is %v", ago, relistThreshold))
		default:
			errs = append(errs, fmt.Errorf("PLEG is not healthy: pleg has yet to be successful"))
		}
	}
	// When the runtime did not answer, its network state is unknown, not "not ready".
	if !h.GetNetworkReady() && !runtimeDown {
		if strings.HasPrefix(msg, "container runtime network not ready") {
			errs = append(errs, fmt.Errorf("%s", msg))
		} else {
			errs = append(errs, fmt.Errorf("container runtime network not ready"))
		}
	}
	// A graceful node shutdown under way (podsync's, on logind's PrepareForShutdown), last,
	// as the kubelet lists its shutdown manager's error after the runtime's and network's.
	if h.GetNodeShuttingDown() {
		errs = append(errs, errors.New(messageShuttingDown))
	}
	return errs
}

// readyCondition is the Ready condition for r; hold reports that the existing condition
// should be kept (a service failing within its grace and nothing else wrong).
func readyCondition(r readiness, hasExisting bool) (cond corev1.NodeCondition, hold bool) {
	errs := r.errs
	if len(errs) == 0 && len(r.pending) > 0 {
		if hasExisting {
			return corev1.NodeCondition{}, true
		}
		errs = r.pending
	}
	if len(errs) > 0 {
		return corev1.NodeCondition{
			Type:    corev1.NodeReady,
			Status:  corev1.ConditionFalse,
			Reason:  reasonNotReady,
			Message: utilerrors.NewAggregate(errs).Error(),
		}, false
	}
	return corev1.NodeCondition{
		Type:    corev1.NodeReady,
		Status:  corev1.ConditionTrue,
		Reason:  reasonReady,
		Message: messageReady,
	}, false
}

// pressureKind is one of the three pressure conditions with the kubelet's reasons,
// messages (shared with unitlet-eviction) and events.
type pressureKind struct {
	nodeinfo.Pressure
	okEvent, underEv string
}

var pressureKinds = []pressureKind{
	{Pressure: nodeinfo.Pressures[0], okEvent: "NodeHasSufficientMemory", underEv: "NodeHasInsufficientMemory"},
	{Pressure: nodeinfo.Pressures[1], okEvent: "NodeHasNoDiskPressure", underEv: "NodeHasDiskPressure"},
	{Pressure: nodeinfo.Pressures[2], okEvent: "NodeHasSufficientPID", underEv: "NodeHasInsufficientPID"},
}

// messageUnmonitored is the pressure conditions' message while no eviction service answers.
//
// The choice: the kubelet never reports a pressure condition Unknown itself (only the node
// lifecycle controller does, for a node that stopped posting), and the scheduler and the
// node lifecycle controller treat MemoryPressure/DiskPressure/PIDPressure True as a reason
// to keep pods off the node. Without unitlet-eviction nothing measures pressure, so the
// conditions say False with the kubelet's reasons — the node keeps taking pods — and the
// message tells an operator that the False is not a measurement.
const messageUnmonitored = "unitlet-eviction is not running: pressure is not monitored"

// pressureConditions asks the eviction service; nil means it is absent or failed.
func (c *Controller) pressureConditions(ctx context.Context) map[corev1.NodeConditionType]corev1.NodeCondition {
	if c.pressure == nil {
		return nil
	}
	conds, err := c.pressure.Pressure(ctx)
	if err != nil {
		c.log.Debug("pressure conditions unavailable", "err", err)
		return nil
	}
	out := make(map[corev1.NodeConditionType]corev1.NodeCondition, len(conds))
	for _, cond := range conds {
		out[cond.Type] = cond
	}
	return out
}

// pressureCondition is kind's condition from the eviction service's answer, with the
// kubelet's reason and message where the answer has none.
func (k pressureKind) condition(answer map[corev1.NodeConditionType]corev1.NodeCondition) corev1.NodeCondition {
	got, ok := answer[k.Type]
	if !ok {
		return corev1.NodeCondition{Type: k.Type, Status: corev1.ConditionFalse, Reason: k.OKReason, Message: messageUnmonitored}
	}
	out := corev1.NodeCondition{Type: k.Type, Status: got.Status, Reason: got.Reason, Message: got.Message}
	switch out.Status {
	case corev1.ConditionTrue:
		if out.Reason == "" {
			out.Reason, out.Message = k.UnderReason, k.UnderMessage
		}
	default:
		out.Status = corev1.ConditionFalse
		if out.Reason == "" {
			out.Reason, out.Message = k.OKReason, k.OKMessage
		}
	}
	return out
}

// event is the kubelet's event for a transition of kind to status.
func (k pressureKind) event(status corev1.ConditionStatus) string {
	if status == corev1.ConditionTrue {
		return k.underEv
	}
	return k.okEvent
}

// setCondition puts want into conds as the kubelet's setters do: the heartbeat is now, the
// transition time moves only when the status changes, a new condition is appended. It
// reports whether the condition existed and whether its status changed.
func setCondition(conds []corev1.NodeCondition, want corev1.NodeCondition, now metav1.Time) (out []corev1.NodeCondition, existed, changed bool) {
	want.LastHeartbeatTime = now
	for i := range conds {
		if conds[i].Type != want.Type {
			continue
		}
		changed = conds[i].Status != want.Status
		if changed {
			want.LastTransitionTime = now
		} else {
			want.LastTransitionTime = conds[i].LastTransitionTime
		}
		conds[i] = want
		return conds, true, changed
	}
	want.LastTransitionTime = now
	return append(conds, want), false, true
}

// conditionsChanged compares two condition lists ignoring heartbeat times and order.
func conditionsChanged(a, b []corev1.NodeCondition) bool {
	if len(a) != len(b) {
		return true
	}
	byType := make(map[corev1.NodeConditionType]corev1.NodeCondition, len(a))
	for _, cond := range a {
		byType[cond.Type] = cond
	}
	for _, cond := range b {
		old, ok := byType[cond.Type]
		if !ok || old.Status != cond.Status || old.Reason != cond.Reason || old.Message != cond.Message ||
			!old.LastTransitionTime.Equal(&cond.LastTransitionTime) {
			return true
		}
	}
	return false
}
