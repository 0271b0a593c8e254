package foundation

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	configv1 "github.com/unitlet/unitlet/proto/unitlet/config/v1"
	daemonv1 "github.com/unitlet/unitlet/proto/unitlet/daemon/v1"
)

// activate runs unitlet-config under the real systemd-socket-activate, which binds the bus
// socket (and the metrics port) first and starts the service on the first connection.
func activate(t *testing.T, n *node, metricsAddr string, extraEnv ...string) *proc {
	t.Helper()
	sa := tool(t, "systemd-socket-activate", "systemd")
	args := []string{"-l", n.socket(), "-l", metricsAddr, "--fdname=grpc:metrics"}
	for _, e := range append(n.env(), extraEnv...) {
		args = append(args, "-E", e)
	}
	args = append(args, binary(t, "unitlet-config"))
	args = append(args, n.args()...)
	p := start(t, sa, args, nil)
	waitSocket(t, p, n.socket())
	return p
}

func TestActivationCallBeforeReadySucceeds(t *testing.T) {
	n := newNode(t)
	p := activate(t, n, freePort(t))

	// The socket exists, but no unitlet-config runs yet: systemd-socket-activate starts it
	// on this connection. The call waits in the socket's backlog and is answered.
	before := time.Now()
	conn := dial(t, n.socket())
	cfg := getConfig(t, conn)
	if cfg.GetGeneration() == 0 || cfg.GetNode().GetName() != "node-a" {
		t.Fatalf("GetConfig before ready: generation %d node %q", cfg.GetGeneration(), cfg.GetNode().GetName())
	}
	info, err := daemonv1.NewDaemonServiceClient(conn).GetInfo(context.Background(), &daemonv1.GetInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if !info.GetSocketActivated() {
		t.Errorf("GetInfo: socket_activated = false; the service listened by itself")
	}
	if started := info.GetStartTime().AsTime(); started.Before(before.Add(-time.Second)) {
		t.Errorf("the service started at %s, before the call at %s: the call did not come before readiness", started, before)
	}
	if int(info.GetPid()) != p.cmd.Process.Pid {
		t.Errorf("GetInfo pid %d, want the activated process %d (systemd-socket-activate execs it)", info.GetPid(), p.cmd.Process.Pid)
	}
	t.Logf("first call answered %s after connecting (includes process start)", time.Since(before).Round(time.Millisecond))
}

func TestActivationNamesComeThroughLISTEN_FDNAMES(t *testing.T) {
	n := newNode(t)
	// systemd-socket-activate binds a path as a Unix socket: the pages are served there.
	metrics := filepath.Join(n.socketDir, "config-metrics.sock")
	activate(t, n, metrics)
	conn := dial(t, n.socket())
	getConfig(t, conn) // starts the service

	// The metrics fd was found by its name: /configz and /metrics answer on it.
	code, body := unixGet(t, metrics, "/configz")
	if code != 200 {
		t.Fatalf("/configz on the activated metrics socket: %d %s", code, body)
	}
	var z struct {
		KubeletConfig map[string]any `json:"kubeletconfig"`
	}
	if err := json.Unmarshal([]byte(body), &z); err != nil {
		t.Fatalf("/configz: %v: %s", err, body)
	}
	if z.KubeletConfig["maxPods"] != float64(42) {
		t.Errorf("/configz maxPods = %v, want 42", z.KubeletConfig["maxPods"])
	}
	code, body = unixGet(t, metrics, "/metrics")
	if code != 200 || !strings.Contains(body, "unitlet_build_info") {
		t.Fatalf("/metrics on the activated metrics socket: %d", code)
	}
	if v, ok := metric(body, "unitlet_config_last_reload_successful"); !ok || v != "1" {
		t.Errorf("unitlet_config_last_reload_successful = %q (present %v), want 1", v, ok)
	}

	// An activated TCP port has no authentication: /healthz alone.
	n2 := newNode(t)
	port := freePort(t)
	activate(t, n2, port)
	getConfig(t, dial(t, n2.socket()))
	if code, body := httpGet(t, "http://"+port+"/healthz"); code != 200 {
		t.Errorf("/healthz on an activated TCP metrics port: %d %s", code, body)
	}
	for _, path := range []string{"/configz", "/metrics"} {
		if code, body := httpGet(t, "http://"+port+path); code != 404 || strings.Contains(body, "kubeletconfig") || strings.Contains(body, "unitlet_build_info") {
			t.Errorf("%s on an activated TCP metrics port: %d %.200s, want 404", path, code, body)
		}
	}
}

// unixGet GETs path from the HTTP server on the Unix socket sock.
func unixGet(t *testing.T, sock, path string) (int, string) {
	t.Helper()
	c := http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		},
	}}
	defer c.CloseIdleConnections()
	resp, err := c.Get("http://metrics" + path)
	if err != nil {
		t.Fatalf("GET %s on %s: %v", path, sock, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestActivationDisallowedUIDGetsPermissionDenied(t *testing.T) {
	if os.Getuid() != 0 {
		t.Fatal("this test runs a client as nobody and needs root; run make test as root")
	}
	n := newNode(t)
	activate(t, n, freePort(t))
	getConfig(t, dial(t, n.socket()))
	// Let nobody connect, so that the service's own peer check is what refuses the call.
	if err := os.Chmod(n.socket(), 0o666); err != nil {
		t.Fatal(err)
	}
	ctl := filepath.Join(n.dir, "unitletctl")
	copyFile(t, binary(t, "unitletctl"), ctl)

	run := func(args ...string) (string, int) {
		cmd := exec.Command(ctl, append([]string{"--socket-dir=" + n.socketDir}, args...)...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		cmd.Env = []string{"PATH=/usr/bin:/bin"}
		out, _ := cmd.CombinedOutput()
		return string(out), cmd.ProcessState.ExitCode()
	}
	out, code := run("config")
	if code == 0 || !strings.Contains(out, "uid 65534") || !strings.Contains(out, "unitlet group") {
		t.Fatalf("unitletctl config as nobody: exit %d, output:\n%s\nwant a refusal naming uid 65534 and what to do", code, out)
	}
	// Health and identity are open to anyone: status works, and says the service serves.
	out, _ = run("status", "config")
	if !strings.Contains(out, "SERVING") {
		t.Fatalf("unitletctl status config as nobody:\n%s", out)
	}

	// The same denial, seen as a gRPC code.
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperClientAsNobody$", "-test.v")
	cmd.Env = append(os.Environ(), "UNITLET_TEST_HELPER_SOCKET="+n.socket())
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	self := os.Args[0]
	if !strings.HasPrefix(self, n.dir) {
		copyFile(t, self, filepath.Join(n.dir, "foundation.test"))
		cmd.Path = filepath.Join(n.dir, "foundation.test")
		cmd.Args[0] = cmd.Path
	}
	res, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("client as nobody: %v\n%s", err, res)
	}
	if !strings.Contains(string(res), "code=PermissionDenied") {
		t.Fatalf("client as nobody: want code=PermissionDenied, got:\n%s", res)
	}
}

// TestHelperClientAsNobody is run by TestActivationDisallowedUIDGetsPermissionDenied as
// another user; on its own it does nothing.
func TestHelperClientAsNobody(t *testing.T) {
	socket := os.Getenv("UNITLET_TEST_HELPER_SOCKET")
	if socket == "" {
		return
	}
	conn := dial(t, socket)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := configv1.NewConfigServiceClient(conn).GetConfig(ctx, &configv1.GetConfigRequest{})
	t.Logf("uid %d: code=%s message=%q", os.Getuid(), status.Code(err), status.Convert(err).Message())
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("want PermissionDenied")
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

// TestNotifyReadyAndStopping checks the real binary's sd_notify protocol: READY=1 once
// serving, STOPPING=1 on SIGTERM, and a clean exit.
func TestNotifyReadyAndStopping(t *testing.T) {
	n := newNode(t)
	notify := filepath.Join(n.dir, "notify.sock")
	l, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: notify, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	msgs := make(chan string, 16)
	go func() {
		buf := make([]byte, 4096)
		for {
			k, err := l.Read(buf)
			if err != nil {
				close(msgs)
				return
			}
			msgs <- string(buf[:k])
		}
	}()
	p := start(t, binary(t, "unitlet-config"), n.args(), append(n.env(), "NOTIFY_SOCKET="+notify))
	expect := func(state string) {
		t.Helper()
		timeout := time.After(20 * time.Second)
		for {
			select {
			case m := <-msgs:
				if strings.Contains(m, state) {
					return
				}
			case <-timeout:
				t.Fatalf("no %s from unitlet-config; output:\n%s", state, p.log())
			}
		}
	}
	expect("READY=1")
	if _, err := os.Stat(n.socket()); err != nil {
		t.Fatalf("READY=1 before the socket exists: %v", err)
	}
	getConfig(t, dial(t, n.socket()))
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	expect("STOPPING=1")
	if code := p.exitCode(t, 20*time.Second); code != 0 {
		t.Fatalf("exit code after SIGTERM: %d, want 0\n%s", code, p.log())
	}
}
