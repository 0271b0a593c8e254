package harness

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/unitlet/unitlet/integration/harness/vmagent"
)

// The agent channel end to end on this machine: the relay of vm-run on one side of a Unix
// socket standing in for qemu's chardev, the guest agent on the other.
func TestVMAgentChannel(t *testing.T) {
	dir := t.TempDir()
	chardev := filepath.Join(dir, "serial.sock")
	l, err := net.Listen("unix", chardev)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		_ = vmagent.Serve(c)
	}()
	// A bus socket "in the guest": echoes one line.
	guestSockets := filepath.Join(dir, "guest")
	if err := os.MkdirAll(guestSockets, 0o755); err != nil {
		t.Fatal(err)
	}
	bl, err := net.Listen("unix", filepath.Join(guestSockets, "config.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer bl.Close()
	go func() {
		for {
			c, err := bl.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	spec := vmSpec{
		Chardev: chardev, Agent: filepath.Join(dir, "agent.sock"),
		SocketDir: filepath.Join(dir, "host"), GuestSocketDir: guestSockets, Services: []string{"config"},
	}
	if err := os.MkdirAll(spec.SocketDir, 0o755); err != nil {
		t.Fatal(err)
	}
	r := &vmRelay{spec: spec, log: io.Discard}
	go r.run()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		if _, err := os.Stat(spec.Agent); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the relay never served its agent socket")
		case <-time.After(20 * time.Millisecond):
		}
	}

	var stdout, stderr bytes.Buffer
	err = vmExec(ctx, spec.Agent, []string{"sh", "-c", "read x; echo got $x; echo oops >&2; exit 3"}, strings.NewReader("hello\n"), &stdout, &stderr)
	var ee *vmagent.ExitError
	if !errors.As(err, &ee) || ee.Code != 3 {
		t.Errorf("exit: %v, want exit status 3", err)
	}
	if stdout.String() != "got hello\n" || stderr.String() != "oops\n" {
		t.Errorf("stdout %q, stderr %q; want \"got hello\\n\", \"oops\\n\"", stdout.String(), stderr.String())
	}
	if err := vmExec(ctx, spec.Agent, []string{"/nonexistent"}, nil, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "/nonexistent") {
		t.Errorf("a command that cannot start: %v, want an error naming it", err)
	}

	// Several at once, each its own stream.
	errs := make(chan error, 8)
	for i := 0; i < 8; i++ {
		go func() {
			var out bytes.Buffer
			err := vmExec(ctx, spec.Agent, []string{"echo", "x"}, nil, &out, io.Discard)
			if err == nil && out.String() != "x\n" {
				err = errors.New("output " + out.String())
			}
			errs <- err
		}()
	}
	for i := 0; i < 8; i++ {
		if err := <-errs; err != nil {
			t.Errorf("concurrent exec: %v", err)
		}
	}

	// The forwarded bus socket reaches the guest's.
	c, err := net.Dial("unix", filepath.Join(spec.SocketDir, "config.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("ping\n")); err != nil {
		t.Fatal(err)
	}
	_ = c.(*net.UnixConn).CloseWrite()
	got, err := io.ReadAll(c)
	if err != nil || string(got) != "ping\n" {
		t.Errorf("through the forwarded socket: %q, %v; want the echo \"ping\\n\"", got, err)
	}
}

func TestLoadStackVM(t *testing.T) {
	dir := t.TempDir()
	write := func(body string) string {
		p := filepath.Join(dir, "s.yaml")
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const all = "services: [config, certs, podsync, status, volumes, eviction]"
	s, err := LoadStack(write("name: v\nnodes:\n- {name: a, backend: vm, " + all + "}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if cp := s.ControlPlane; cp.ControllerManagerPort != 10257 || cp.SchedulerPort != 10259 {
		t.Errorf("default ports: controller-manager %d, scheduler %d; want 10257, 10259", cp.ControllerManagerPort, cp.SchedulerPort)
	}
	for body, want := range map[string]string{
		"nodes:\n- {name: a, backend: vm, " + all + "}\n- {name: b, backend: vm, " + all + "}\n": "nodes[1]: a second vm node",
		"runtime: {kind: containerd}\nnodes:\n- {name: a, backend: vm, " + all + "}\n":           "runtime.kind",
		"nodes:\n- {name: a, backend: qemu}\n":                                                   "nodes[0].backend \"qemu\"",
		"controlPlane: {schedulerPort: 20259}\nnodes:\n- {name: a, backend: vm, " + all + "}\n":  "",
		"nodes:\n- {name: a, backend: vm, services: [config, podsync]}\n":                        "nodes[0].services [config podsync]: a vm node installs the unitlet meta-package",
	} {
		checkLoadStack(t, dir, body, want)
	}
}
