package harness

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/unitlet/unitlet/shared/bus"
)

// Supervisor runs an nspawn node's host service (HostServices) the way its units run it
// on a real node, for tests that kill it many times: the socket unit's part, holding the
// bus socket so that calls made while no process serves it wait in the socket's queue,
// and the service unit's part, Restart=always with RestartSec=1, passing the socket in
// (LISTEN_FDS, FileDescriptorName=grpc). The harness's own host processes bind their
// sockets themselves and are not started again when they die.
type Supervisor struct {
	name   string
	cancel context.CancelFunc
	done   chan struct{}
	ln     *net.UnixListener
	file   *os.File

	mu     sync.Mutex
	cmd    *exec.Cmd
	starts int
	err    error
}

// restartDelay is how long a Supervisor waits before starting a dead service again, as the
// units' RestartSec=1.
const restartDelay = time.Second

// SuperviseHostService stops the harness's process of node's host service svc and runs it
// under a Supervisor until Stop; it returns once the first process answers on the socket.
func (h *Harness) SuperviseHostService(ctx context.Context, node, svc string) (*Supervisor, error) {
	n, ok := h.node(node)
	if !ok || h.serviceBackend(node, svc) != "host" {
		return nil, fmt.Errorf("supervise unitlet-%s on %s: not one of the node's hostServices", svc, node)
	}
	if err := h.StopService(node, svc); err != nil {
		return nil, err
	}
	path := bus.SocketPath(h.NodeSocketDir(node), svc)
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("supervise unitlet-%s on %s: %w", svc, node, err)
	}
	if err := os.Chmod(path, 0o660); err != nil {
		ln.Close()
		return nil, err
	}
	f, err := ln.File()
	if err != nil {
		ln.Close()
		return nil, err
	}
	logf, err := os.OpenFile(filepath.Join(h.paths.logs, node+"-unitlet-"+svc+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		ln.Close()
		f.Close()
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	s := &Supervisor{name: node + "/unitlet-" + svc, cancel: cancel, done: make(chan struct{}), ln: ln, file: f}
	env := append(os.Environ(), h.hostServiceEnv(n, svc)...)
	env = append(env, "LISTEN_FDS=1", "LISTEN_FDNAMES=grpc")
	bin := filepath.Join(h.binDir(), "unitlet-"+svc)
	go func() {
		defer close(s.done)
		defer logf.Close()
		for runCtx.Err() == nil {
			// LISTEN_PID must be the service's own pid: the shell sets it and execs.
			cmd := exec.Command("/bin/sh", "-c", `LISTEN_PID=$$ exec "$0"`, bin)
			cmd.Env, cmd.Stdout, cmd.Stderr = env, logf, logf
			cmd.ExtraFiles = []*os.File{f}
			// It dies with the test process, as a unit's process with its manager.
			cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL}
			s.mu.Lock()
			err := cmd.Start()
			if err == nil {
				s.cmd = cmd
				s.starts++
			} else {
				s.err = err
			}
			s.mu.Unlock()
			if err != nil {
				return
			}
			_ = cmd.Wait()
			select {
			case <-runCtx.Done():
			case <-time.After(restartDelay):
			}
		}
	}()
	ready, stop := context.WithTimeout(ctx, time.Minute)
	defer stop()
	for {
		err := serving(ready, h.NodeSocketDir(node), svc)
		if err == nil {
			return s, nil
		}
		if ready.Err() != nil {
			_ = s.Stop()
			return nil, fmt.Errorf("supervised unitlet-%s on %s does not answer: %w", svc, node, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// PID is the pid of the service's current process (0 before the first start).
func (s *Supervisor) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Starts is how many times the service was started.
func (s *Supervisor) Starts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.starts
}

// Stop ends the supervision: the process gets SIGTERM (SIGKILL after 20 s, the units'
// TimeoutStopSec), and the socket is closed. StartService brings the harness's own
// process back.
func (s *Supervisor) Stop() error {
	s.cancel()
	s.mu.Lock()
	cmd := s.cmd
	s.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-s.done
		}
	} else {
		<-s.done
	}
	s.file.Close()
	s.ln.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return fmt.Errorf("%s: %w", s.name, s.err)
	}
	return nil
}

