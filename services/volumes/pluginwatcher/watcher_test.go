package pluginwatcher

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

const (
	csi = registerapi.CSIPlugin
	dra = registerapi.DRAPlugin
)

func TestCreatesMissingDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "plugins_registry")
	startWatcher(t, dir, nil)
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !fi.IsDir() || fi.Mode().Perm() != 0o750 {
		t.Errorf("%s: mode %v, want a directory with mode 0750", dir, fi.Mode())
	}
}

func TestRegistersSocketPresentAtStart(t *testing.T) {
	dir := registryDir(t)
	sock := filepath.Join(dir, "a.sock")
	p := startPlugin(t, sock, csi, "a.csi.example.com")
	h := &fakeHandler{}

	r := startWatcher(t, dir, map[string]Handler{csi: h})

	r.waitRegistered(t, 5*time.Second, Plugin{Type: csi, Name: "a.csi.example.com", Endpoint: sock, SocketPath: sock})
	if s := p.lastStatus(); s == nil || !s.PluginRegistered || s.Error != "" {
		t.Errorf("plugin told %v, want registered without error", s)
	}
	want := []string{"validate a.csi.example.com " + sock, "register a.csi.example.com " + sock}
	if got := h.Calls(); !slices.Equal(got, want) {
		t.Errorf("handler calls %q, want %q", got, want)
	}
}

func TestRegistersNewSocketWithinTwoSeconds(t *testing.T) {
	dir := registryDir(t)
	csiHandler, draHandler := &fakeHandler{}, &fakeHandler{}
	r := startWatcher(t, dir, map[string]Handler{csi: csiHandler, dra: draHandler})

	// A plugin giving a separate service endpoint, straight in the directory.
	sock := filepath.Join(dir, "b-reg.sock")
	p := newPlugin(t, sock, csi, "b.csi.example.com")
	p.info.Endpoint = "/var/lib/kubelet/plugins/b/csi.sock"
	p.serve(t)
	r.waitRegistered(t, 2*time.Second, Plugin{Type: csi, Name: "b.csi.example.com", Endpoint: p.info.Endpoint, SocketPath: sock})
	p.waitStatus(t, time.Second, true)

	// A plugin of another type in a subdirectory made after the start.
	sub := filepath.Join(dir, "dra")
	if err := os.Mkdir(sub, 0o750); err != nil {
		t.Fatal(err)
	}
	draSock := filepath.Join(sub, "gpu.sock")
	startPlugin(t, draSock, dra, "gpu.example.com")
	r.waitRegistered(t, 2*time.Second,
		Plugin{Type: csi, Name: "b.csi.example.com", Endpoint: p.info.Endpoint, SocketPath: sock},
		Plugin{Type: dra, Name: "gpu.example.com", Endpoint: draSock, SocketPath: draSock})
	if got, want := draHandler.Calls(), []string{"validate gpu.example.com " + draSock, "register gpu.example.com " + draSock}; !slices.Equal(got, want) {
		t.Errorf("DRA handler calls %q, want %q", got, want)
	}
	if failed := r.log.lines("plugin registration failed"); len(failed) != 0 {
		t.Errorf("a plugin created while watching counted as failed: %q", failed)
	}
}

func TestRefusesUnknownType(t *testing.T) {
	dir := registryDir(t)
	sock := filepath.Join(dir, "dev.sock")
	p := startPlugin(t, sock, registerapi.DevicePlugin, "example.com/dev")
	h := &fakeHandler{}
	r := startWatcher(t, dir, map[string]Handler{csi: h, dra: h})

	s := p.waitStatus(t, 5*time.Second, false)
	for _, want := range []string{`type "DevicePlugin"`, sock, "CSIPlugin, DRAPlugin"} {
		if !strings.Contains(s.Error, want) {
			t.Errorf("plugin told %q, want it to mention %s", s.Error, want)
		}
	}
	if calls := h.Calls(); len(calls) != 0 {
		t.Errorf("handler called %q for a plugin of an unknown type", calls)
	}
	if reg := r.w.Registered(); len(reg) != 0 {
		t.Errorf("Registered() = %v, want nothing", reg)
	}
}

