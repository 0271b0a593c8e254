package csidriver

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"
)

// processEnv carries a driver's Options (JSON) to the test binary re-run as the driver.
const processEnv = "UNITLET_TEST_CSI_DRIVER"

// RunIfAsked runs the driver in this process when it was started by StartProcess, until
// SIGTERM or SIGKILL, and reports whether it did (a TestMain then returns). It exits the
// process on a start that fails.
func RunIfAsked() bool {
	raw := os.Getenv(processEnv)
	if raw == "" {
		return false
	}
	var o Options
	if err := json.Unmarshal([]byte(raw), &o); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", processEnv, err)
		os.Exit(2)
	}
	d, err := Start(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	d.Stop()
	return true
}

// Process is the driver run as its own process (the test binary again), so that a test can
// SIGKILL it as a node plugin's container is killed: its sockets stay behind, its mounts
// stay, and what it did is in its call log.
type Process struct {
	o   Options
	cmd *exec.Cmd
}

// StartProcess starts the driver in a process of its own; o.CallLog is required.
func StartProcess(o Options) (*Process, error) {
	if o.CallLog == "" {
		return nil, errors.New("csidriver.StartProcess: CallLog is required")
	}
	p := &Process{o: o}
	return p, p.start()
}

func (p *Process) start() error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	raw, err := json.Marshal(p.o)
	if err != nil {
		return err
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), processEnv+"="+string(raw))
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	started := time.Now()
	if err := cmd.Start(); err != nil {
		return err
	}
	p.cmd = cmd
	// Ready once its registration socket is there (made after the CSI socket).
	reg := (&Driver{o: p.o}).RegistrationSocket()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		// A killed process's socket stays behind: only the new one's counts.
		if fi, err := os.Stat(reg); err == nil && fi.Mode().Type() == os.ModeSocket && !fi.ModTime().Before(started.Add(-50*time.Millisecond)) {
			return nil
		}
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	return fmt.Errorf("the CSI test driver %s did not make %s within 30 s", p.o.Name, reg)
}

// Kill SIGKILLs the driver and starts it again, as the kubelet's node sees a node plugin
// restarted: its old sockets are replaced by the new process's.
func (p *Process) Kill() error {
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	_ = p.cmd.Wait()
	return p.start()
}

// Stop stops the driver (SIGTERM: it removes its sockets).
func (p *Process) Stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	_ = p.cmd.Wait()
}

// Calls are the calls the driver's processes logged, in order (NodeGetInfo and
// NodeGetCapabilities left out).
func (p *Process) Calls() ([]Call, error) {
	f, err := os.Open(p.o.CallLog)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Call
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var c Call
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			return nil, fmt.Errorf("%s: %w", p.o.CallLog, err)
		}
		out = append(out, c)
	}
	return out, sc.Err()
}
