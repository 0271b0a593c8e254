package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/yamux"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/unitlet/unitlet/integration/harness/vmagent"
)

// The vm backend boots a node as a virtual machine with its own kernel: qemu-system-x86_64
// under TCG (these machines have no KVM), Debian's kernel and initrd from the vm tree, the
// node's disk image (vmimage.go) with snapshot=on, cgroup v2. Unlike an nspawn machine it
// enforces each unit's MemoryMax=, CPUQuota=, TasksMax=, and it has its own containerd,
// mounts and network, so every unitlet service runs inside it.
//
//   - Network: qemu's user mode. The guest is 10.0.2.15 and reaches the host's 127.0.0.1 as
//     10.0.2.2: its kubeconfig names https://10.0.2.2:<apiServerPort>, which the API
//     server's certificate carries (pki.go). Nothing on the host listens for the guest.
//   - The agent channel: a virtio-serial port (unitlet.agent) multiplexed with yamux
//     (package vmagent). `unitlet-harness vm-run`, the node's component, starts qemu and
//     holds the host's end: it serves <node>/agent.sock (each connection a stream: exec a
//     command in the guest) and, in NodeSocketDir, one socket per unitlet service whose
//     connections reach that service's bus socket in the guest. So Exec, serving, bus.Dial
//     and unitletctl work on a vm node as on the other backends.
//   - A 9p share (<node>/share, read-only) carries what changes with each stack: the
//     CA, the node's credentials, the test images (imported into the guest's containerd
//     at boot, before unitlet starts: no registry is reachable).
//   - Logs: the serial console (the services' output is copied to it) is the component's log.
//   - Ready: the agent answers, the guest's systemd is "running" (degraded fails with the
//     failed units named) and every service answers its health check. `up` then waits for
//     the node's Ready condition and for a first pod created at boot, and prints both
//     times from the start of qemu.

// vmBootTimeout bounds a vm node's boot to ready: emulation is slow, and a cold guest
// starts containerd, imports the images and starts five Go services.
const vmBootTimeout = 8 * time.Minute

// vmSpec is what `unitlet-harness vm-run` runs: qemu's command line and the host's ends of
// the agent channel.
type vmSpec struct {
	Qemu []string `json:"qemu"`
	// Chardev is the Unix socket qemu serves the virtio-serial port on.
	Chardev string `json:"chardev"`
	// Agent is the socket whose connections become exec streams.
	Agent string `json:"agent"`
	// SocketDir gets one socket per service, forwarded to <GuestSocketDir>/<svc>.sock.
	SocketDir      string   `json:"socketDir"`
	GuestSocketDir string   `json:"guestSocketDir"`
	Services       []string `json:"services"`
}

// vmAgentSocket is node's agent socket on the host.
func (h *Harness) vmAgentSocket(node string) string {
	return filepath.Join(h.nodeDir(node), "agent.sock")
}