func TestRefusesPluginFailingValidation(t *testing.T) {
	dir := registryDir(t)
	sock := filepath.Join(dir, "old.sock")
	p := startPlugin(t, sock, csi, "old.csi.example.com")
	h := &fakeHandler{validate: func(string) error { return errors.New("none of the versions [0.3.0] is supported") }}
	r := startWatcher(t, dir, map[string]Handler{csi: h})

	s := p.waitStatus(t, 5*time.Second, false)
	if !strings.Contains(s.Error, "none of the versions [0.3.0] is supported") || !strings.Contains(s.Error, "old.csi.example.com") {
		t.Errorf("plugin told %q, want the plugin's name and the validation error", s.Error)
	}
	for _, c := range h.Calls() {
		if !strings.HasPrefix(c, "validate ") {
			t.Errorf("handler call %q after a failed validation", c)
		}
	}
	if reg := r.w.Registered(); len(reg) != 0 {
		t.Errorf("Registered() = %v, want nothing", reg)
	}
}

func TestRefusesPluginFailingRegistration(t *testing.T) {
	dir := registryDir(t)
	sock := filepath.Join(dir, "bad.sock")
	p := startPlugin(t, sock, csi, "bad.csi.example.com")
	h := &fakeHandler{register: func(string) error { return errors.New("NodeGetInfo: deadline exceeded") }}
	r := startWatcher(t, dir, map[string]Handler{csi: h})

	s := p.waitStatus(t, 5*time.Second, false)
	if !strings.Contains(s.Error, "NodeGetInfo: deadline exceeded") {
		t.Errorf("plugin told %q, want the registration error", s.Error)
	}
	if reg := r.w.Registered(); len(reg) != 0 {
		t.Errorf("Registered() = %v, want nothing", reg)
	}
}

func TestDeregistersRemovedSocket(t *testing.T) {
	for _, tc := range []struct {
		name string
		// sub is the socket's directory under the registration directory.
		sub    string
		remove func(t *testing.T, dir, sock string)
	}{
		{"removed", "", func(t *testing.T, _, sock string) {
			if err := os.Remove(sock); err != nil {
				t.Fatal(err)
			}
		}},
		{"renamed away", "", func(t *testing.T, _, sock string) {
			if err := os.Rename(sock, filepath.Join(t.TempDir(), "moved.sock")); err != nil {
				t.Fatal(err)
			}
		}},
		{"replaced by a regular file", "", func(t *testing.T, _, sock string) {
			staged := filepath.Join(t.TempDir(), "file")
			if err := os.WriteFile(staged, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(staged, sock); err != nil {
				t.Fatal(err)
			}
		}},
		{"directory removed", "sub", func(t *testing.T, dir, _ string) {
			if err := os.RemoveAll(filepath.Join(dir, "sub")); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := registryDir(t)
			sockDir := filepath.Join(dir, tc.sub)
			if err := os.MkdirAll(sockDir, 0o750); err != nil {
				t.Fatal(err)
			}
			sock := filepath.Join(sockDir, "gone.sock")
			startPlugin(t, sock, csi, "gone.csi.example.com")
			h := &fakeHandler{}
			r := startWatcher(t, dir, map[string]Handler{csi: h})
			r.waitRegistered(t, 5*time.Second, Plugin{Type: csi, Name: "gone.csi.example.com", Endpoint: sock, SocketPath: sock})

			tc.remove(t, dir, sock)

			r.waitRegistered(t, 2*time.Second)
			want := []string{
				"validate gone.csi.example.com " + sock,
				"register gone.csi.example.com " + sock,
				"deregister gone.csi.example.com " + sock,
			}
			eventually(t, 2*time.Second, "the deregistration", func() bool { return slices.Equal(h.Calls(), want) })
		})
	}
}

func TestReportsRemovedDirectory(t *testing.T) {
	dir := registryDir(t)
	r := startWatcher(t, dir, nil)

	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}

	r.log.waitLog(t, "plugin registration directory removed", "dir="+dir+"\n")
}

