package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	daemonv1 "github.com/unitlet/unitlet/proto/unitlet/daemon/v1"
	"github.com/unitlet/unitlet/shared/bus"
	"github.com/unitlet/unitlet/shared/envconfig"
	"github.com/unitlet/unitlet/shared/peercred"
	"github.com/unitlet/unitlet/shared/restart"
)

// notes records sd_notify messages.
type notes struct {
	mu   sync.Mutex
	msgs []string
}

func (n *notes) add(s string) {
	n.mu.Lock()
	n.msgs = append(n.msgs, s)
	n.mu.Unlock()
}

func (n *notes) count(prefix string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	c := 0
	for _, m := range n.msgs {
		if strings.HasPrefix(m, prefix) {
			c++
		}
	}
	return c
}

func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s: not within %s", what, within)
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// runDaemon starts a daemon in a temp socket dir with a recorded sd_notify, its metrics
// listener on a free loopback port.
func runDaemon(t *testing.T, check func(context.Context) error) (*Daemon, *notes, string, context.CancelFunc, <-chan error) {
	t.Helper()
	return startDaemon(t, freeAddr(t), check, nil)
}

// startDaemon is runDaemon with UNITLET_METRICS_ADDR=metricsAddr, and setup called on the
// daemon before Run.
func startDaemon(t *testing.T, metricsAddr string, check func(context.Context) error, setup func(*Daemon)) (*Daemon, *notes, string, context.CancelFunc, <-chan error) {
	t.Helper()
	dir := t.TempDir()
	var s Settings
	env := map[string]string{"UNITLET_SOCKET_DIR": dir, "UNITLET_SHUTDOWN_TIMEOUT": "2s"}
	// "unix:PATH" here is UNITLET_METRICS_SOCKET=PATH beside a TCP UNITLET_METRICS_ADDR,
	// as a unit's drop-in opts in.
	if path, ok := strings.CutPrefix(metricsAddr, "unix:"); ok {
		env["UNITLET_METRICS_SOCKET"] = path
		env["UNITLET_METRICS_ADDR"] = "127.0.0.1:0"
	} else {
		env["UNITLET_METRICS_ADDR"] = metricsAddr
	}
	if err := envconfig.Parse(&s, env); err != nil {
		t.Fatal(err)
	}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	d := New(Options{Service: "config", Settings: s, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	n := &notes{}
	d.notify = n.add
	d.SetHealthCheck(check)
	if setup != nil {
		setup(d)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	eventually(t, 5*time.Second, "READY=1", func() bool {
		select {
		case err := <-done:
			t.Fatalf("Run returned before READY=1: %v", err)
		default:
		}
		return n.count("READY=1") > 0
	})
	t.Cleanup(cancel)
	return d, n, s.MetricsAddr, cancel, done
}

func dialDaemon(t *testing.T, d *Daemon) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+bus.SocketPath(d.opts.Settings.SocketDir, "config"), grpc.WithTransportCredentials(peercred.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func healthStatus(t *testing.T, conn *grpc.ClientConn) healthpb.HealthCheckResponse_ServingStatus {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return r.GetStatus()
}

func TestWatchdogFollowsTheHealthCheck(t *testing.T) {
	t.Setenv("WATCHDOG_USEC", "100000")
	t.Setenv("WATCHDOG_PID", fmt.Sprint(os.Getpid()))
	var failing atomic.Bool
	var failedChecks atomic.Int64
	d, n, metrics, cancel, done := runDaemon(t, func(context.Context) error {
		if failing.Load() {
			failedChecks.Add(1)
			return errors.New("broken on purpose")
		}
		return nil
	})
	conn := dialDaemon(t, d)

	eventually(t, 5*time.Second, "WATCHDOG=1 while healthy", func() bool { return n.count("WATCHDOG=1") >= 3 })
	if s := healthStatus(t, conn); s != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health %s while healthy", s)
	}
	info, err := daemonv1.NewDaemonServiceClient(conn).GetInfo(context.Background(), &daemonv1.GetInfoRequest{})
	if err != nil || info.GetService() != "config" || info.GetPid() != int32(os.Getpid()) || info.GetSocketActivated() {
		t.Fatalf("GetInfo: %v %v", info, err)
	}
	if resp, err := http.Get("http://" + metrics + "/healthz"); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz while healthy: %v %v", resp, err)
	}

	failing.Store(true)
	eventually(t, 5*time.Second, "NOT_SERVING while failing", func() bool {
		return healthStatus(t, conn) == healthpb.HealthCheckResponse_NOT_SERVING
	})
	before, checks := n.count("WATCHDOG=1"), failedChecks.Load()
	// Eight more failing checks, one a watchdog period: the watchdog must not have been
	// fed after any of them.
	eventually(t, 10*time.Second, "eight more failing checks", func() bool { return failedChecks.Load() >= checks+8 })
	if after := n.count("WATCHDOG=1"); after > before+1 {
		t.Fatalf("the watchdog was fed %d times while the check failed", after-before)
	}
	resp, err := http.Get("http://" + metrics + "/healthz")
	if err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("/healthz while failing: %v %v", resp, err)
	}
	// A TCP listener has no authentication: the reason is withheld, as the kubelet's.
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.Contains(string(body), "broken on purpose") || !strings.Contains(string(body), "withheld") {
		t.Errorf("/healthz on TCP while failing: %q, want the reason withheld", body)
	}

	failing.Store(false)
	resumed := n.count("WATCHDOG=1")
	eventually(t, 5*time.Second, "WATCHDOG=1 after recovery", func() bool { return n.count("WATCHDOG=1") >= resumed+2 })

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run after cancel: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
	if n.count("STOPPING=1") != 1 {
		t.Fatalf("STOPPING=1 sent %d times", n.count("STOPPING=1"))
	}
}

func TestStopEndsStreamsAndBoundsTheDrain(t *testing.T) {
	d, _, _, cancel, done := runDaemon(t, nil)
	conn := dialDaemon(t, d)
	stream, err := healthpb.NewHealthClient(conn).Watch(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	// A drain bound far beyond the test's wait: only ending the stream at once lets the
	// stop finish in time.
	d.opts.Settings.ShutdownTimeout = time.Hour
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("an open watch held up the stop")
	}
	for {
		if _, err := stream.Recv(); err != nil {
			break
		}
	}
}

func TestSettings(t *testing.T) {
	var s Settings
	if err := envconfig.Parse(&s, map[string]string{}); err != nil || s.SocketDir != "/run/unitlet" || s.LogLevel != "info" || s.ShutdownTimeout != 10*time.Second {
		t.Fatalf("defaults: %+v %v", s, err)
	}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, ok := range []string{"127.0.0.1:10271", ":10271", "[::1]:0", "localhost:10271"} {
		s := s
		s.MetricsAddr = ok
		if err := s.Validate(); err != nil {
			t.Errorf("UNITLET_METRICS_ADDR=%s: %v", ok, err)
		}
	}
	for env, want := range map[string]string{
		"UNITLET_SOCKET_DIR=relative":              "UNITLET_SOCKET_DIR",
		"UNITLET_LOG_LEVEL=chatty":                 "UNITLET_LOG_LEVEL",
		"UNITLET_LOG_FORMAT=xml":                   "UNITLET_LOG_FORMAT",
		"UNITLET_SHUTDOWN_TIMEOUT=0s":              "UNITLET_SHUTDOWN_TIMEOUT",
		"UNITLET_SHUTDOWN_TIMEOUT=a week":          "SHUTDOWN_TIMEOUT",
		"UNITLET_METRICS_SOCKET=run/x.sock":        "UNITLET_METRICS_SOCKET",
		"UNITLET_METRICS_SOCKET=@abstract":         "UNITLET_METRICS_SOCKET",
		"UNITLET_METRICS_SOCKET=/run/../x.sock":    "UNITLET_METRICS_SOCKET",
		"UNITLET_METRICS_SOCKET=unix:/run/x.sock":  "UNITLET_METRICS_SOCKET",
		"UNITLET_METRICS_ADDR=unix:/run/x.sock":    "UNITLET_METRICS_SOCKET=/absolute/path",
		"UNITLET_METRICS_ADDR=/run/unitlet/x.sock": "UNITLET_METRICS_ADDR",
		"UNITLET_METRICS_ADDR=127.0.0.1":           "UNITLET_METRICS_ADDR",
		"UNITLET_METRICS_ADDR=127.0.0.1:metrics":   "UNITLET_METRICS_ADDR",
		"UNITLET_METRICS_ADDR=127.0.0.1:70000":     "UNITLET_METRICS_ADDR",
	} {
		k, v, _ := strings.Cut(env, "=")
		var s Settings
		err := envconfig.Parse(&s, map[string]string{k: v})
		if err == nil {
			err = s.Validate()
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want one naming %s", env, err, want)
		}
	}
}

// notYet is an error that may pass by itself.
type notYet struct{}

func (notYet) Error() string   { return "not there yet" }
func (notYet) Temporary() bool { return true }

func TestExitCode(t *testing.T) {
	for err, want := range map[error]int{
		nil:                          ExitOK,
		context.Canceled:             ExitOK,
		errors.New("boom"):           ExitFailure,
		ConfigError(errors.New("x")): ExitBadConfig,
		fmt.Errorf("wrapped: %w", ConfigError(errors.New("x"))): ExitBadConfig,
		// A file not there yet may come: systemd should try again.
		ConfigError(fmt.Errorf("start: %w", notYet{})): ExitFailure,
		// A full disk (a checkpoint's write) is the machine's trouble, and passes: systemd
		// should try again, not leave the service down for good.
		ConfigError(fmt.Errorf("record the last good configuration: %w", &fs.PathError{Op: "write", Path: "/var/lib/unitlet/checkpoints/x", Err: syscall.ENOSPC})): ExitFailure,
		// A restart asked for: systemd starts it again.
		fmt.Errorf("configuration: %w", &restart.Error{Reason: "generation 4 changes nodeStatusMaxImages"}): ExitOK,
	} {
		if got := ExitCode(err); got != want {
			t.Errorf("ExitCode(%v) = %d, want %d", err, got, want)
		}
	}
}

func TestListenUnixReplacesOnlyStaleSockets(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config.sock")

	// A socket file nobody listens on any more is replaced.
	stale, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	stale.Close()
	l, err := listenUnix(path, busSocket)
	if err != nil {
		t.Fatalf("stale socket not replaced: %v", err)
	}
	fi, _ := os.Stat(path)
	if fi.Mode().Perm() != 0o660 {
		t.Errorf("socket mode %v, want 0660", fi.Mode().Perm())
	}

	// A socket something answers on is left alone.
	if _, err := listenUnix(path, busSocket); err == nil || !strings.Contains(err.Error(), "another process is serving") {
		t.Fatalf("live socket: %v", err)
	}
	l.Close()

	// A file that is not a socket is never removed.
	other := filepath.Join(dir, "file.sock")
	os.WriteFile(other, []byte("precious"), 0o644)
	if _, err := listenUnix(other, metricsSocket); err == nil || !strings.Contains(err.Error(), "not a socket") || !strings.Contains(err.Error(), "UNITLET_METRICS_SOCKET") {
		t.Fatalf("regular file: %v", err)
	}
	if b, _ := os.ReadFile(other); string(b) != "precious" {
		t.Fatal("the regular file was touched")
	}
}

func TestPickActivated(t *testing.T) {
	mk := func() net.Listener {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l
	}
	g, m, u := mk(), mk(), mk()
	if got, err := pickActivated(map[string][]net.Listener{FDNameGRPC: {g}, FDNameMetrics: {m}}); err != nil || got != g {
		t.Errorf("named: %v %v", got, err)
	}
	if got, err := pickActivated(map[string][]net.Listener{"unknown": {u}}); err != nil || got != u {
		t.Errorf("single unnamed: %v %v", got, err)
	}
	if _, err := pickActivated(map[string][]net.Listener{FDNameMetrics: {m}}); err == nil || !strings.Contains(err.Error(), "FileDescriptorName=grpc") {
		t.Errorf("metrics only: %v", err)
	}
	if _, err := pickActivated(map[string][]net.Listener{"a": {g}, "b": {u}}); err == nil {
		t.Error("two unnamed sockets: want an error")
	}
}
