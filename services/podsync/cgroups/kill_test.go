package cgroups

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestKillReal leaves processes in a real pod cgroup and in a container cgroup below it
// (one that forked children inside), and Kill must end every one of them, and nothing
// outside, so that Remove can take the cgroup: on the host's cgroup v1 hierarchies, or on
// a host with only cgroup v2, on that.
func TestKillReal(t *testing.T) {
	unified := requireHostCgroups(t)
	m, err := New(Cgroupfs, hostMount)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	exerciseKill(t, m, hostHierarchies(t, unified))
}

// TestKillRealHybridV2 does the same on a hybrid host's cgroup v2 tree, through its
// cgroup.kill.
func TestKillRealHybridV2(t *testing.T) {
	mount := filepath.Join(hostMount, "unified")
	if !exists(filepath.Join(mount, "cgroup.controllers")) {
		mount = hostMount
		if !exists(filepath.Join(mount, "cgroup.controllers")) {
			t.Fatalf("no cgroup v2 tree at %s/unified or %s", hostMount, hostMount)
		}
	}
	requireHostCgroups(t)
	m, err := New(Cgroupfs, mount)
	if err != nil {
		t.Fatal(err)
	}
	cm := m.(*cgroupfsManager)
	var wrote []string
	cm.h.write = func(path, value string) error {
		wrote = append(wrote, filepath.Base(path)+"="+value)
		return writeFile(path, value)
	}
	exerciseKill(t, m, []string{mount})
	if !slices.Contains(wrote, "cgroup.kill=1") {
		t.Errorf("Kill on cgroup v2 wrote %q, want cgroup.kill", wrote)
	}
}

// TestKillRealV2ReadOnly is cgroup v2 where cgroup.kill cannot be written (a unit's
// read-only mount, a kernel before 5.14): each process is killed by its pid.
func TestKillRealV2ReadOnly(t *testing.T) {
	mount := filepath.Join(hostMount, "unified")
	if !exists(filepath.Join(mount, "cgroup.controllers")) {
		mount = hostMount
	}
	requireHostCgroups(t)
	m, err := New(Cgroupfs, mount)
	if err != nil {
		t.Fatal(err)
	}
	cm := m.(*cgroupfsManager)
	refused := 0
	cm.h.write = func(path, value string) error {
		if filepath.Base(path) == "cgroup.kill" {
			refused++
			return syscall.EROFS
		}
		return writeFile(path, value)
	}
	exerciseKill(t, m, []string{mount})
	if refused == 0 {
		t.Error("Kill did not try cgroup.kill first")
	}
}

func exerciseKill(t *testing.T, m Manager, dirs []string) {
	ctx := context.Background()
	root := Name{"unitlet-test-" + randomHex(t)}
	t.Cleanup(func() { removeTestTree(t, dirs, root) })
	pod := root.Child("kubepods").Child("besteffort").Child("pod5678-ef")
	ctr := pod.Child("0a1b2c3d")
	// On v1 a process can sit in the pod's cgroup itself; on v2 only in a leaf (a cgroup
	// with controllers enabled for its children holds none), so there in a second child.
	holder := pod
	if m.Unified() {
		holder = pod.Child("4e5f6a7b")
	}
	for _, n := range []Name{pod, ctr, holder} { // the containers' as a runtime makes them
		if err := m.Ensure(ctx, n, Resources{}); err != nil {
			t.Fatalf("Ensure(%s): %v", n, err)
		}
	}

	// Outside: must live on.
	outside := startProc(t, "sleep", "300")
	// In the pod's cgroup: a plain process.
	inPod := startProc(t, "sleep", "300")
	moveInto(t, dirs, holder, inPod.Process.Pid)
	// In the container's cgroup: a shell that forks two children once it is there, as a
	// daemon that escaped its container's stop would have. It then blocks reading its
	// stdin, not in wait: a shell in wait could see both children killed first and exit 0
	// before its own SIGKILL landed (seen once under load in make test).
	forker := exec.Command("sh", "-c", "read go; sleep 300 & sleep 300 & echo started; read never")
	stdin, err := forker.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := forker.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := forker.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { forker.Process.Kill(); forker.Wait() })
	moveInto(t, dirs, ctr, forker.Process.Pid)
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		t.Fatal(err)
	}
	if line, err := readLine(out); err != nil || line != "started" {
		t.Fatalf("forker said %q, %v", line, err)
	}
	rel := pod.CgroupfsPath()
	before, err := m.(*cgroupfsManager).h.pids(rel)
	if err != nil || len(before) != 4 {
		t.Fatalf("processes in the pod's cgroup before the kill: %v, %v; want 4 (sleep, sh and its two children)", before, err)
	}
	children := slices.DeleteFunc(slices.Clone(before), func(p int) bool { return p == inPod.Process.Pid || p == forker.Process.Pid })

	killed, err := m.Kill(ctx, pod)
	if err != nil {
		t.Fatalf("Kill(%s): %v", pod, err)
	}
	if !slices.Equal(killed, before) {
		t.Errorf("Kill found %v, want %v", killed, before)
	}
	if err := inPod.Wait(); !signalledBy(err, syscall.SIGKILL) {
		t.Errorf("the pod's process ended with %v, want SIGKILL", err)
	}
	if err := forker.Wait(); !signalledBy(err, syscall.SIGKILL) {
		t.Errorf("the container's shell ended with %v, want SIGKILL", err)
	}
	for _, pid := range children {
		waitGone(t, pid)
	}
	if err := outside.Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("a process outside the cgroup was touched: %v", err)
	}
	if left, err := m.(*cgroupfsManager).h.pids(rel); err != nil || len(left) != 0 {
		t.Errorf("processes left after Kill: %v, %v", left, err)
	}

	// Now the cgroup can go, the containers' first, as nodeCgroups does it.
	for _, n := range []Name{ctr, holder} {
		if err := m.Remove(ctx, n); err != nil {
			t.Fatalf("Remove(%s) after Kill: %v", n, err)
		}
	}
	if err := m.Remove(ctx, pod); err != nil {
		t.Fatalf("Remove(%s) after Kill: %v", pod, err)
	}
	// Nothing to kill: a missing cgroup, an empty one.
	if killed, err := m.Kill(ctx, pod); err != nil || killed != nil {
		t.Errorf("Kill of a missing cgroup = %v, %v; want nothing", killed, err)
	}
	if _, err := m.Kill(ctx, nil); err == nil {
		t.Error("Kill of the root cgroup: no error")
	}
}