func TestRegistersRecreatedSocketAgain(t *testing.T) {
	for _, tc := range []struct {
		name     string
		recreate func(t *testing.T, sock string) *fakePlugin
	}{
		{"removed and created", func(t *testing.T, sock string) *fakePlugin {
			if err := os.Remove(sock); err != nil {
				t.Fatal(err)
			}
			return startPlugin(t, sock, csi, "re.csi.example.com")
		}},
		{"renamed over", func(t *testing.T, sock string) *fakePlugin {
			staged := filepath.Join(t.TempDir(), "new.sock")
			p := startPlugin(t, staged, csi, "re.csi.example.com")
			if err := os.Rename(staged, sock); err != nil {
				t.Fatal(err)
			}
			return p
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := registryDir(t)
			sock := filepath.Join(dir, "re.sock")
			startPlugin(t, sock, csi, "re.csi.example.com")
			h := &fakeHandler{}
			r := startWatcher(t, dir, map[string]Handler{csi: h})
			r.waitRegistered(t, 5*time.Second, Plugin{Type: csi, Name: "re.csi.example.com", Endpoint: sock, SocketPath: sock})

			p := tc.recreate(t, sock)

			p.waitStatus(t, 2*time.Second, true)
			r.waitRegistered(t, time.Second, Plugin{Type: csi, Name: "re.csi.example.com", Endpoint: sock, SocketPath: sock})
			// The old plugin goes before the new one is validated, or a CSI handler would
			// refuse the new one as a duplicate.
			v, reg, dereg := "validate re.csi.example.com "+sock, "register re.csi.example.com "+sock, "deregister re.csi.example.com "+sock
			if got, want := h.Calls(), []string{v, reg, dereg, v, reg}; !slices.Equal(got, want) {
				t.Errorf("handler calls %q, want %q", got, want)
			}
		})
	}
}

func TestPluginFromAnotherSocketReplacesSameName(t *testing.T) {
	dir := registryDir(t)
	oldSock, newSock := filepath.Join(dir, "v1.sock"), filepath.Join(dir, "v2.sock")
	startPlugin(t, oldSock, csi, "x.csi.example.com")
	h := &fakeHandler{}
	r := startWatcher(t, dir, map[string]Handler{csi: h})
	r.waitRegistered(t, 5*time.Second, Plugin{Type: csi, Name: "x.csi.example.com", Endpoint: oldSock, SocketPath: oldSock})

	p := startPlugin(t, newSock, csi, "x.csi.example.com")
	p.waitStatus(t, 2*time.Second, true)
	r.waitRegistered(t, time.Second, Plugin{Type: csi, Name: "x.csi.example.com", Endpoint: newSock, SocketPath: newSock})

	// The old socket's removal leaves the new plugin alone; the new one's removes it.
	if err := os.Remove(oldSock); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(newSock); err != nil {
		t.Fatal(err)
	}
	r.waitRegistered(t, 2*time.Second)
	want := []string{
		"validate x.csi.example.com " + oldSock,
		"register x.csi.example.com " + oldSock,
		"validate x.csi.example.com " + newSock,
		"deregister x.csi.example.com " + oldSock,
		"register x.csi.example.com " + newSock,
		"deregister x.csi.example.com " + newSock,
	}
	eventually(t, 2*time.Second, "the last deregistration", func() bool { return len(h.Calls()) >= len(want) })
	if got := h.Calls(); !slices.Equal(got, want) {
		t.Errorf("handler calls %q, want %q", got, want)
	}
}