// KillComponent sends sig to one of the stack's own processes (etcd, kube-apiserver,
// containerd, ...) and waits for it to end; one still running grace after a signal other
// than SIGKILL gets SIGKILL, as systemd does after TimeoutStopSec (the API server drains
// its requests for up to a minute). StartComponent starts it again.
func (h *Harness) KillComponent(name string, sig syscall.Signal, grace time.Duration) error {
	h.hold(name, true)
	p := h.loadState().Procs[name]
	if !p.alive() {
		return fmt.Errorf("kill %s: not running", name)
	}
	if err := syscall.Kill(p.PID, sig); err != nil {
		return fmt.Errorf("kill %s (pid %d): %w", name, p.PID, err)
	}
	if sig == syscall.SIGKILL {
		grace = 30 * time.Second
	}
	for deadline := time.Now().Add(grace); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if !p.alive() {
			return nil
		}
	}
	if sig != syscall.SIGKILL {
		fmt.Fprintf(h.out, "%s (pid %d) still runs %s after %v: SIGKILL\n", name, p.PID, grace, sig)
		return h.KillComponent(name, syscall.SIGKILL, 0)
	}
	return fmt.Errorf("%s (pid %d) still runs 30 s after SIGKILL", name, p.PID)
}

// StartComponent starts one of the stack's control-plane or runtime processes again unless
// it runs, and waits until it is ready.
func (h *Harness) StartComponent(ctx context.Context, name string) error {
	h.hold(name, false)
	files, err := h.makePKI()
	if err != nil {
		return err
	}
	cs := h.controlPlane(files)
	if h.stack.Runtime.Kind == "containerd" {
		cs = append(cs, h.containerd())
	}
	for _, c := range cs {
		if c.name == name {
			return h.ensure(ctx, h.loadState(), c)
		}
	}
	return fmt.Errorf("start %s: not a control-plane or runtime process of stack %s", name, h.stack.Name)
}

func (h *Harness) hold(name string, held bool) {
	h.heldMu.Lock()
	defer h.heldMu.Unlock()
	if h.held == nil {
		h.held = map[string]bool{}
	}
	h.held[name] = held
}

func (h *Harness) isHeld(name string) bool {
	h.heldMu.Lock()
	defer h.heldMu.Unlock()
	return h.held[name]
}

// runtimeRestartDelay is containerd.service's RestartSec.
const runtimeRestartDelay = 5 * time.Second

// KeepRuntime does for the stack's containerd what containerd.service (Restart=always,
// RestartSec=5) does on a node: one that exits when no test stopped it (KillComponent) is
// started again 5 s later. Each such restart is printed with the end of containerd's log.
// The returned function stops keeping it and lists the restarts. Debian's containerd 1.6
// can die of its own races ("concurrent map iteration and map write" in its sandbox
// store): on a node systemd starts it again, and without this every later test of the
// package would fail against a node whose runtime is gone.
func (h *Harness) KeepRuntime() (stop func() []string) {
	if h.stack.Runtime.Kind != "containerd" {
		return func() []string { return nil }
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var restarts []string
	name := h.containerd().name
	go func() {
		defer close(done)
		var deadSince time.Time
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			p := h.loadState().Procs[name]
			if p == nil || p.alive() || h.isHeld(name) {
				deadSince = time.Time{}
				continue
			}
			if deadSince.IsZero() {
				deadSince = time.Now()
			}
			if time.Since(deadSince) < runtimeRestartDelay {
				continue
			}
			deadSince = time.Time{}
			what := fmt.Sprintf("%s %s (pid %d) exited though no test stopped it; started again, as containerd.service's Restart=always would. The end of its log (%s):\n%s",
				time.Now().Format("15:04:05"), name, p.PID, p.Log, tail(p.Log, 12))
			restarts = append(restarts, what)
			fmt.Fprintln(h.out, "harness: "+what)
			if err := h.StartComponent(ctx, name); err != nil && ctx.Err() == nil {
				fmt.Fprintf(h.out, "harness: start %s again: %v\n", name, err)
			}
		}
	}()
	return func() []string {
		cancel()
		<-done
		return restarts
	}
}

// ComponentPID is the PID of one of the stack's own processes, 0 when it does not run.
func (h *Harness) ComponentPID(name string) int {
	if p := h.loadState().Procs[name]; p.alive() {
		return p.PID
	}
	return 0
}
