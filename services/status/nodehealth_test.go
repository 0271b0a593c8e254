package status

import (
	"context"
	"errors"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"k8s.io/apiserver/pkg/server/healthz"

	configv1 "github.com/unitlet/unitlet/proto/unitlet/config/v1"
	daemonv1 "github.com/unitlet/unitlet/proto/unitlet/daemon/v1"
	"github.com/unitlet/unitlet/services/status/nodestatus"
	"github.com/unitlet/unitlet/shared/bus"
	"github.com/unitlet/unitlet/shared/peercred"
)

func TestNodeHealthNamesEachService(t *testing.T) {
	dir := t.TempDir()
	// certs is installed on this node (its socket is there), volumes and eviction are not.
	if err := os.WriteFile(bus.SocketPath(dir, "certs"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	asked := map[string]int{}
	down := map[string]bool{}
	now := time.Unix(1000, 0)
	h := newNodeHealth(dir, func() error { return nil })
	h.now = func() time.Time { return now }
	h.probe = func(_ context.Context, svc string) error {
		mu.Lock()
		defer mu.Unlock()
		asked[svc]++
		if down[svc] {
			return errors.New("unitlet-" + svc + " unreachable")
		}
		return nil
	}
	mux := http.NewServeMux()
	healthz.InstallHandler(mux, h.Checks()...)
	get := func() (int, string) {
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/healthz", nil))
		return w.Code, w.Body.String()
	}

	if code, body := get(); code != http.StatusOK || body != "ok" {
		t.Fatalf("all healthy: %d %q", code, body)
	}
	if want := map[string]int{"config": 1, "podsync": 1, "certs": 1}; !maps.Equal(asked, want) {
		t.Errorf("asked %v, want %v: the required services and the installed optional one", asked, want)
	}

	// Polled again within the cache time: nobody is asked again.
	down["podsync"] = true
	if code, _ := get(); code != http.StatusOK || asked["podsync"] != 1 {
		t.Errorf("within %v: %d, podsync asked %d times, want the cached answer", nodeHealthCacheFor, code, asked["podsync"])
	}

	now = now.Add(nodeHealthCacheFor)
	code, body := get()
	if code != http.StatusInternalServerError || !strings.Contains(body, "[-]unitlet-podsync failed") || !strings.Contains(body, "[+]unitlet-config ok") {
		t.Errorf("podsync down: %d %q, want 500 naming unitlet-podsync", code, body)
	}

	// An optional service whose socket goes away stays expected.
	down["podsync"] = false
	down["certs"] = true
	if err := os.Remove(bus.SocketPath(dir, "certs")); err != nil {
		t.Fatal(err)
	}
	now = now.Add(nodeHealthCacheFor)
	if code, body := get(); code != http.StatusInternalServerError || !strings.Contains(body, "[-]unitlet-certs failed") {
		t.Errorf("certs gone: %d %q, want 500 naming unitlet-certs", code, body)
	}
}

func TestNodeHealthSelf(t *testing.T) {
	h := newNodeHealth(t.TempDir(), func() error { return errors.New("node status loop stuck") })
	h.probe = func(context.Context, string) error { return nil }
	for _, c := range h.Checks() {
		err := c.Check(httptest.NewRequest(http.MethodGet, "/healthz", nil))
		if (c.Name() == "unitlet-status") != (err != nil) {
			t.Errorf("check %s: %v", c.Name(), err)
		}
	}
}

func TestACallQueuedOnASocketIsWaitingNotRefused(t *testing.T) {
	dir := t.TempDir()
	// A socket that takes connections and never answers: systemd holding a service's
	// socket while the service starts again.
	l, err := net.Listen("unix", bus.SocketPath(dir, "eviction"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	err = healthy(context.Background(), dir, "eviction", 200*time.Millisecond)
	if !errors.Is(err, nodestatus.ErrNoAnswerYet) || !strings.HasPrefix(err.Error(), "unitlet-eviction unreachable: ") {
		t.Errorf("check of a queued call: %v (ErrNoAnswerYet: %t), want it waiting", err, errors.Is(err, nodestatus.ErrNoAnswerYet))
	}
	// Queued longer than the bus's connect timeout (2 s): gRPC closes a connection whose
	// server has not greeted it by then, and the call failed Unavailable ("error reading
	// server preface: use of closed network connection") where it only waited. Run 15 of
	// the fault suite had the node NotReady 20 s for a unitlet-config restart.
	for _, timeout := range []time.Duration{nodeHealthTimeout, healthTimeout} {
		start := time.Now()
		err = healthy(context.Background(), dir, "eviction", timeout)
		if !errors.Is(err, nodestatus.ErrNoAnswerYet) || time.Since(start) < timeout {
			t.Errorf("check of a call queued for its whole timeout %s: %v after %s (ErrNoAnswerYet: %t), want it waiting to the end", timeout, err, time.Since(start).Round(time.Millisecond), errors.Is(err, nodestatus.ErrNoAnswerYet))
		}
	}
	// No socket: refused, not waiting.
	err = healthy(context.Background(), dir, "volumes", 5*time.Second)
	if err == nil || errors.Is(err, nodestatus.ErrNoAnswerYet) {
		t.Errorf("check of a missing socket: %v, want a failure that is not waiting", err)
	}
	// The caller's own end is not the service's doing.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := healthy(ctx, dir, "eviction", time.Minute); err == nil || errors.Is(err, nodestatus.ErrNoAnswerYet) {
		t.Errorf("check cut short by its caller: %v, want a failure that is not waiting", err)
	}

	// A round of checks waited only when every failed one did.
	round := serviceErrors{nodestatus.NoAnswerYet(errors.New("a")), errors.New("b")}
	if errors.Is(round, nodestatus.ErrNoAnswerYet) || round.Error() != "a; b" {
		t.Errorf("round %q counted as waiting", round)
	}
	if round := round[:1]; !errors.Is(round, nodestatus.ErrNoAnswerYet) {
		t.Errorf("round %q of waits not counted as waiting", round)
	}
}

// fakeConfig is unitlet-config on the bus: serving, with the reload status given.
type fakeConfig struct {
	configv1.UnimplementedConfigServiceServer
	status *configv1.ReloadStatus
}

func (f fakeConfig) GetReloadStatus(context.Context, *configv1.GetReloadStatusRequest) (*configv1.GetReloadStatusResponse, error) {
	return &configv1.GetReloadStatusResponse{Status: f.status}, nil
}

// serveConfig serves a unitlet-config in dir whose last load did (or did not) succeed; a
// nil status serves one too old to have GetReloadStatus.
func serveConfig(t *testing.T, dir string, status *configv1.ReloadStatus) {
	t.Helper()
	l, err := net.Listen("unix", bus.SocketPath(dir, "config"))
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.Creds(peercred.NewCredentials()))
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	daemonv1.RegisterDaemonServiceServer(srv, olderDaemon{})
	if status != nil {
		configv1.RegisterConfigServiceServer(srv, fakeConfig{status: status})
	}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
}

// While unitlet-config's last load failed, the node's /healthz fails its unitlet-config
// check with the reason, though unitlet-config itself serves (its own check feeds its
// watchdog); the Ready condition's check of the services passes. Before, /healthz said ok.
func TestNodeHealthFailsWhileTheConfigurationDoesNotLoad(t *testing.T) {
	dir := t.TempDir()
	serveConfig(t, dir, &configv1.ReloadStatus{LastReloadSuccessful: false, Generation: 4, Trigger: "signal",
		LastError: "/etc/unitlet/config.d/50-harden.conf: field syncFrequency: invalid duration"})
	h := newNodeHealth(dir, func() error { return nil })
	err := h.probe(context.Background(), "config")
	if err == nil || !strings.Contains(err.Error(), "unitlet-config degraded") || !strings.Contains(err.Error(), "syncFrequency") || !strings.Contains(err.Error(), "generation 4 stays in effect") {
		t.Errorf("node health of unitlet-config whose reload failed: %v, want it degraded with the reason and generation 4", err)
	}
	if err := checkServices(dir)(context.Background()); err != nil {
		t.Errorf("the services' check for Ready: %v, want it passing (the node runs on the configuration in effect)", err)
	}

	loaded := t.TempDir()
	serveConfig(t, loaded, &configv1.ReloadStatus{LastReloadSuccessful: true, Generation: 5})
	if err := newNodeHealth(loaded, func() error { return nil }).probe(context.Background(), "config"); err != nil {
		t.Errorf("node health of unitlet-config whose last load succeeded: %v", err)
	}
	older := t.TempDir()
	serveConfig(t, older, nil)
	if err := newNodeHealth(older, func() error { return nil }).probe(context.Background(), "config"); err != nil {
		t.Errorf("node health of a unitlet-config without GetReloadStatus: %v, want it healthy", err)
	}
}
