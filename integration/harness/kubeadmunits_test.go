package harness

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/unitlet/unitlet/integration"
)

// kubeadmStub stands for unitlet-config under unitlet-kubeadm's drop-in: it fails with exit
// 2, as unitlet-config does, while kubeadm's config.yaml is missing; it checks that its
// sandbox lets it write kubelet.conf's directory and the certificate directory and not
// config.yaml (exit 3, 4), then runs until stopped.
const kubeadmStub = `test -f /var/lib/kubelet/config.yaml || exit 2
touch /etc/kubernetes/probe /var/lib/kubelet/pki/probe || exit 3
touch /var/lib/kubelet/config.yaml 2>/dev/null && exit 4
exec sleep infinity`

// TestKubeletServiceDrivesUnitletTarget boots the nspawn backend's Debian tree with
// unitlet's units, unitlet-kubeadm's kubelet.service and drop-ins, and stand-ins for the
// binaries, and does to kubelet.service what kubeadm does: start before its files are
// there, restart after, restart again, stop, start.
func TestKubeletServiceDrivesUnitletTarget(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("booting a systemd-nspawn machine needs root: run the test as root")
	}
	repo, err := integration.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	// The nspawn backend's tree, built here on a new machine (under its lock: the harness
	// suite, run beside this package by go test, may be building it too).
	h := &Harness{out: io.Discard}
	if testing.Verbose() {
		h.out = os.Stderr
	}
	if _, err := h.ensureNspawnTree(); err != nil {
		t.Fatal(err)
	}
	tree := NspawnTreeDir()
	if _, err := os.Stat(filepath.Join(tree, "usr/lib/systemd/systemd")); err != nil {
		t.Fatalf("no systemd in the nspawn tree %s: %v", tree, err)
	}
	if err := ensureNspawnRunDir(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	for _, d := range []string{"upper", "work", "root"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mount("overlay", root, "overlay", 0, fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", tree, filepath.Join(dir, "upper"), filepath.Join(dir, "work"))); err != nil {
		t.Fatalf("mount the machine's overlay: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(root, syscall.MNT_DETACH) })

	units := filepath.Join(root, "usr/lib/systemd/system")
	files := map[string]string{
		"usr/lib/sysusers.d/unitlet.conf":        filepath.Join(repo, "deploy/sysusers.d/unitlet.conf"),
		"usr/lib/systemd/system/kubelet.service": filepath.Join(repo, "systemd/kubeadm/kubelet.service"),
	}
	shipped, _ := filepath.Glob(filepath.Join(repo, "systemd", "unitlet*"))
	dropIns, _ := filepath.Glob(filepath.Join(repo, "systemd/kubeadm/*.service.d/*.conf"))
	for _, f := range shipped {
		files["usr/lib/systemd/system/"+filepath.Base(f)] = f
	}
	for _, f := range dropIns {
		files["usr/lib/systemd/system/"+strings.TrimPrefix(f, filepath.Join(repo, "systemd/kubeadm")+"/")] = f
	}
	for dst, src := range files {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		writeTestFile(t, filepath.Join(root, dst), string(b))
	}
	if err := os.MkdirAll(filepath.Join(root, "etc/kubernetes/manifests"), 0o755); err != nil {
		t.Fatal(err)
	}
	// The stand-ins: each service sleeps; unitlet-config runs kubeadmStub. Type=simple, as
	// a shell cannot notify as the main process.
	for _, svc := range []string{"config", "certs", "podsync", "status", "volumes", "eviction"} {
		start := "/bin/sleep infinity"
		if svc == "config" {
			start = "/bin/sh -c '" + strings.ReplaceAll(kubeadmStub, "\n", "; ") + "'"
		}
		writeTestFile(t, filepath.Join(units, "unitlet-"+svc+".service.d", "zz-stub.conf"),
			"[Service]\nType=simple\nWatchdogSec=0\nExecStart=\nExecStart="+start+"\n")
	}

	nspawn := exec.Command("systemd-nspawn", "--directory="+root, "--machine=kubeadm-units", "--register=no", "--keep-unit",
		"--boot", "--console=read-only", "--link-journal=no")
	console, err := os.Create(filepath.Join(dir, "console.log"))
	if err != nil {
		t.Fatal(err)
	}
	nspawn.Stdout, nspawn.Stderr = console, console
	if err := nspawn.Start(); err != nil {
		t.Fatalf("systemd-nspawn: %v", err)
	}
	done := make(chan struct{})
	go func() { _ = nspawn.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = nspawn.Process.Signal(syscall.SIGTERM) // an orderly poweroff
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = nspawn.Process.Kill()
			<-done
		}
	})
	leader := 0
	in := func(args ...string) (string, error) {
		out, err := exec.Command("nsenter", append([]string{"-t", fmt.Sprint(leader), "-a"}, args...)...).CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if leader == 0 {
			if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", nspawn.Process.Pid, nspawn.Process.Pid)); err == nil {
				fmt.Sscan(string(b), &leader)
			}
		}
		if leader != 0 {
			if st, _ := in("systemctl", "is-system-running"); st == "running" || st == "degraded" {
				break
			}
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(console.Name())
			t.Fatalf("the machine did not boot in 2 minutes:\n%s", log)
		}
		time.Sleep(500 * time.Millisecond)
	}
	run := func(args ...string) {
		t.Helper()
		if out, err := in(args...); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	services := []string{"config", "certs", "podsync", "status", "volumes", "eviction"}
	// state is each service's ActiveState and main PID, and the target's and kubelet's.
	state := func() map[string]string {
		t.Helper()
		m := map[string]string{}
		for _, s := range services {
			as, _ := in("systemctl", "show", "-P", "ActiveState", "unitlet-"+s+".service")
			pid, _ := in("systemctl", "show", "-P", "MainPID", "unitlet-"+s+".service")
			m[s] = as + " " + pid
			out, _ := in("systemctl", "show", "-P", "ActiveState", "unitlet-"+s+".socket")
			m[s+".socket"] = out
		}
		m["target"], _ = in("systemctl", "show", "-P", "ActiveState", "unitlet.target")
		m["kubelet"], _ = in("systemctl", "is-active", "kubelet.service")
		return m
	}
	// settle waits for no job to be running, then a moment for the stubs to exit or not.
	settle := func() map[string]string {
		t.Helper()
		for i := 0; i < 60; i++ {
			if out, _ := in("systemctl", "list-jobs", "--no-legend"); out == "" {
				break
			}
			time.Sleep(500 * time.Millisecond)
		}
		time.Sleep(time.Second)
		return state()
	}
	active := func(s string) bool { return strings.HasPrefix(s, "active ") }

	// kubeadm's preflight: the unit exists and is enabled (the package's postinst enables it).
	run("systemctl", "enable", "kubelet.service")
	if out, _ := in("systemctl", "is-enabled", "kubelet"); out != "enabled" {
		t.Errorf("is-enabled kubelet: %q", out)
	}

	// Before the join: the agent is up but unitlet-config fails, config.yaml missing.
	run("systemctl", "start", "kubelet")
	st := settle()
	if st["kubelet"] != "active" || st["target"] != "active" || active(st["config"]) {
		t.Errorf("start before kubeadm's files: %v; want kubelet and unitlet.target active, unitlet-config not", st)
	}

	// kubeadm writes its files, reloads and restarts the kubelet.
	writeTestFile(t, filepath.Join(root, "var/lib/kubelet/config.yaml"), "kind: KubeletConfiguration\n")
	run("systemctl", "daemon-reload")
	run("systemctl", "restart", "kubelet")
	joined := settle()
	for _, s := range services {
		if !active(joined[s]) {
			journal, _ := in("journalctl", "--no-pager", "-o", "short-monotonic", "-u", "unitlet-"+s+".service", "-u", "kubelet.service")
			t.Errorf("after kubeadm's restart: unitlet-%s is %q, want active (all: %v); its journal:\n%s", s, joined[s], joined, journal)
		}
	}
	for _, p := range []string{"etc/kubernetes/probe", "var/lib/kubelet/pki/probe"} {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Errorf("unitlet-config could not write /%s under its sandbox: %v", p, err)
		}
	}

	// A restart restarts unitlet-config alone.
	run("systemctl", "restart", "kubelet")
	again := settle()
	for _, s := range services {
		switch {
		case !active(again[s]):
			t.Errorf("after a second restart: unitlet-%s is %q, want active", s, again[s])
		case s == "config" && again[s] == joined[s]:
			t.Errorf("restart of kubelet.service did not restart unitlet-config (%q)", again[s])
		case s != "config" && again[s] != joined[s]:
			t.Errorf("restart of kubelet.service restarted unitlet-%s (%q, then %q): only unitlet-config must restart", s, joined[s], again[s])
		}
	}

	// A stop stops every service and socket.
	run("systemctl", "stop", "kubelet")
	stopped := settle()
	for k, v := range stopped {
		if k != "kubelet" && k != "target" && !strings.HasPrefix(v, "inactive") && !strings.HasPrefix(v, "failed") {
			t.Errorf("after stop kubelet: %s is %q, want stopped", k, v)
		}
	}
	if stopped["target"] != "inactive" || stopped["kubelet"] != "inactive" {
		t.Errorf("after stop kubelet: unitlet.target %q, kubelet %q; want both inactive", stopped["target"], stopped["kubelet"])
	}

	// And a start brings it all back.
	run("systemctl", "start", "kubelet")
	restarted := settle()
	for _, s := range services {
		if !active(restarted[s]) || restarted[s+".socket"] != "active" {
			t.Errorf("after start kubelet: unitlet-%s %q, its socket %q; want both active", s, restarted[s], restarted[s+".socket"])
		}
	}
}

func writeTestFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}
