package podsync

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	podsyncv1 "github.com/unitlet/unitlet/proto/unitlet/podsync/v1"
	"github.com/unitlet/unitlet/services/podsync/admission"
	"github.com/unitlet/unitlet/services/podsync/relist"
	"github.com/unitlet/unitlet/shared/cri"
)

// runtimeHealth polls the runtime's Status.
type runtimeHealth struct {
	rt       *cri.Client
	relister *relist.Relister
	mu       sync.Mutex
	last     *podsyncv1.RuntimeHealth
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
	if err != nil {
		out.Message = fmt.Sprintf("container runtime is down: %v", err)
	} else {
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
	}
	h.mu.Lock()
	h.last = out
	h.mu.Unlock()
}

// RuntimeHealth is the last runtime status with the relist's health.
func (h *runtimeHealth) RuntimeHealth(ctx context.Context) *podsyncv1.RuntimeHealth {
	h.mu.Lock()
	last := h.last
	h.mu.Unlock()
	if last == nil {
		h.poll(ctx)
		h.mu.Lock()
		last = h.last
		h.mu.Unlock()
	}
	out := clonePodHealth(last)
	relistHealth(out, h.relister)
	return out
}

func newRuntimeHealth(rt *cri.Client, relister *relist.Relister) *runtimeHealth {
	return &runtimeHealth{rt: rt, relister: relister}
}

// relistError is the service's health: the relister's error while it is unhealthy.
func relistError(r *relist.Relister) error {
	if ok, _, err := r.Health(); !ok {
		return err
	}
	return nil
}

// admissionRuntime is the runtime as admission names it: CRI Version's name and version,
// and whether Status's default handler ("") reports user namespace support. A runtime
// that cannot answer yet is left unnamed: what it lacks is refused all the same.
func admissionRuntime(ctx context.Context, rt *cri.Client, log *slog.Logger) admission.Runtime {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var out admission.Runtime
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
	for _, h := range st.GetRuntimeHandlers() {
		if h.GetName() == "" {
			out.UserNamespaces = h.GetFeatures().GetUserNamespaces()
		}
	}
	return out
}