func TestRefusesUnsafeFilesWithoutDialling(t *testing.T) {
	dir := registryDir(t)
	outside := t.TempDir()
	h := &fakeHandler{}
	var refused []*fakePlugin

	// Present at the start: a regular file, a socket not owned by root, a symbolic link to
	// a socket outside and a symbolic link to a directory outside holding a socket.
	file := filepath.Join(dir, "file.sock")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	nobody := filepath.Join(dir, "nobody.sock")
	refused = append(refused, startPlugin(t, nobody, csi, "nobody.csi.example.com"))
	if err := os.Chown(nobody, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(outside, "target.sock")
	refused = append(refused, startPlugin(t, target, csi, "target.csi.example.com"))
	link := filepath.Join(dir, "link.sock")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	linkDir := filepath.Join(dir, "linkdir")
	if err := os.Symlink(outside, linkDir); err != nil {
		t.Fatal(err)
	}

	r := startWatcher(t, dir, map[string]Handler{csi: h})

	// Moved in while running, so that they are whole when they appear.
	lateFile := filepath.Join(dir, "late-file.sock")
	staged := filepath.Join(outside, "late-file")
	if err := os.WriteFile(staged, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(staged, lateFile); err != nil {
		t.Fatal(err)
	}
	lateNobody := filepath.Join(dir, "late-nobody.sock")
	staged = filepath.Join(outside, "late-nobody.sock")
	refused = append(refused, startPlugin(t, staged, csi, "late-nobody.csi.example.com"))
	if err := os.Chown(staged, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(staged, lateNobody); err != nil {
		t.Fatal(err)
	}

	for path, reason := range map[string]string{
		file:       "not a unix socket",
		nobody:     "owned by uid 65534, not root",
		link:       "a symbolic link",
		linkDir:    "a symbolic link",
		lateFile:   "not a unix socket",
		lateNobody: "owned by uid 65534, not root",
	} {
		r.log.waitLog(t, "refusing plugin socket", "path="+path+" ", reason)
	}
	good := filepath.Join(dir, "good.sock")
	startPlugin(t, good, csi, "good.csi.example.com")
	r.waitRegistered(t, 2*time.Second, Plugin{Type: csi, Name: "good.csi.example.com", Endpoint: good, SocketPath: good})
	for _, p := range refused {
		if n := p.conns.Load(); n != 0 {
			t.Errorf("refused plugin %s was dialled %d times", p.info.Name, n)
		}
	}
}

func TestHungPluginDoesNotDelayOthers(t *testing.T) {
	dir := registryDir(t)
	// One plugin never answers GetInfo; the handler never returns from validating another.
	hungInfo := newPlugin(t, filepath.Join(dir, "hung-info.sock"), csi, "hung-info.csi.example.com")
	hungInfo.getInfo = func(ctx context.Context, _ int) error {
		<-ctx.Done()
		return ctx.Err()
	}
	hungInfo.serve(t)
	startPlugin(t, filepath.Join(dir, "hung-validate.sock"), csi, "hung-validate.csi.example.com")
	release := make(chan struct{})
	var hungInfoCallsAtRegister atomic.Int32
	h := &fakeHandler{
		validate: func(name string) error {
			if name == "hung-validate.csi.example.com" {
				<-release
			}
			return nil
		},
		register: func(name string) error {
			if name == "good.csi.example.com" {
				hungInfoCallsAtRegister.Store(hungInfo.inGetInfo.Load())
			}
			return nil
		},
	}
	r := startWatcher(t, dir, map[string]Handler{csi: h})
	t.Cleanup(func() { close(release) }) // Runs before the Watcher is stopped.
	eventually(t, 5*time.Second, "both hung calls under way", func() bool {
		return hungInfo.inGetInfo.Load() == 1 && slices.ContainsFunc(h.Calls(), func(c string) bool {
			return strings.HasPrefix(c, "validate hung-validate.csi.example.com ")
		})
	})

	good := filepath.Join(dir, "good.sock")
	startPlugin(t, good, csi, "good.csi.example.com")

	r.waitRegistered(t, 2*time.Second, Plugin{Type: csi, Name: "good.csi.example.com", Endpoint: good, SocketPath: good})
	if n := hungInfoCallsAtRegister.Load(); n != 1 {
		t.Errorf("%d GetInfo calls to the hung plugin under way when the other registered, want 1 (the registration waited for it)", n)
	}
}

func TestIgnoresHiddenFiles(t *testing.T) {
	dir := registryDir(t)
	hiddenDir := filepath.Join(dir, ".old")
	if err := os.Mkdir(hiddenDir, 0o750); err != nil {
		t.Fatal(err)
	}
	hidden := []*fakePlugin{
		startPlugin(t, filepath.Join(dir, ".a.sock"), csi, "a.csi.example.com"),
		startPlugin(t, filepath.Join(hiddenDir, "b.sock"), csi, "b.csi.example.com"),
	}
	h := &fakeHandler{}
	r := startWatcher(t, dir, map[string]Handler{csi: h})

	hidden = append(hidden, startPlugin(t, filepath.Join(dir, ".c.sock"), csi, "c.csi.example.com"))
	lateDir := filepath.Join(dir, ".late")
	if err := os.Mkdir(lateDir, 0o750); err != nil {
		t.Fatal(err)
	}
	hidden = append(hidden, startPlugin(t, filepath.Join(lateDir, "d.sock"), csi, "d.csi.example.com"))
	for _, path := range []string{filepath.Join(dir, ".a.sock"), hiddenDir, filepath.Join(dir, ".c.sock"), lateDir} {
		r.log.waitLog(t, "ignoring hidden file", "path="+path+"\n")
	}
	good := filepath.Join(dir, "good.sock")
	startPlugin(t, good, csi, "good.csi.example.com")

	r.waitRegistered(t, 2*time.Second, Plugin{Type: csi, Name: "good.csi.example.com", Endpoint: good, SocketPath: good})
	for _, p := range hidden {
		if n := p.conns.Load(); n != 0 {
			t.Errorf("hidden plugin socket %s was dialled %d times", p.path, n)
		}
	}
}

func TestRetriesFailedGetInfo(t *testing.T) {
	dir := registryDir(t)
	sock := filepath.Join(dir, "slow.sock")
	p := newPlugin(t, sock, csi, "slow.csi.example.com")
	p.getInfo = func(_ context.Context, n int) error {
		if n == 1 {
			return status.Error(codes.Unavailable, "driver still starting")
		}
		return nil
	}
	p.serve(t)
	r := startWatcher(t, dir, map[string]Handler{csi: &fakeHandler{}})

	// The first retry comes after initialBackoff (500 ms).
	r.waitRegistered(t, 2*time.Second, Plugin{Type: csi, Name: "slow.csi.example.com", Endpoint: sock, SocketPath: sock})
	if n := p.getInfoCalls.Load(); n != 2 {
		t.Errorf("%d GetInfo calls, want 2", n)
	}
	if len(r.log.lines("plugin registration failed; trying again", "driver still starting", "retry_in=500ms")) != 1 {
		t.Error("no log line for the failed attempt with its error and the wait before the next")
	}
}

func TestRetriesRefusedConnection(t *testing.T) {
	dir := registryDir(t)
	sock := filepath.Join(dir, "dead.sock")
	// A socket file nobody listens on any more, as a crashed plugin leaves behind.
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	// Old enough not to be taken for a plugin about to listen.
	bound := time.Now().Add(-time.Minute)
	if err := os.Chtimes(sock, bound, bound); err != nil {
		t.Fatal(err)
	}
	r := startWatcher(t, dir, map[string]Handler{csi: &fakeHandler{}})

	eventually(t, 2*time.Second, "a second refused attempt", func() bool {
		return len(r.log.lines("plugin registration failed; trying again", "socket="+sock+" ", "connection refused")) >= 2
	})
}

func TestWaitsForNewSocketToListen(t *testing.T) {
	dir := registryDir(t)
	r := startWatcher(t, dir, map[string]Handler{csi: &fakeHandler{}})

	// The socket file appears at bind; the plugin listens a little later.
	sock := filepath.Join(dir, "late.sock")
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), sock)
	defer f.Close()
	if err := syscall.Bind(fd, &syscall.SockaddrUnix{Name: sock}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // The watcher finds the socket and is refused meanwhile.
	if err := syscall.Listen(fd, 8); err != nil {
		t.Fatal(err)
	}
	l, err := net.FileListener(f)
	if err != nil {
		t.Fatal(err)
	}
	p := newPlugin(t, sock, csi, "late.csi.example.com")
	srv := grpc.NewServer()
	registerapi.RegisterRegistrationServer(srv, p)
	go srv.Serve(l)
	t.Cleanup(srv.Stop)

	r.waitRegistered(t, 2*time.Second, Plugin{Type: csi, Name: "late.csi.example.com", Endpoint: sock, SocketPath: sock})
	if failed := r.log.lines("plugin registration failed"); len(failed) != 0 {
		t.Errorf("a plugin about to listen counted as failed: %q", failed)
	}
}

func TestStopLeavesPluginsRegistered(t *testing.T) {
	dir := registryDir(t)
	sock := filepath.Join(dir, "keep.sock")
	p := startPlugin(t, sock, csi, "keep.csi.example.com")
	want := Plugin{Type: csi, Name: "keep.csi.example.com", Endpoint: sock, SocketPath: sock}
	h := &fakeHandler{}
	r := startWatcher(t, dir, map[string]Handler{csi: h})
	r.waitRegistered(t, 5*time.Second, want)

	r.shutdown(t)

	if got, want := h.Calls(), []string{"validate keep.csi.example.com " + sock, "register keep.csi.example.com " + sock}; !slices.Equal(got, want) {
		t.Errorf("handler calls %q after stopping, want %q", got, want)
	}
	// The next start finds the socket again.
	h2 := &fakeHandler{}
	r2 := startWatcher(t, dir, map[string]Handler{csi: h2})
	r2.waitRegistered(t, 5*time.Second, want)
	p.mu.Lock()
	defer p.mu.Unlock()
	if got := len(p.statuses); got != 2 {
		t.Errorf("plugin told %d registration statuses, want one per start", got)
	}
}
