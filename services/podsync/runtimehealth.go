package podsync

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	podsyncv1 "github.com/unitlet/unitlet/proto/unitlet/podsync/v1"
	"github.com/unitlet/unitlet/services/podsync/admission"
	"github.com/unitlet/unitlet/services/podsync/relist"
	"github.com/unitlet/unitlet/shared/cri"
)

// runtimeDownAfter is how long the runtime may fail to answer Status before it is reported
// down: the kubelet's maxWaitForContainerRuntime. One slow answer (a starved node, a
// daemon-reload of a host with many scopes) leaves the node Ready, as with the kubelet.
//
// A podsync that has just started has no answer of its own yet: it counts the same time
// from its start, and until the runtime answers (or that time runs out) a health call
// waits, as a call queued on the socket during the restart does, rather than report the
// runtime down. The kubelet reports a runtime it has not heard from yet as down; a
// podsync restart (an upgrade, a crash) must not turn the node NotReady because its first
// Status call, made with what was left of a queued health call's deadline on a busy node,
// was late.
const runtimeDownAfter = 30 * time.Second

// errNoRuntimeAnswerYet is a health call's answer while a podsync that has just started
// waits for the runtime's first answer: the caller's deadline ran out.
var errNoRuntimeAnswerYet = status.Error(codes.DeadlineExceeded, "unitlet-podsync has started and the container runtime has not answered it yet")

// runtimeStatuser is what runtimeHealth asks of the runtime.
type runtimeStatuser interface {
	Version(context.Context, *runtimeapi.VersionRequest, ...grpc.CallOption) (*runtimeapi.VersionResponse, error)
	Status(context.Context, *runtimeapi.StatusRequest, ...grpc.CallOption) (*runtimeapi.StatusResponse, error)
}

// runtimeHealth polls the runtime's Status.
type runtimeHealth struct {
	rt       runtimeStatuser
	relister *relist.Relister
	now      func() time.Time
	mu       sync.Mutex
	last     *podsyncv1.RuntimeHealth
	// lastAnswer is when the runtime last answered Status.
	lastAnswer time.Time
	// started is when this podsync began to ask: before the runtime's first answer,
	// runtimeDownAfter counts from it.
	started time.Time
	// shuttingDown reports a graceful node shutdown under way.
	shuttingDown func() bool
}

func (h *runtimeHealth) Run(ctx context.Context) error {
	for {
		h.poll(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(5 * time.Second):
		}
	}
}

func (h *runtimeHealth) poll(ctx context.Context) {
	out := &podsyncv1.RuntimeHealth{}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if v, err := h.rt.Version(cctx, &runtimeapi.VersionRequest{}); err == nil {
		out.RuntimeName, out.RuntimeVersion = v.RuntimeName, v.RuntimeVersion
	}
	st, err := h.rt.Status(cctx, &runtimeapi.StatusRequest{})
	now := h.now()
	if err != nil {
		h.mu.Lock()
		defer h.mu.Unlock()
		// The last answer stands for runtimeDownAfter (none, when there is none yet: callers
		// wait); the runtime is down after that.
		since := h.lastAnswer
		if since.IsZero() {
			since = h.started
		}
		if now.Sub(since) < runtimeDownAfter {
			return
		}
		out.Message = fmt.Sprintf("container runtime is down: %v", err)
		h.last = out
		return
	}
	for _, c := range st.GetStatus().GetConditions() {
		switch c.Type {
		case runtimeapi.RuntimeReady:
			out.RuntimeReady = c.Status
			if !c.Status {
				out.Message = fmt.Sprintf("container runtime not ready: %s: %s", c.Reason, c.Message)
			}
		case runtimeapi.NetworkReady:
			out.NetworkReady = c.Status
			if !c.Status && out.Message == "" {
				out.Message = fmt.Sprintf("container runtime network not ready: %s: %s", c.Reason, c.Message)
			}
		}
	}
	for _, rh := range st.GetRuntimeHandlers() {
		out.RuntimeHandlers = append(out.RuntimeHandlers, &podsyncv1.RuntimeHandler{
			Name: rh.GetName(), RecursiveReadOnlyMounts: rh.GetFeatures().GetRecursiveReadOnlyMounts(), UserNamespaces: rh.GetFeatures().GetUserNamespaces(),
		})
	}
	out.Features = &podsyncv1.RuntimeFeatures{SupplementalGroupsPolicy: st.GetFeatures().GetSupplementalGroupsPolicy()}
	h.mu.Lock()
	h.last, h.lastAnswer = out, now
	h.mu.Unlock()
}

// RuntimeHealth is the last runtime status with the relist's health. Before the first
// (runtimeDownAfter), it asks the runtime until it answers or ctx ends, and then fails
// with errNoRuntimeAnswerYet.
func (h *runtimeHealth) RuntimeHealth(ctx context.Context) (*podsyncv1.RuntimeHealth, error) {
	last := h.lastStatus()
	for last == nil {
		h.poll(ctx)
		if last = h.lastStatus(); last != nil {
			break
		}
		select {
		case <-ctx.Done():
			return nil, errNoRuntimeAnswerYet
		case <-time.After(200 * time.Millisecond):
		}
	}
	out := clonePodHealth(last)
	relistHealth(out, h.relister)
	out.NodeShuttingDown = h.shuttingDown()
	return out, nil
}

func (h *runtimeHealth) lastStatus() *podsyncv1.RuntimeHealth {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.last
}

// newRuntimeHealth reports rt's status with the relister's health; shuttingDown tells a
// graceful node shutdown under way (nodeshutdown.Manager.ShuttingDown).
func newRuntimeHealth(rt runtimeStatuser, relister *relist.Relister, shuttingDown func() bool) *runtimeHealth {
	return &runtimeHealth{rt: rt, relister: relister, now: time.Now, started: time.Now(), shuttingDown: shuttingDown}
}

// relistError is the service's health: the relister's error while it is unhealthy.
func relistError(r *relist.Relister) error {
	if ok, _, err := r.Health(); !ok {
		return err
	}
	return nil
}

// admissionRuntime is the runtime as admission names it: CRI Version's name and version,
// whether Status's default handler ("") reports user namespace support, and which
// handlers support recursive read-only mounts. A runtime
// that cannot answer yet is left unnamed: what it lacks is refused all the same.
func admissionRuntime(ctx context.Context, rt *cri.Client, log *slog.Logger) admission.Runtime {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	out := admission.Runtime{Host: admission.ReadHost()}
	v, err := rt.Version(ctx, &runtimeapi.VersionRequest{})
	if err != nil {
		log.Warn("container runtime version: admission messages will not name the runtime", "err", err)
		return out
	}
	out.Name, out.Version = v.RuntimeName, v.RuntimeVersion
	st, err := rt.Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		log.Warn("container runtime status: its user namespace support is taken as absent", "err", err)
		return out
	}
	out.SupplementalGroupsPolicy = st.GetFeatures().GetSupplementalGroupsPolicy()
	out.RecursiveReadOnly = map[string]bool{}
	out.UserNamespacesBy = map[string]bool{}
	for _, h := range st.GetRuntimeHandlers() {
		if h.GetName() == "" {
			out.UserNamespaces = h.GetFeatures().GetUserNamespaces()
		}
		out.UserNamespacesBy[h.GetName()] = h.GetFeatures().GetUserNamespaces()
		out.RecursiveReadOnly[h.GetName()] = h.GetFeatures().GetRecursiveReadOnlyMounts()
	}
	return out
}
