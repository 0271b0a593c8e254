package daemon

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	daemonv1 "github.com/unitlet/unitlet/proto/unitlet/daemon/v1"
)

// withPages gives a daemon what the services add: a page of its own (unitlet-config's
// /configz) and a registry kept apart (podsync's probes).
func withPages(d *Daemon) {
	d.HandleHTTP("/configz", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"kubeletconfig":{"maxPods":110}}`))
	}))
	probes := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "prober_probe_total", Help: "h"}, []string{"pod"})
	c.WithLabelValues("default/secret-pod").Inc()
	probes.MustRegister(c)
	d.AddRegistry("probes", probes)
}

func get(t *testing.T, c *http.Client, url string) (int, string) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// A TCP metrics listener has no authentication: any local user and any hostNetwork pod
// reaches it. It answers /healthz, as the kubelet's healthz port, and nothing else: not the
// metrics (which name every pod), not /configz (the node's configuration), not a page a
// service adds.
func TestTCPMetricsListenerServesOnlyHealthz(t *testing.T) {
	_, _, addr, _, _ := startDaemon(t, freeAddr(t), nil, withPages)
	c := &http.Client{Timeout: 5 * time.Second}
	if code, body := get(t, c, "http://"+addr+"/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Fatalf("GET /healthz: %d %q, want 200 ok", code, body)
	}
	for _, path := range []string{"/metrics", "/metrics/probes", "/configz", "/", "/debug/pprof/", "/healthz/../metrics"} {
		code, body := get(t, c, "http://"+addr+path)
		if code != http.StatusNotFound || strings.Contains(body, "prober_probe_total") || strings.Contains(body, "kubeletconfig") || strings.Contains(body, "unitlet_build_info") {
			t.Errorf("GET %s on TCP: %d %.200q, want 404 and nothing of the page", path, code, body)
		}
		if path == "/metrics" && !strings.Contains(body, "UNITLET_METRICS_SOCKET=/run/unitlet/config-metrics.sock") {
			t.Errorf("GET /metrics on TCP: %.300q does not say where the pages are served", body)
		}
	}
}

// UNITLET_METRICS_SOCKET=<path> is the opt-in: a socket of mode 0600 (the process owner's
// alone) that serves every page, beside the TCP listener that still serves /healthz alone.
func TestUnixMetricsSocketServesEveryPage(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run", "config-metrics.sock")
	var failing atomic.Bool
	d, _, _, cancel, done := startDaemon(t, "unix:"+path, func(context.Context) error {
		if failing.Load() {
			return errors.New("broken on purpose")
		}
		return nil
	}, withPages)

	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Errorf("%s: mode %v, want a socket, 0600", path, fi.Mode())
	}
	if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != os.Getuid() || int(st.Gid) != os.Getegid() {
		t.Errorf("%s: owner %d:%d, want the process's %d:%d", path, st.Uid, st.Gid, os.Getuid(), os.Getegid())
	}

	// A call on the bus first, so that the gRPC server's metrics have a series.
	if _, err := daemonv1.NewDaemonServiceClient(dialDaemon(t, d)).GetInfo(context.Background(), &daemonv1.GetInfoRequest{}); err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", path)
		},
	}}
	for path, want := range map[string][]string{
		"/healthz":        {"ok"},
		"/metrics":        {"unitlet_build_info", "go_goroutines", "process_open_fds", "grpc_server_handled_total"},
		"/metrics/probes": {`prober_probe_total{pod="default/secret-pod"} 1`},
		"/configz":        {`"kubeletconfig"`},
	} {
		code, body := get(t, c, "http://metrics"+path)
		if code != http.StatusOK {
			t.Errorf("GET %s on the Unix socket: %d %.200q, want 200", path, code, body)
			continue
		}
		for _, w := range want {
			if !strings.Contains(body, w) {
				t.Errorf("GET %s on the Unix socket lacks %q", path, w)
			}
		}
	}

	// The socket's callers may read why the service is unhealthy.
	failing.Store(true)
	if code, body := get(t, c, "http://metrics/healthz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "broken on purpose") {
		t.Errorf("GET /healthz on the Unix socket while failing: %d %q, want 503 with the reason", code, body)
	}

	// The socket goes with the process.
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Errorf("%s after the stop: %v, want it removed", path, err)
	}
}

// Only a Unix socket with a path serves the pages: an activated TCP socket, or an abstract
// Unix socket (no file permissions: anyone may connect), serves /healthz alone.
func TestServesPagesOnlyOnAUnixSocketWithAPath(t *testing.T) {
	listen := func(network, addr string) net.Listener {
		l, err := net.Listen(network, addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l
	}
	for _, c := range []struct {
		l    net.Listener
		want bool
	}{
		{listen("tcp", "127.0.0.1:0"), false},
		{listen("unix", "@unitlet-test-"+strings.ReplaceAll(t.Name(), "/", "-")), false},
		{listen("unix", filepath.Join(t.TempDir(), "m.sock")), true},
	} {
		if got := servesPages(c.l); got != c.want {
			t.Errorf("servesPages(%s %s) = %t, want %t", c.l.Addr().Network(), c.l.Addr(), got, c.want)
		}
	}
}