// vmComponent is a node booted as a qemu virtual machine.
func (h *Harness) vmComponent(n Node, f *controlPlaneFiles) component {
	return component{
		name:   n.Name + "/vm",
		within: vmBootTimeout,
		start: func() (*proc, error) {
			if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
				return nil, errors.New("qemu-system-x86_64 is missing: apt-get install -y qemu-system-x86 (or make prereqs)")
			}
			img, err := h.ensureVMImage(n)
			if err != nil {
				return nil, fmt.Errorf("the disk image of %s: %w", n.Name, err)
			}
			kernel, initrd, err := vmKernel(VMTreeDir())
			if err != nil {
				return nil, err
			}
			if err := os.MkdirAll(h.NodeSocketDir(n.Name), 0o755); err != nil {
				return nil, err
			}
			if err := h.vmShareFiles(n, f); err != nil {
				return nil, fmt.Errorf("the share of %s: %w", n.Name, err)
			}
			spec := vmSpec{
				Chardev:        filepath.Join(h.nodeDir(n.Name), "serial.sock"),
				Agent:          h.vmAgentSocket(n.Name),
				SocketDir:      h.NodeSocketDir(n.Name),
				GuestSocketDir: "/run/unitlet",
				Services:       n.Services,
			}
			spec.Qemu = []string{
				// TCG: these machines have no KVM. One vCPU: emulation takes a host core.
				"-name", n.Name, "-machine", "q35", "-accel", "tcg", "-m", "2048", "-smp", "1",
				"-display", "none", "-no-reboot", "-serial", "stdio", "-monitor", "none",
				"-kernel", kernel, "-initrd", initrd,
				// hugepages=8: a pool of 2 MiB pages for the HugePages emptyDir test.
				"-append", "root=/dev/vda rw systemd.unified_cgroup_hierarchy=1 console=ttyS0 panic=-1 systemd.show_status=1 hugepages=8 systemd.hostname=" + n.Name,
				"-drive", "file=" + img + ",format=raw,if=virtio,snapshot=on",
				"-netdev", "user,id=net0", "-device", "virtio-net-pci,netdev=net0",
				"-virtfs", "local,path=" + h.vmShareDir(n.Name) + ",mount_tag=" + vmShareTag + ",security_model=none,readonly=on",
				"-chardev", "socket,id=agent,path=" + spec.Chardev + ",server=on,wait=off",
				"-device", "virtio-serial-pci", "-device", "virtserialport,chardev=agent,name=unitlet.agent",
			}
			specFile := filepath.Join(h.nodeDir(n.Name), "vm.json")
			b, err := json.MarshalIndent(spec, "", "  ")
			if err != nil {
				return nil, err
			}
			if err := os.WriteFile(specFile, b, 0o644); err != nil {
				return nil, err
			}
			_ = os.Remove(filepath.Join(h.nodeDir(n.Name), "boot-times"))
			if err := h.createFirstPod(n); err != nil {
				return nil, err
			}
			p, err := startProcess(h.paths.logs, n.Name+"-vm", nil, filepath.Join(h.binDir(), "unitlet-harness"), "vm-run", specFile)
			if err != nil {
				return nil, err
			}
			return p, os.WriteFile(h.vmBootFile(n.Name), []byte(time.Now().Format(time.RFC3339Nano)), 0o644)
		},
		ready: func(ctx context.Context) error {
			out, err := h.vmRun(ctx, n.Name, "systemctl", "is-system-running")
			switch st := strings.TrimSpace(out); {
			case st == "running":
			case st == "degraded":
				failed, _ := h.vmRun(ctx, n.Name, "systemctl", "--failed", "--plain", "--no-legend")
				return fmt.Errorf("the guest's systemd is degraded; failed units:\n%s", failed)
			case err != nil && st == "":
				return err
			default:
				return fmt.Errorf("the guest's systemd is %q", st)
			}
			for _, svc := range n.Services {
				if err := serving(ctx, h.NodeSocketDir(n.Name), svc); err != nil {
					return fmt.Errorf("unitlet-%s: %w", svc, err)
				}
			}
			return nil
		},
	}
}

// vmBootFile records when the vm's qemu started.
func (h *Harness) vmBootFile(node string) string { return filepath.Join(h.nodeDir(node), "booted-at") }

// VMBootTime is when node's qemu started.
func (h *Harness) VMBootTime(node string) (time.Time, error) {
	b, err := os.ReadFile(h.vmBootFile(node))
	if err != nil {
		return time.Time{}, fmt.Errorf("node %s has no boot time: %w", node, err)
	}
	return time.Parse(time.RFC3339Nano, strings.TrimSpace(string(b)))
}

// vmRun runs a command in node's guest through the agent and returns its output (standard
// output and error together).
func (h *Harness) vmRun(ctx context.Context, node string, args ...string) (string, error) {
	var out bytes.Buffer
	err := vmExec(ctx, h.vmAgentSocket(node), args, nil, &out, &out)
	return out.String(), err
}

