package status

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	grpcstatus "google.golang.org/grpc/status"
	"k8s.io/apiserver/pkg/server/healthz"

	configv1 "github.com/unitlet/unitlet/proto/unitlet/config/v1"
	daemonv1 "github.com/unitlet/unitlet/proto/unitlet/daemon/v1"
	"github.com/unitlet/unitlet/services/status/nodestatus"
	"github.com/unitlet/unitlet/shared/bus"
)

// Bounds of the node's /healthz: every service is asked at most once per
// nodeHealthCacheFor however often /healthz is polled, and a service that does not answer
// its health check and GetInfo within nodeHealthTimeout fails it.
const (
	nodeHealthTimeout  = time.Second
	nodeHealthCacheFor = time.Second
)

// requiredServices run on every node; a node without one of them is not a working node.
var requiredServices = []string{"config", "podsync"}

// nodeHealth is /healthz of the node agent, on the node API and on healthzPort: one check
// per unitlet service, so a failure names the service. The kubelet's /healthz is its own
// health; the node agent is six processes, and it is healthy only when all of them are.
// unitlet-config is also unhealthy here while its last load failed (degraded: the
// configuration in effect is not the one in the files), though its own health check
// passes: that one feeds its watchdog, and a restart would stop it (services/config).
// The Ready condition does not count it (checkServices): the node runs on as configured
// before, and NotReady would have its pods evicted for an edit that never took effect.
type nodeHealth struct {
	socketDir string
	// self is unitlet-status's own health (its loops).
	self func() error
	// probe asks one other service over the bus.
	probe func(ctx context.Context, svc string) error
	now   func() time.Time

	mu   sync.Mutex
	at   time.Time
	errs map[string]error
	// seen are the optional services whose socket was there once: a service whose socket
	// goes away stays expected until unitlet-status restarts (fail closed).
	seen map[string]bool
}

func newNodeHealth(socketDir string, self func() error) *nodeHealth {
	return &nodeHealth{
		socketDir: socketDir,
		self:      self,
		probe: func(ctx context.Context, svc string) error {
			if err := healthy(ctx, socketDir, svc, nodeHealthTimeout); err != nil || svc != "config" {
				return err
			}
			return configLoaded(ctx, socketDir, nodeHealthTimeout)
		},
		now:  time.Now,
		seen: map[string]bool{},
	}
}

// Checks are /healthz's checks besides ping: unitlet-status itself, then each other service.
func (h *nodeHealth) Checks() []healthz.HealthChecker {
	var checks []healthz.HealthChecker
	for _, svc := range append([]string{ServiceName}, append(requiredServices, optionalServices...)...) {
		checks = append(checks, healthz.NamedCheck("unitlet-"+svc, func(r *http.Request) error {
			return h.results(r.Context())[svc]
		}))
	}
	return checks
}

// results are the services' health, asked again when older than nodeHealthCacheFor.
// Callers meanwhile wait for the answer in progress instead of asking again.
func (h *nodeHealth) results(ctx context.Context) map[string]error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.errs != nil && h.now().Sub(h.at) < nodeHealthCacheFor {
		return h.errs
	}
	services := append([]string{}, requiredServices...)
	for _, svc := range optionalServices {
		if !h.seen[svc] {
			if _, err := os.Stat(bus.SocketPath(h.socketDir, svc)); err != nil {
				continue
			}
			h.seen[svc] = true
		}
		services = append(services, svc)
	}
	errs := make(map[string]error, len(services)+1)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, svc := range services {
		wg.Go(func() {
			// Not cancelled with the request that asked: the answer is shared with the
			// other callers, and a client hanging up is no failure of the service.
			err := h.probe(context.WithoutCancel(ctx), svc)
			mu.Lock()
			errs[svc] = err
			mu.Unlock()
		})
	}
	if err := h.self(); err != nil {
		mu.Lock()
		errs[ServiceName] = err
		mu.Unlock()
	}
	wg.Wait()
	h.errs, h.at = errs, h.now()
	return errs
}

// healthy asks a service for its gRPC health and its GetInfo, within timeout.
func healthy(parent context.Context, socketDir, svc string, timeout time.Duration) error {
	// The connection waits longer than the call: a call the socket took then runs out of
	// its own time (waiting), rather than failing Unavailable when gRPC gives up on the
	// greeting of a service still starting.
	conn, err := bus.Dial(socketDir, svc, bus.WithConnectTimeout(timeout+time.Second))
	if err != nil {
		return fmt.Errorf("unitlet-%s unreachable: %v", svc, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(parent, timeout)
	defer cancel()
	// Not the bus's wait for ready: a refused connection fails the check at once, and only a
	// call the socket took waits (see waitedOrNot).
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(false))
	if err != nil {
		return waitedOrNot(parent, err, fmt.Errorf("unitlet-%s unreachable: %s", svc, grpcstatus.Convert(err).Message()))
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("unitlet-%s not serving: %s", svc, resp.GetStatus())
	}
	if _, err := daemonv1.NewDaemonServiceClient(conn).GetInfo(ctx, &daemonv1.GetInfoRequest{}, grpc.WaitForReady(false)); err != nil {
		return waitedOrNot(parent, err, fmt.Errorf("unitlet-%s does not answer GetInfo: %s", svc, grpcstatus.Convert(err).Message()))
	}
	return nil
}

// configLoaded asks unitlet-config whether its last load of the configuration succeeded;
// a failed one is the error, with unitlet-config's reason and the generation that stays.
// A unitlet-config too old to say is taken as loaded.
func configLoaded(parent context.Context, socketDir string, timeout time.Duration) error {
	conn, err := bus.Dial(socketDir, "config", bus.WithConnectTimeout(timeout+time.Second))
	if err != nil {
		return fmt.Errorf("unitlet-config unreachable: %v", err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(parent, timeout)
	defer cancel()
	resp, err := configv1.NewConfigServiceClient(conn).GetReloadStatus(ctx, &configv1.GetReloadStatusRequest{}, grpc.WaitForReady(false))
	switch {
	case grpcstatus.Code(err) == codes.Unimplemented:
		return nil
	case err != nil:
		return waitedOrNot(parent, err, fmt.Errorf("unitlet-config does not answer GetReloadStatus: %s", grpcstatus.Convert(err).Message()))
	}
	st := resp.GetStatus()
	if st.GetLastReloadSuccessful() || st.GetLastError() == "" {
		return nil
	}
	return fmt.Errorf("unitlet-config degraded: the configuration did not load (%s); generation %d stays in effect", st.GetLastError(), st.GetGeneration())
}

// waitedOrNot is reported, marked nodestatus.ErrNoAnswerYet when err, a call's error, is
// the call's own timeout running out while parent was still live: the service's socket
// took the call and it waited (a restart under systemd's socket activation), where a
// refused connection or a stopped server fails at once (codes.Unavailable).
func waitedOrNot(parent context.Context, err, reported error) error {
	if grpcstatus.Code(err) == codes.DeadlineExceeded && parent.Err() == nil {
		return nodestatus.NoAnswerYet(reported)
	}
	return reported
}
