package cgroups

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"golang.org/x/sys/unix"
)

// killRounds is how many times kill signals what it finds in a cgroup before it gives up:
// a process that forks while it is killed leaves a child for the next round. The kubelet
// also tries five times.
const killRounds = 5

// killWait bounds how long one round waits for the killed processes to leave the cgroup.
// A process in uninterruptible sleep (a hung NFS mount) can outlast it; the cgroup is then
// reported not empty and the caller tries again later.
const killWait = 2 * time.Second

// kill sends SIGKILL to every process in the cgroup rel and in every cgroup below it, in
// every hierarchy, waits for them to leave, and returns those it found. On cgroup v2 the
// kernel's cgroup.kill does it in one step, forks included, where the kernel has it (5.14)
// and the mount is writable; otherwise, and for whatever cgroup.kill leaves, each process
// is signalled by its pid, in rounds. cgroup names it in errors. A missing cgroup has
// nothing to kill.
func (h *hierarchies) kill(ctx context.Context, rel, cgroup string) ([]int, error) {
	var found []int
	note := func(pids []int) {
		for _, p := range pids {
			if !slices.Contains(found, p) {
				found = append(found, p)
			}
		}
		slices.Sort(found)
	}
	pids, err := h.pids(rel)
	if err != nil || len(pids) == 0 {
		return nil, killErr(cgroup, err)
	}
	note(pids)
	if h.unified {
		// No cgroup.kill (an older kernel) or a read-only mount leaves it to the pids.
		if h.write(filepath.Join(h.mount, rel, "cgroup.kill"), "1") == nil {
			left, err := h.awaitNoPids(ctx, rel)
			if err != nil || len(left) == 0 {
				return found, killErr(cgroup, err)
			}
		}
	}
	for range killRounds {
		pids, err := h.pids(rel)
		if err != nil || len(pids) == 0 {
			return found, killErr(cgroup, err)
		}
		note(pids)
		signalled, err := killListed(pids, func() ([]int, error) { return h.pids(rel) })
		if err != nil {
			return found, killErr(cgroup, err)
		}
		if signalled == 0 {
			break // only what may not be signalled is left
		}
		left, err := h.awaitNoPids(ctx, rel)
		if err != nil || len(left) == 0 {
			return found, killErr(cgroup, err)
		}
	}
	pids, err = h.pids(rel)
	if err != nil {
		return found, killErr(cgroup, err)
	}
	if len(pids) > 0 {
		return found, &NotEmptyError{Cgroup: cgroup, PIDs: pids}
	}
	return found, nil
}

// killErr says whose processes could not be killed; nil stays nil.
func killErr(cgroup string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("kill the processes of cgroup %s: %w", cgroup, err)
}

// awaitNoPids waits up to killWait for the cgroup and those below it to hold no process,
// and returns those still there.
func (h *hierarchies) awaitNoPids(ctx context.Context, rel string) ([]int, error) {
	deadline := time.Now().Add(killWait)
	for wait := 5 * time.Millisecond; ; wait = min(2*wait, 200*time.Millisecond) {
		pids, err := h.pids(rel)
		if err != nil || len(pids) == 0 || time.Now().After(deadline) {
			return pids, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("wait for them to exit: %w", ctx.Err())
		case <-time.After(wait):
		}
	}
}

// killListed sends SIGKILL to each of pids that is still listed by list after a pidfd
// holds the process, so that a pid whose process exited and whose number was taken by
// another process outside the cgroup is never signalled, and returns how many it
// signalled. A kernel without pidfds (before 5.3) gets each pid signalled by number, as
// the kubelet does. A pid of 0 (a process the cgroup lists from outside this pid
// namespace) and this process itself are left alone.
func killListed(pids []int, list func() ([]int, error)) (int, error) {
	self := os.Getpid()
	fds := map[int]int{}
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	var errs []error
	signalled := 0
	for _, pid := range pids {
		if pid <= 0 || pid == self {
			continue
		}
		fd, err := unix.PidfdOpen(pid, 0)
		switch {
		case err == nil:
			fds[pid] = fd
		case errors.Is(err, unix.ESRCH):
			// Exited since it was listed.
		case errors.Is(err, unix.ENOSYS):
			if err := unix.Kill(pid, unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
				errs = append(errs, fmt.Errorf("kill %d: %w", pid, err))
			}
			signalled++
		default:
			errs = append(errs, fmt.Errorf("open a pidfd for %d: %w", pid, err))
		}
	}
	if len(fds) > 0 {
		// A pid listed now whose pidfd's process is still alive when signalled was that
		// process all along: its number cannot be reused while it lives.
		still, err := list()
		if err != nil {
			return signalled, err
		}
		for pid, fd := range fds {
			if !slices.Contains(still, pid) {
				continue
			}
			if err := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
				errs = append(errs, fmt.Errorf("kill %d: %w", pid, err))
			}
			signalled++
		}
	}
	return signalled, errors.Join(errs...)
}