// vmExec runs args in the guest whose agent socket is agent.
func vmExec(ctx context.Context, agent string, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", agent)
	if err != nil {
		return fmt.Errorf("the vm's agent: %w", err)
	}
	conn := c.(*net.UnixConn)
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	return vmagent.Exec(conn, args, stdin, stdout, stderr)
}

// VMExec is `unitlet-harness vm-exec AGENT -- CMD...`: the command runs in the guest, with
// this process's standard input and outputs; it returns the exit code.
func VMExec(agent string, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	err := vmExec(context.Background(), agent, args, stdin, stdout, stderr)
	var ee *vmagent.ExitError
	switch {
	case errors.As(err, &ee):
		return ee.Code
	case err != nil:
		fmt.Fprintln(stderr, "unitlet-harness vm-exec:", err)
		return 255
	}
	return 0
}

// execInVM is Exec for a vm node: the command runs in the guest, through this binary's
// vm-exec (the harness's own build in the stack's bin dir).
func (h *Harness) execInVM(node string, args []string) *exec.Cmd {
	return exec.Command(filepath.Join(h.binDir(), "unitlet-harness"), append([]string{"vm-exec", h.vmAgentSocket(node), "--"}, args...)...)
}

// RunVM is `unitlet-harness vm-run SPEC`: it runs qemu as the spec says and serves the
// host's ends of the agent channel until qemu exits or this process is told to stop.
func RunVM(specFile string, stderr io.Writer) error {
	b, err := os.ReadFile(specFile)
	if err != nil {
		return err
	}
	var spec vmSpec
	if err := json.Unmarshal(b, &spec); err != nil {
		return fmt.Errorf("%s: %w", specFile, err)
	}
	_ = os.Remove(spec.Chardev)
	qemu := exec.Command("qemu-system-x86_64", spec.Qemu...)
	qemu.Stdout, qemu.Stderr = os.Stdout, os.Stderr
	if err := qemu.Start(); err != nil {
		return fmt.Errorf("start qemu: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- qemu.Wait() }()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)

	r := &vmRelay{spec: spec, log: stderr}
	go r.run()
	select {
	case err := <-exited:
		return fmt.Errorf("qemu exited: %v", err)
	case s := <-sigs:
		// The disk is a snapshot: nothing to save. Stop qemu at once.
		_ = qemu.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = qemu.Process.Kill()
		}
		fmt.Fprintf(stderr, "unitlet-harness vm-run: %s: stopped qemu\n", s)
		return nil
	}
}

// vmRelay holds the yamux session over the virtio-serial port and serves the host's sockets.
type vmRelay struct {
	spec vmSpec
	log  io.Writer

	mu   sync.Mutex
	sess *yamux.Session
	once sync.Once
}

// run connects to qemu's chardev, waits for the guest agent's hello, serves, and connects
// again when the session ends (the agent restarted); it ends with this process.
func (r *vmRelay) run() {
	for {
		conn, err := net.Dial("unix", r.spec.Chardev)
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		sess, err := yamux.Client(conn, vmagent.Config())
		if err != nil {
			conn.Close()
			continue
		}
		hello, err := sess.Accept()
		if err == nil {
			line := make([]byte, len(vmagent.Hello))
			_, err = io.ReadFull(hello, line)
			hello.Close()
			if err == nil && string(line) != vmagent.Hello {
				err = fmt.Errorf("unexpected hello %q", line)
			}
		}
		if err != nil {
			fmt.Fprintf(r.log, "unitlet-harness vm-run: the agent channel: %v; connecting again\n", err)
			sess.Close()
			time.Sleep(time.Second)
			continue
		}
		fmt.Fprintln(r.log, "unitlet-harness vm-run: the guest agent is up")
		r.mu.Lock()
		r.sess = sess
		r.mu.Unlock()
		r.once.Do(r.listen)
		<-sess.CloseChan()
		fmt.Fprintln(r.log, "unitlet-harness vm-run: the agent session ended; connecting again")
	}
}

func (r *vmRelay) session() (*yamux.Session, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sess == nil || r.sess.IsClosed() {
		return nil, errors.New("no agent session")
	}
	return r.sess, nil
}

// listen serves the agent socket and the forwarded bus sockets.
func (r *vmRelay) listen() {
	serve := func(path, dial string) {
		_ = os.Remove(path)
		l, err := net.Listen("unix", path)
		if err != nil {
			fmt.Fprintf(r.log, "unitlet-harness vm-run: listen on %s: %v\n", path, err)
			return
		}
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				go r.forward(c.(*net.UnixConn), dial)
			}
		}()
	}
	serve(r.spec.Agent, "")
	for _, svc := range r.spec.Services {
		serve(filepath.Join(r.spec.SocketDir, svc+".sock"), filepath.Join(r.spec.GuestSocketDir, svc+".sock"))
	}
}