// TestKillListedSkipsAReusedPid: a pid the cgroup no longer lists once its pidfd is held
// is not signalled, even though a process has that number.
func TestKillListedSkipsAReusedPid(t *testing.T) {
	other := startProc(t, "sleep", "300")
	pid := other.Process.Pid
	n, err := killListed([]int{pid, 0, os.Getpid()}, func() ([]int, error) { return nil, nil })
	if err != nil || n != 0 {
		t.Fatalf("killListed = %d, %v; want nothing signalled", n, err)
	}
	if err := other.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("a process no longer listed was signalled: %v", err)
	}
	n, err = killListed([]int{pid}, func() ([]int, error) { return []int{pid}, nil })
	if err != nil || n != 1 {
		t.Fatalf("killListed = %d, %v; want one signalled", n, err)
	}
	if err := other.Wait(); !signalledBy(err, syscall.SIGKILL) {
		t.Errorf("process ended with %v, want SIGKILL", err)
	}
	// An exited process is no error.
	if n, err := killListed([]int{pid}, func() ([]int, error) { return []int{pid}, nil }); err != nil || n != 0 {
		t.Errorf("killListed of an exited process = %d, %v", n, err)
	}
}

// TestKillFakeUnkillable: a process Kill cannot signal (listed as 0, outside this pid
// namespace) is reported, without waiting out every round.
func TestKillFakeUnkillable(t *testing.T) {
	f, h := newFakeV2(t, "cpu memory pids")
	m := &cgroupfsManager{h: h}
	pod := Name{"kubepods", "pod1"}
	if err := m.Ensure(context.Background(), pod, Resources{}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.dir, pod.CgroupfsPath(), "cgroup.procs"), []byte("0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	h.write = func(string, string) error { return syscall.EROFS }
	start := time.Now()
	_, err := m.Kill(context.Background(), pod)
	var ne *NotEmptyError
	if !errors.As(err, &ne) || !slices.Equal(ne.PIDs, []int{0}) {
		t.Fatalf("Kill = %v, want ErrNotEmpty naming pid 0", err)
	}
	if took := time.Since(start); took > killWait {
		t.Errorf("Kill took %v with nothing it could signal", took)
	}
}

func startProc(t *testing.T, name string, args ...string) *exec.Cmd {
	t.Helper()
	c := exec.Command(name, args...)
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Process.Kill(); c.Wait() })
	return c
}

func moveInto(t *testing.T, dirs []string, n Name, pid int) {
	t.Helper()
	for _, d := range dirs {
		if err := os.WriteFile(filepath.Join(d, n.CgroupfsPath(), "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
			t.Fatalf("move %d into %s: %v", pid, filepath.Join(d, n.CgroupfsPath()), err)
		}
	}
}

func readLine(r io.Reader) (string, error) {
	var b []byte
	one := make([]byte, 1)
	for {
		if _, err := r.Read(one); err != nil {
			return string(b), err
		}
		if one[0] == '\n' {
			return strings.TrimSpace(string(b)), nil
		}
		b = append(b, one[0])
	}
}

func signalledBy(err error, sig syscall.Signal) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == sig
}

// waitGone waits for a process that is not this test's child to exit (it is reaped by
// whoever adopted it).
func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return
		}
		// A zombie has been killed; only its parent's reaping is left.
		if f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:])); len(f) > 0 && f[0] == "Z" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d still runs after Kill: %s", pid, b)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
