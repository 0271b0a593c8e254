package cgroups

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
)

// D-Bus error names systemd answers with.
const (
	dbusUnitExists = "org.freedesktop.systemd1.UnitExists"
	dbusNoSuchUnit = "org.freedesktop.systemd1.NoSuchUnit"
)

// systemdConn is the part of go-systemd's *dbus.Conn the systemd driver uses.
type systemdConn interface {
	GetUnitPropertyContext(ctx context.Context, unit, property string) (*sddbus.Property, error)
	StartTransientUnitContext(ctx context.Context, name, mode string, props []sddbus.Property, ch chan<- string) (int, error)
	StartUnitContext(ctx context.Context, name, mode string, ch chan<- string) (int, error)
	SetUnitPropertiesContext(ctx context.Context, name string, runtime bool, props ...sddbus.Property) error
	StopUnitContext(ctx context.Context, name, mode string, ch chan<- string) (int, error)
	ResetFailedUnitContext(ctx context.Context, name string) error
	Close()
}

// dialSystemd connects to systemd on its private socket (root only), or else through the
// system bus. It asks for the system bus itself rather than through NewWithContext, which
// as root would try the private socket again and report that error instead of the bus's.
func dialSystemd(ctx context.Context) (systemdConn, error) {
	c, err := sddbus.NewSystemdConnectionContext(ctx)
	if err == nil {
		return c, nil
	}
	c, busErr := sddbus.NewSystemConnectionContext(ctx)
	if busErr != nil {
		return nil, fmt.Errorf("connect to systemd for cgroupDriver systemd: private socket: %v; system bus: %w", err, busErr)
	}
	return c, nil
}

// systemdManager has systemd make each cgroup as a transient slice unit and set its
// limits through unit properties. Only the emptiness check before a stop and the hugetlb
// limits, which systemd has no property for, go to the cgroup files.
type systemdManager struct {
	h    *hierarchies
	dial func(context.Context) (systemdConn, error)

	mu   sync.Mutex
	conn systemdConn
}

func (m *systemdManager) Driver() Driver       { return Systemd }
func (m *systemdManager) Unified() bool        { return m.h.unified }
func (m *systemdManager) Parent(n Name) string { return n.SystemdPath() }
func (m *systemdManager) Path(n Name) string   { return m.h.mainDir(n.SystemdPath()) }

// Exists looks at the directories systemd makes: on v1 it makes none for cpuset or
// hugetlb, so only memory, cpu and pids count.
func (m *systemdManager) Exists(n Name) bool {
	return m.h.existsIn(n.SystemdPath(), []string{"memory", "cpu", "pids"})
}

func (m *systemdManager) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.conn != nil {
		m.conn.Close()
		m.conn = nil
	}
	return nil
}

func (m *systemdManager) Ensure(ctx context.Context, n Name, r Resources) error {
	if err := checkEnsure(ctx, n, Systemd); err != nil {
		return err
	}
	slice := n.SystemdSlice()
	props := systemdProperties(r, m.h.unified)
	err := m.withConn(ctx, func(c systemdConn) error {
		return startOrUpdate(ctx, c, n, slice, props)
	})
	if err != nil {
		return err
	}
	return m.setHugePages(n, r)
}

// startOrUpdate starts slice as a transient unit with props, or, when it is already
// there, sets props on it. systemd makes the parent slices from the name.
func startOrUpdate(ctx context.Context, c systemdConn, n Name, slice string, props []sddbus.Property) error {
	state, err := c.GetUnitPropertyContext(ctx, slice, "ActiveState")
	if err != nil {
		return fmt.Errorf("read state of %s: %w", slice, err)
	}
	if s, _ := state.Value.Value().(string); s == "active" || s == "reloading" {
		return setProperties(ctx, c, slice, props)
	}
	start := append([]sddbus.Property{
		sddbus.PropDescription("unitlet cgroup " + n.CgroupfsPath()),
		{Name: "DefaultDependencies", Value: dbus.MakeVariant(false)},
	}, props...)
	ch := make(chan string, 1)
	_, err = c.StartTransientUnitContext(ctx, slice, "replace", start, ch)
	if dbusErrorName(err) == dbusUnitExists {
		// Loaded but not running (failed, or between states): adopt it.
		if err := setProperties(ctx, c, slice, props); err != nil {
			return err
		}
		ch = make(chan string, 1)
		if _, err := c.StartUnitContext(ctx, slice, "replace", ch); err != nil {
			return fmt.Errorf("start %s: %w", slice, err)
		}
		return waitJob(ctx, ch, "start", slice)
	}
	if err != nil {
		return fmt.Errorf("start transient unit %s: %w", slice, err)
	}
	return waitJob(ctx, ch, "start", slice)
}