// forward connects c to a new stream: an exec request as c sends it, or a connection to the
// guest's socket dial.
func (r *vmRelay) forward(c *net.UnixConn, dial string) {
	defer c.Close()
	sess, err := r.session()
	if err != nil {
		return
	}
	st, err := sess.Open()
	if err != nil {
		return
	}
	defer st.Close()
	if dial != "" {
		if err := vmagent.Dial(st, dial); err != nil {
			return
		}
	}
	vmagent.Splice(vmagent.HalfClose(st), st, c)
}

// createFirstPod creates the pod whose start `up` times from boot: for the node only, so it
// waits for it, busybox sleeping.
func (h *Harness) createFirstPod(n Node) error {
	if h.stack.Standalone {
		return nil
	}
	client, err := h.AdminClient()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	name := FirstPodName(n.Name)
	_ = client.CoreV1().Pods("default").Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	grace := int64(1)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{"unitlet-harness": "first-pod"}},
		Spec: corev1.PodSpec{
			// Scheduled, not bound: the pod GC deletes pods bound to a node that does not
			// exist yet.
			NodeSelector:                  map[string]string{"kubernetes.io/hostname": n.Name},
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{
				Name: "sleep", Image: BusyboxImage, ImagePullPolicy: corev1.PullNever,
				Command: []string{"sleep", "1000000"},
			}},
		},
	}
	for {
		_, err = client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
		if err == nil || ctx.Err() != nil {
			break
		}
		time.Sleep(time.Second) // the one being deleted, or the default ServiceAccount not yet made
	}
	if err != nil {
		return fmt.Errorf("create pod default/%s: %w", name, err)
	}
	return nil
}

// FirstPodName is the pod `up` creates on a vm node at boot.
func FirstPodName(node string) string { return node + "-first-pod" }

