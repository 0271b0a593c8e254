package foundation

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/unitlet/unitlet/integration"
	configv1 "github.com/unitlet/unitlet/proto/unitlet/config/v1"
	"github.com/unitlet/unitlet/shared/bus"
)

const goodConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
maxPods: 42
clusterDomain: cluster.local
# These machines have cgroup v1, and their swap is not the tests' to change.
failCgroupV1: false
failSwapOn: false
`

// node is a scratch node: config file, drop-in dir, root dir and socket dir.
type node struct {
	dir, config, configDir, rootDir, socketDir string
}

func newNode(t *testing.T) *node {
	t.Helper()
	dir := t.TempDir()
	// Other users (the nobody test) must reach the socket directory; t.TempDir makes both it
	// and its parent 0700.
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	n := &node{
		dir:       dir,
		config:    filepath.Join(dir, "config.yaml"),
		configDir: filepath.Join(dir, "config.d"),
		rootDir:   filepath.Join(dir, "root"),
		socketDir: filepath.Join(dir, "sock"),
	}
	for _, d := range []string{n.configDir, n.socketDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	n.write(t, n.config, goodConfig)
	return n
}

func (n *node) write(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func (n *node) socket() string { return filepath.Join(n.socketDir, "config.sock") }

func (n *node) args(extra ...string) []string {
	return append([]string{
		"--config=" + n.config, "--config-dir=" + n.configDir, "--root-dir=" + n.rootDir,
		"--hostname-override=node-a", "--node-ip=192.0.2.10",
	}, extra...)
}

func (n *node) env() []string {
	return []string{"UNITLET_SOCKET_DIR=" + n.socketDir, "UNITLET_LOG_LEVEL=debug"}
}

// proc is a running unitlet process.
type proc struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	stderr bytes.Buffer
	done   chan struct{}
	err    error
}

func (p *proc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.Write(b)
}

func (p *proc) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

func start(t *testing.T, name string, args, env []string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(name, args...), done: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout = p
	p.cmd.Stderr = p
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(15 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("%s output:\n%s", filepath.Base(name), p.log())
		}
	})
	return p
}

func (p *proc) exitCode(t *testing.T, within time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(within):
		t.Fatalf("process did not exit within %s; output:\n%s", within, p.log())
	}
	return p.cmd.ProcessState.ExitCode()
}

func binary(t *testing.T, name string) string {
	t.Helper()
	p, err := integration.Binary(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func tool(t *testing.T, name, pkg string) string {
	t.Helper()
	p, err := integration.RequireTool(name, pkg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func dial(t *testing.T, socket string) *grpc.ClientConn {
	t.Helper()
	conn, err := bus.DialPath(socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func waitFor(t *testing.T, within time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	last := ""
	for time.Now().Before(deadline) {
		ok, state := cond()
		if ok {
			return
		}
		last = state
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s: not within %s (last: %s)", what, within, last)
}

func waitSocket(t *testing.T, p *proc, path string) {
	t.Helper()
	waitFor(t, 20*time.Second, "socket "+path, func() (bool, string) {
		select {
		case <-p.done:
			t.Fatalf("process exited early: %v\n%s", p.err, p.log())
		default:
		}
		fi, err := os.Stat(path)
		return err == nil && fi.Mode()&os.ModeSocket != 0, fmt.Sprint(err)
	})
}

func getConfig(t *testing.T, conn *grpc.ClientConn) *configv1.NodeConfig {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := configv1.NewConfigServiceClient(conn).GetConfig(ctx, &configv1.GetConfigRequest{})
	if err != nil {
		t.Fatalf("GetConfig: %v", err)
	}
	return resp.GetConfig()
}

func reloadStatus(t *testing.T, conn *grpc.ClientConn) *configv1.ReloadStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := configv1.NewConfigServiceClient(conn).GetReloadStatus(ctx, &configv1.GetReloadStatusRequest{})
	if err != nil {
		t.Fatalf("GetReloadStatus: %v", err)
	}
	return resp.GetStatus()
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// metric returns the value of an unlabelled sample in a Prometheus text page.
func metric(page, name string) (string, bool) {
	for _, line := range strings.Split(page, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return strings.TrimSpace(v), true
		}
	}
	return "", false
}