func setProperties(ctx context.Context, c systemdConn, slice string, props []sddbus.Property) error {
	if err := c.SetUnitPropertiesContext(ctx, slice, true, props...); err != nil {
		return fmt.Errorf("set properties of %s: %w", slice, err)
	}
	return nil
}

// waitJob waits for a job's result on ch; anything but "done" is a failure.
func waitJob(ctx context.Context, ch <-chan string, verb, unit string) error {
	select {
	case res := <-ch:
		if res != "done" {
			return fmt.Errorf("%s %s: job %s", verb, unit, res)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%s %s: %w", verb, unit, ctx.Err())
	}
}

// Remove checks the cgroup files for processes and child cgroups first, and only then
// stops the slice: stopping a slice would stop, and so kill, whatever runs in it.
func (m *systemdManager) Remove(ctx context.Context, n Name) error {
	if len(n) == 0 {
		return errors.New("remove the root cgroup: it is the host's")
	}
	rel, slice := n.SystemdPath(), n.SystemdSlice()
	if err := m.h.checkEmpty(rel, slice); err != nil {
		return err
	}
	err := m.withConn(ctx, func(c systemdConn) error {
		ch := make(chan string, 1)
		_, err := c.StopUnitContext(ctx, slice, "replace", ch)
		switch {
		case dbusErrorName(err) == dbusNoSuchUnit:
			// Not loaded: nothing to stop.
		case err != nil:
			return fmt.Errorf("stop %s: %w", slice, err)
		default:
			if err := waitJob(ctx, ch, "stop", slice); err != nil {
				return err
			}
		}
		if err := c.ResetFailedUnitContext(ctx, slice); err != nil && dbusErrorName(err) != dbusNoSuchUnit {
			return fmt.Errorf("reset failed state of %s: %w", slice, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if m.h.unified {
		return m.h.awaitGone(ctx, rel, slice)
	}
	// What systemd does not manage (v1 hugetlb) is left for us.
	return m.h.rmdir(ctx, rel, slice)
}

// Kill kills through the slice's cgroup files, not with systemd's KillUnit: a slice has
// no processes of its own for systemd to kill, and those in the runtime's scopes below it
// must go too. Where the mount is read-only (ProtectControlGroups=yes), each process is
// signalled by its pid.
func (m *systemdManager) Kill(ctx context.Context, n Name) ([]int, error) {
	if len(n) == 0 {
		return nil, errors.New("kill the processes of the root cgroup: it is the host's")
	}
	return m.h.kill(ctx, n.SystemdPath(), n.SystemdSlice())
}

// Children reads the slices directly under n and keeps each one's last component.
func (m *systemdManager) Children(n Name) ([]string, error) {
	return m.h.children(n.SystemdPath(), func(dir string) (string, bool) {
		c, err := parseSlice(dir)
		if err != nil || len(c) != len(n)+1 {
			return "", false
		}
		return c[len(n)], true
	})
}

// setHugePages writes the hugetlb limits into the slice's cgroup, as systemd has no
// property for them. Where that cannot be done — no hugetlb controller in the slice (v2
// systemd does not delegate it) or a mount not writable — they are left as they are,
// without an error.
func (m *systemdManager) setHugePages(n Name, r Resources) error {
	if len(r.HugePages) == 0 {
		return nil
	}
	rel := n.SystemdPath()
	var dir, suffix string
	if m.h.unified {
		dir, suffix = filepath.Join(m.h.mount, rel), ".max"
		have, err := readList(filepath.Join(dir, "cgroup.controllers"))
		if err != nil || !slices.Contains(have, "hugetlb") {
			return nil
		}
	} else {
		d, ok := m.h.dir("hugetlb", rel)
		if !ok {
			return nil
		}
		dir, suffix = d, ".limit_in_bytes"
		if err := os.MkdirAll(dir, 0o755); err != nil {
			if unwritable(err) {
				return nil
			}
			return fmt.Errorf("create cgroup %s in the hugetlb hierarchy: %w", n.SystemdSlice(), err)
		}
	}
	for _, size := range slices.Sorted(maps.Keys(r.HugePages)) {
		err := m.h.set(dir, "hugetlb."+hugePageUnit(size)+suffix, strconv.FormatInt(r.HugePages[size], 10))
		if err != nil && !unwritable(err) {
			return err
		}
	}
	return nil
}

// unwritable is a cgroup file or directory that is not there for us to write.
func unwritable(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EROFS)
}

// withConn runs f on the connection to systemd, dialling again once if systemd dropped it
// (after a daemon-reexec, for one).
func (m *systemdManager) withConn(ctx context.Context, f func(systemdConn) error) error {
	c, err := m.connection(ctx)
	if err != nil {
		return err
	}
	err = f(c)
	if !errors.Is(err, dbus.ErrClosed) {
		return err
	}
	m.drop(c)
	if c, err = m.connection(ctx); err != nil {
		return err
	}
	return f(c)
}

func (m *systemdManager) connection(ctx context.Context) (systemdConn, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.conn == nil {
		c, err := m.dial(ctx)
		if err != nil {
			return nil, err
		}
		m.conn = c
	}
	return m.conn, nil
}

func (m *systemdManager) drop(c systemdConn) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.conn == c {
		m.conn.Close()
		m.conn = nil
	}
}

// systemdProperties are the unit properties for r: accounting on, and each limit r sets.
// Unlimited is math.MaxUint64 ("infinity").
func systemdProperties(r Resources, unified bool) []sddbus.Property {
	prop := func(name string, v any) sddbus.Property {
		return sddbus.Property{Name: name, Value: dbus.MakeVariant(v)}
	}
	props := []sddbus.Property{
		prop("MemoryAccounting", true),
		prop("CPUAccounting", true),
		prop("TasksAccounting", true),
	}
	if r.Memory != nil && *r.Memory != 0 {
		props = append(props, prop("MemoryMax", unlimitedAsMax(*r.Memory)))
	}
	if r.CPUShares != nil && *r.CPUShares != 0 {
		if unified {
			props = append(props, prop("CPUWeight", SharesToWeight(*r.CPUShares)))
		} else {
			props = append(props, prop("CPUShares", *r.CPUShares))
		}
	}
	period := uint64(defaultPeriodUs)
	if r.CPUPeriod != nil && *r.CPUPeriod != 0 {
		period = *r.CPUPeriod
	}
	if r.CPUQuota != nil {
		props = append(props, prop("CPUQuotaPerSecUSec", quotaPerSecond(*r.CPUQuota, period)))
	}
	if r.CPUPeriod != nil && *r.CPUPeriod != 0 {
		props = append(props, prop("CPUQuotaPeriodUSec", period))
	}
	if r.PidsLimit != nil {
		tasks := *r.PidsLimit
		if tasks == 0 {
			tasks = 1
		}
		props = append(props, prop("TasksMax", unlimitedAsMax(tasks)))
	}
	return props
}

// quotaPerSecond turns a CFS quota over period into systemd's CPU time per second,
// rounded up to whole 10ms as runc (and so the kubelet) does: systemd keeps the value as
// a whole percentage of a CPU, and rounding down would leave a container below less than
// its own quota.
func quotaPerSecond(quota int64, period uint64) uint64 {
	if quota <= 0 {
		return math.MaxUint64
	}
	perSec := uint64(quota) * 1000000 / period
	if rem := perSec % 10000; rem != 0 {
		perSec += 10000 - rem
	}
	return perSec
}

func unlimitedAsMax(v int64) uint64 {
	if v < 0 {
		return math.MaxUint64
	}
	return uint64(v)
}

// dbusErrorName is the D-Bus error name in err, "" if there is none.
func dbusErrorName(err error) string {
	var e dbus.Error
	if errors.As(err, &e) {
		return e.Name
	}
	var pe *dbus.Error
	if errors.As(err, &pe) && pe != nil {
		return pe.Name
	}
	return ""
}