// vmBootTimes waits for each vm node to be Ready and its first pod Running, and prints the
// times from boot.
func (h *Harness) vmBootTimes(ctx context.Context) error {
	if h.stack.Standalone {
		return nil
	}
	client, err := h.AdminClient()
	if err != nil {
		return err
	}
	for _, n := range h.stack.Nodes {
		if n.Backend != "vm" {
			continue
		}
		boot, err := h.VMBootTime(n.Name)
		if err != nil {
			return err
		}
		timesFile := filepath.Join(h.nodeDir(n.Name), "boot-times")
		if b, err := os.ReadFile(timesFile); err == nil {
			fmt.Fprintf(h.out, "%s (measured at its boot)\n", strings.TrimSpace(string(b)))
			continue
		}
		var times []string
		// The packages' install finished before the guest's systemd was running, which
		// the component waited for: its time is the guest's to tell.
		installed, err := h.vmInstalledAt(ctx, n.Name)
		if err != nil {
			return err
		}
		d := installed.Sub(boot).Round(100 * time.Millisecond)
		times = append(times, fmt.Sprintf("%s boot to unitlet installed: %s", n.Name, d))
		fmt.Fprintf(h.out, "%s: unitlet installed from its packages %s after boot\n", n.Name, d)
		wait := func(what string, cond func(ctx context.Context) (bool, string)) error {
			return h.step(n.Name+": "+what, func() (string, error) {
				wctx, cancel := context.WithTimeout(ctx, vmBootTimeout)
				defer cancel()
				last := ""
				for {
					ok, state := cond(wctx)
					if ok {
						d := time.Since(boot).Round(100 * time.Millisecond)
						times = append(times, fmt.Sprintf("%s %s: %s", n.Name, what, d))
						return fmt.Sprintf(": %s after boot", d), nil
					}
					last = state
					select {
					case <-wctx.Done():
						return "", fmt.Errorf("not within %s; last: %s", vmBootTimeout, last)
					case <-time.After(250 * time.Millisecond):
					}
				}
			})
		}
		if err := wait("boot to Ready", func(ctx context.Context) (bool, string) {
			node, err := client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			for _, c := range node.Status.Conditions {
				if c.Type == corev1.NodeReady {
					return c.Status == corev1.ConditionTrue, string(c.Status) + ": " + c.Message
				}
			}
			return false, "no Ready condition"
		}); err != nil {
			return err
		}
		if err := wait("boot to first pod Running", func(ctx context.Context) (bool, string) {
			pod, err := client.CoreV1().Pods("default").Get(ctx, FirstPodName(n.Name), metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			return pod.Status.Phase == corev1.PodRunning, string(pod.Status.Phase)
		}); err != nil {
			return err
		}
		if err := os.WriteFile(timesFile, []byte(strings.Join(times, "\n")+"\n"), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// VMBootTimes are the times `up` measured on vm node node from the start of its qemu:
// to unitlet installed, to Ready, to the first pod Running, one line each.
func (h *Harness) VMBootTimes(node string) ([]string, error) {
	b, err := os.ReadFile(filepath.Join(h.nodeDir(node), "boot-times"))
	if err != nil {
		return nil, fmt.Errorf("the boot times of %s: %w", node, err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n"), nil
}

// vmInstalledAt is when the guest's install unit (VMInstallUnit) finished, on the host's
// clock: the guest's monotonic clock counts from its kernel's start, which is the host's
// now less the guest's uptime (read between two host times, whose mean stands for both).
func (h *Harness) vmInstalledAt(ctx context.Context, node string) (time.Time, error) {
	before := time.Now()
	out, err := h.vmRun(ctx, node, "sh", "-c", "cut -d' ' -f1 /proc/uptime; systemctl show --value -p ExecMainExitTimestampMonotonic "+VMInstallUnit)
	after := time.Now()
	f := strings.Fields(out)
	if err != nil || len(f) != 2 {
		return time.Time{}, fmt.Errorf("when %s finished on %s: %v: %q", VMInstallUnit, node, err, out)
	}
	uptime, err1 := strconv.ParseFloat(f[0], 64)
	exited, err2 := strconv.ParseInt(f[1], 10, 64)
	if err1 != nil || err2 != nil || exited == 0 {
		return time.Time{}, fmt.Errorf("when %s finished on %s: uptime %q, ExecMainExitTimestampMonotonic %q (0: it has not finished)", VMInstallUnit, node, f[0], f[1])
	}
	now := before.Add(after.Sub(before) / 2)
	kernel := now.Add(-time.Duration(uptime * float64(time.Second)))
	return kernel.Add(time.Duration(exited) * time.Microsecond), nil
}

// vmServiceMainPID is the MainPID of a unitlet unit in the guest (a pid of the guest's, not
// the host's: the guest has its own kernel).
func (h *Harness) vmServiceMainPID(node, svc string) (int, error) {
	out, err := h.vmRun(context.Background(), node, "systemctl", "show", "--property=MainPID", "--value", "unitlet-"+svc+".service")
	if err != nil {
		return 0, fmt.Errorf("the main pid of unitlet-%s on %s: %v: %s", svc, node, err, out)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil || pid == 0 {
		return 0, fmt.Errorf("unitlet-%s.service on %s has no main process (MainPID=%s)", svc, node, strings.TrimSpace(out))
	}
	return pid, nil
}
