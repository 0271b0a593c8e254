package pluginwatcher

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// fakePlugin is a plugin's registration server (the node-driver-registrar's part) on a
// Unix socket: it answers GetInfo with info and records what it is told.
type fakePlugin struct {
	registerapi.UnimplementedRegistrationServer
	path string
	info *registerapi.PluginInfo
	// getInfo, when set, runs at each GetInfo (n counts the calls from 1); an error fails
	// the call.
	getInfo func(ctx context.Context, n int) error

	// conns counts accepted connections: a refused socket must never get one.
	conns        atomic.Int32
	getInfoCalls atomic.Int32
	// inGetInfo counts the GetInfo calls under way.
	inGetInfo atomic.Int32

	mu       sync.Mutex
	statuses []*registerapi.RegistrationStatus
}

// startPlugin serves a fake plugin of the given type and name on a new socket at path.
func startPlugin(t *testing.T, path, typ, name string) *fakePlugin {
	t.Helper()
	p := newPlugin(t, path, typ, name)
	p.serve(t)
	return p
}

// newPlugin is a fake plugin that serve will start; set its hooks in between.
func newPlugin(t *testing.T, path, typ, name string) *fakePlugin {
	t.Helper()
	return &fakePlugin{path: path, info: &registerapi.PluginInfo{Type: typ, Name: name, SupportedVersions: []string{"1.0.0"}}}
}

// serve listens on p.path and answers until the test ends.
func (p *fakePlugin) serve(t *testing.T) {
	t.Helper()
	if len(p.path) >= 108 {
		t.Fatalf("socket path %s is longer than a Unix socket address allows; use a shorter test name", p.path)
	}
	l, err := net.Listen("unix", p.path)
	if err != nil {
		t.Fatalf("listen on %s: %v", p.path, err)
	}
	// Tests remove or move the file themselves; closing must not remove whatever is at
	// the path by then.
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	srv := grpc.NewServer()
	registerapi.RegisterRegistrationServer(srv, p)
	go srv.Serve(countingListener{l, &p.conns})
	t.Cleanup(srv.Stop)
}

func (p *fakePlugin) GetInfo(ctx context.Context, _ *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	n := p.getInfoCalls.Add(1)
	p.inGetInfo.Add(1)
	defer p.inGetInfo.Add(-1)
	if p.getInfo != nil {
		if err := p.getInfo(ctx, int(n)); err != nil {
			return nil, err
		}
	}
	return p.info, nil
}

func (p *fakePlugin) NotifyRegistrationStatus(_ context.Context, s *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.statuses = append(p.statuses, s)
	return &registerapi.RegistrationStatusResponse{}, nil
}

// lastStatus is the last registration status the plugin was sent, or nil.
func (p *fakePlugin) lastStatus() *registerapi.RegistrationStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.statuses) == 0 {
		return nil
	}
	return p.statuses[len(p.statuses)-1]
}

// waitStatus waits for the plugin to be told it was registered (or not) and returns what
// it was told.
func (p *fakePlugin) waitStatus(t *testing.T, within time.Duration, registered bool) *registerapi.RegistrationStatus {
	t.Helper()
	var got *registerapi.RegistrationStatus
	eventually(t, within, fmt.Sprintf("plugin at %s told registered=%v", p.path, registered), func() bool {
		got = p.lastStatus()
		return got != nil && got.PluginRegistered == registered
	})
	return got
}

type countingListener struct {
	net.Listener
	n *atomic.Int32
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// fakeHandler records the calls it gets, as "validate <name> <endpoint>" and so on.
type fakeHandler struct {
	// validate and register, when set, answer ValidatePlugin and RegisterPlugin.
	validate func(name string) error
	register func(name string) error

	mu    sync.Mutex
	calls []string
}

func (h *fakeHandler) ValidatePlugin(name, endpoint string, versions []string) error {
	h.record("validate", name, endpoint)
	if h.validate != nil {
		return h.validate(name)
	}
	return nil
}

func (h *fakeHandler) RegisterPlugin(name, endpoint string, versions []string, timeout *time.Duration) error {
	h.record("register", name, endpoint)
	if h.register != nil {
		return h.register(name)
	}
	return nil
}

func (h *fakeHandler) DeRegisterPlugin(name, endpoint string) {
	h.record("deregister", name, endpoint)
}

func (h *fakeHandler) record(call, name, endpoint string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls = append(h.calls, call+" "+name+" "+endpoint)
}

func (h *fakeHandler) Calls() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.calls)
}

// logBuffer collects a Watcher's log and passes it to the test's.
type logBuffer struct {
	t  *testing.T
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.t.Log(strings.TrimSuffix(string(p), "\n"))
	return l.b.Write(p)
}

// lines are the log lines holding every one of parts.
func (l *logBuffer) lines(parts ...string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for line := range strings.Lines(l.b.String()) {
		if !slices.ContainsFunc(parts, func(p string) bool { return !strings.Contains(line, p) }) {
			out = append(out, line)
		}
	}
	return out
}

// waitLog waits for a log line holding every one of parts.
func (l *logBuffer) waitLog(t *testing.T, parts ...string) {
	t.Helper()
	eventually(t, 5*time.Second, fmt.Sprintf("a log line with %q", parts), func() bool {
		return len(l.lines(parts...)) > 0
	})
}

// running is a Watcher under test.
type running struct {
	w        *Watcher
	log      *logBuffer
	stop     context.CancelFunc
	done     chan error
	stopOnce sync.Once
}

// startWatcher runs a Watcher of dir until the test ends and waits for it to watch.
func startWatcher(t *testing.T, dir string, handlers map[string]Handler) *running {
	t.Helper()
	lb := &logBuffer{t: t}
	w := New(dir, handlers, slog.New(slog.NewTextHandler(lb, &slog.HandlerOptions{Level: slog.LevelDebug})))
	ctx, stop := context.WithCancel(context.Background())
	r := &running{w: w, log: lb, stop: stop, done: make(chan error, 1)}
	go func() { r.done <- w.Run(ctx) }()
	t.Cleanup(func() { r.shutdown(t) })
	lb.waitLog(t, "watching for plugin sockets")
	return r
}

// shutdown stops the Watcher and waits for Run to return nil; later calls do nothing.
func (r *running) shutdown(t *testing.T) {
	t.Helper()
	r.stopOnce.Do(func() {
		r.stop()
		select {
		case err := <-r.done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Run did not return within 10s of its context ending")
		}
	})
}

// waitRegistered waits for Registered to list want.
func (r *running) waitRegistered(t *testing.T, within time.Duration, want ...Plugin) {
	t.Helper()
	eventually(t, within, fmt.Sprintf("registered plugins %v", want), func() bool {
		return slices.Equal(r.w.Registered(), want)
	})
}

// eventually waits for cond, checking every 5 ms, and fails the test if it does not hold
// within the given time.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// registryDir is a new plugin registration directory for the test.
func registryDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "reg")
	if err := os.Mkdir(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	return dir
}
