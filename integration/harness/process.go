package harness

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

// proc is a process the harness started and must stop.
type proc struct {
	Name string   `json:"name"`
	PID  int      `json:"pid"`
	Args []string `json:"args"`
	Log  string   `json:"log"`
}

// startProcess starts a long-running component in its own session, so that it outlives
// `unitlet-harness up` and is stopped by PID, with its output in <logDir>/<name>.log.
func startProcess(logDir, name string, env []string, bin string, args ...string) (*proc, error) {
	logPath := filepath.Join(logDir, name+".log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{Name: name, PID: cmd.Process.Pid, Args: append([]string{bin}, args...), Log: logPath}
	// Reap it if it dies while this process lives, so that alive() sees the death.
	go func() { _ = cmd.Wait() }()
	return p, nil
}

// alive reports whether the process still runs (and is not a zombie).
func (p *proc) alive() bool {
	if p == nil || p.PID <= 0 {
		return false
	}
	if err := syscall.Kill(p.PID, 0); err != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.PID))
	if err != nil {
		return false
	}
	// The state follows the command name in parentheses.
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == ')' {
			return i+2 < len(b) && b[i+2] != 'Z'
		}
	}
	return true
}

// sameCommand reports whether the process with p's PID runs the program p was started
// with: after a reboot, or long after p ended, the PID may be another program's.
func (p *proc) sameCommand() bool {
	if len(p.Args) == 0 {
		return true
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p.PID))
	if err != nil {
		return false
	}
	argv0, _, _ := strings.Cut(string(b), "\x00")
	return argv0 == p.Args[0]
}

// stop ends the process: SIGTERM to its process group, SIGKILL after grace.
func (p *proc) stop(grace time.Duration) error {
	if !p.alive() {
		return nil
	}
	_ = syscall.Kill(-p.PID, syscall.SIGTERM)
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		if !p.alive() {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = syscall.Kill(-p.PID, syscall.SIGKILL)
	for i := 0; i < 100 && p.alive(); i++ {
		time.Sleep(20 * time.Millisecond)
	}
	if p.alive() {
		return errors.New(p.Name + " survived SIGKILL")
	}
	return nil
}

// unmountUnder unmounts everything mounted below dir (containerd's shm and rootfs mounts a
// killed runtime may leave), deepest first.
func (h *Harness) unmountUnder(dir string) error {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	var mounts []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			mounts = append(mounts, f[4])
		}
	}
	sort.Slice(mounts, func(i, j int) bool { return len(mounts[i]) > len(mounts[j]) })
	for _, m := range mounts {
		if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil {
			return fmt.Errorf("unmount %s: %w", m, err)
		}
		fmt.Fprintf(h.out, "unmounted %s\n", m)
	}
	return nil
}
