package cgroups

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrNotEmpty is what Remove's error wraps when a process or a child cgroup is left.
var ErrNotEmpty = errors.New("cgroup still has processes")

// NotEmptyError is Remove's refusal to remove a cgroup that is in use. It matches
// ErrNotEmpty with errors.Is.
type NotEmptyError struct {
	Cgroup   string   // as the driver names it: "/kubepods/pod<uid>" or "kubepods-pod<uid>.slice"
	PIDs     []int    // processes in the cgroup or below it
	Children []string // child cgroups left, when there is no process
	Err      error    // the kernel's refusal, when neither was seen
}

func (e *NotEmptyError) Error() string {
	switch {
	case len(e.PIDs) > 0:
		ps := make([]string, len(e.PIDs))
		for i, p := range e.PIDs {
			ps[i] = strconv.Itoa(p)
		}
		return fmt.Sprintf("cgroup %s still has processes: %s", e.Cgroup, strings.Join(ps, ", "))
	case len(e.Children) > 0:
		return fmt.Sprintf("cgroup %s still has child cgroups: %s", e.Cgroup, strings.Join(e.Children, ", "))
	default:
		return fmt.Sprintf("cgroup %s is still in use: %v", e.Cgroup, e.Err)
	}
}

func (e *NotEmptyError) Is(target error) bool { return target == ErrNotEmpty }
func (e *NotEmptyError) Unwrap() error        { return e.Err }

// Manager creates, updates, lists and removes the node's pod and QoS cgroups with one
// driver. Only Kill touches a process; nothing moves one.
type Manager interface {
	Driver() Driver
	// Unified reports cgroup v2.
	Unified() bool
	// Parent is what the CRI takes as a sandbox's cgroup parent, as the kubelet passes it:
	// CgroupfsPath for cgroupfs, SystemdPath for systemd (runtimes use the last element).
	Parent(n Name) string
	// Path is the cgroup's directory under the mount point (v2) or under the memory
	// hierarchy (v1), for reading.
	Path(n Name) string
	// Exists reports whether the cgroup is there (v1: in each of the hierarchies the
	// kubelet checks, memory, cpu and pids at least).
	Exists(n Name) bool
	// Ensure creates the cgroup if it is missing, then sets r. An existing cgroup is
	// adopted and updated, never recreated. The root cannot be ensured.
	Ensure(ctx context.Context, n Name, r Resources) error
	// Remove removes the cgroup; a missing one is nil. A process in it or below it, or a
	// child cgroup, makes it an error wrapping ErrNotEmpty (a *NotEmptyError) and nothing
	// is removed.
	Remove(ctx context.Context, n Name) error
	// Kill sends SIGKILL to every process in the cgroup and below it, as the kubelet does
	// before it removes a pod's cgroup, and waits a moment for them to go: on cgroup v2
	// through cgroup.kill where it can, otherwise pid by pid in a few rounds (a pid is
	// signalled only through a pidfd taken while the cgroup still lists it). It returns
	// the processes it found there. Processes still there at the end make it an error
	// wrapping ErrNotEmpty. A missing cgroup has none; the root cannot be killed.
	Kill(ctx context.Context, n Name) ([]int, error)
	// Children names the cgroups directly under n as components ("burstable",
	// "pod<uid>"); a missing n has none.
	Children(n Name) ([]string, error)
	Close() error
}

// New is the Manager for driver d over the cgroups mounted at mountPoint (normally
// /sys/fs/cgroup): cgroup v2 when mountPoint has cgroup.controllers, else the cgroup v1
// hierarchies in its directories. The systemd driver connects to systemd here.
func New(d Driver, mountPoint string) (Manager, error) {
	if d != Cgroupfs && d != Systemd {
		return nil, fmt.Errorf("unknown cgroupDriver %q, want %q or %q", d, Cgroupfs, Systemd)
	}
	h, err := detect(mountPoint)
	if err != nil {
		return nil, err
	}
	if d == Cgroupfs {
		return &cgroupfsManager{h: h}, nil
	}
	m := &systemdManager{h: h, dial: dialSystemd}
	if _, err := m.connection(context.Background()); err != nil {
		return nil, err
	}
	return m, nil
}
