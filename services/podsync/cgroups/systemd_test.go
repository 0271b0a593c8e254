package cgroups

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
)

// fakeSystemd records the calls the systemd driver makes and answers as systemd would.
type fakeSystemd struct {
	state     map[string]string // ActiveState by unit; "inactive" when absent
	startErr  error             // StartTransientUnit's error
	stopErr   error             // StopUnit's error
	resetErr  error             // ResetFailedUnit's error
	getErr    error             // GetUnitProperty's error
	jobResult string            // "" is "done"; "never" sends no result
	onStop    func(unit string)
	calls     []string
	props     [][]sddbus.Property // of each start or set call
	closed    bool
}

func (f *fakeSystemd) job(ch chan<- string) {
	switch f.jobResult {
	case "never":
	case "":
		ch <- "done"
	default:
		ch <- f.jobResult
	}
}

func (f *fakeSystemd) GetUnitPropertyContext(_ context.Context, unit, property string) (*sddbus.Property, error) {
	f.calls = append(f.calls, "get "+unit+" "+property)
	if f.getErr != nil {
		return nil, f.getErr
	}
	s, ok := f.state[unit]
	if !ok {
		s = "inactive"
	}
	return &sddbus.Property{Name: property, Value: dbus.MakeVariant(s)}, nil
}

func (f *fakeSystemd) StartTransientUnitContext(_ context.Context, name, mode string, props []sddbus.Property, ch chan<- string) (int, error) {
	f.calls = append(f.calls, "start-transient "+name+" "+mode)
	f.props = append(f.props, props)
	if f.startErr != nil {
		return 0, f.startErr
	}
	f.job(ch)
	return 1, nil
}

func (f *fakeSystemd) StartUnitContext(_ context.Context, name, mode string, ch chan<- string) (int, error) {
	f.calls = append(f.calls, "start "+name+" "+mode)
	f.job(ch)
	return 2, nil
}

func (f *fakeSystemd) SetUnitPropertiesContext(_ context.Context, name string, runtime bool, props ...sddbus.Property) error {
	f.calls = append(f.calls, fmt.Sprintf("set %s runtime=%t", name, runtime))
	f.props = append(f.props, props)
	return nil
}

func (f *fakeSystemd) StopUnitContext(_ context.Context, name, mode string, ch chan<- string) (int, error) {
	f.calls = append(f.calls, "stop "+name+" "+mode)
	if f.stopErr != nil {
		return 0, f.stopErr
	}
	if f.onStop != nil {
		f.onStop(name)
	}
	f.job(ch)
	return 3, nil
}

func (f *fakeSystemd) ResetFailedUnitContext(_ context.Context, name string) error {
	f.calls = append(f.calls, "reset-failed "+name)
	return f.resetErr
}

func (f *fakeSystemd) Close() { f.closed = true }

// newFakeSystemdManager is the systemd driver over fake and the fake v2 mount f.
func newFakeSystemdManager(t *testing.T, fake *fakeSystemd) (*systemdManager, *fakeV2) {
	f, h := newFakeV2(t, "cpuset cpu io memory pids")
	return &systemdManager{h: h, dial: func(context.Context) (systemdConn, error) { return fake, nil }}, f
}

// propsString shows properties as name=value(signature), for comparing.
func propsString(props []sddbus.Property) string {
	var b []string
	for _, p := range props {
		b = append(b, fmt.Sprintf("%s=%v(%s)", p.Name, p.Value.Value(), p.Value.Signature()))
	}
	return strings.Join(b, " ")
}

func TestSystemdProperties(t *testing.T) {
	full := Resources{Memory: ptr(256 * mi), CPUShares: ptr[uint64](512), CPUQuota: ptr[int64](25000),
		CPUPeriod: ptr[uint64](100000), PidsLimit: ptr[int64](100), HugePages: map[int64]int64{2 * mi: 0}}
	unlimited := Resources{Memory: ptr[int64](-1), CPUQuota: ptr[int64](-1), PidsLimit: ptr[int64](-1)}
	max := fmt.Sprint(uint64(math.MaxUint64))
	acct := "MemoryAccounting=true(b) CPUAccounting=true(b) TasksAccounting=true(b)"
	tests := []struct {
		name    string
		r       Resources
		unified bool
		want    string
	}{
		{"v2", full, true, acct + " MemoryMax=268435456(t) CPUWeight=20(t) CPUQuotaPerSecUSec=250000(t) CPUQuotaPeriodUSec=100000(t) TasksMax=100(t)"},
		{"v1", full, false, acct + " MemoryMax=268435456(t) CPUShares=512(t) CPUQuotaPerSecUSec=250000(t) CPUQuotaPeriodUSec=100000(t) TasksMax=100(t)"},
		{"unlimited", unlimited, true, acct + " MemoryMax=" + max + "(t) CPUQuotaPerSecUSec=" + max + "(t) TasksMax=" + max + "(t)"},
		{"nothing set", Resources{}, true, acct},
		{"a fraction of a percent rounds up to 10ms a second", Resources{CPUQuota: ptr[int64](1500), CPUPeriod: ptr[uint64](100000)}, true,
			acct + " CPUQuotaPerSecUSec=20000(t) CPUQuotaPeriodUSec=100000(t)"},
		{"another period", Resources{CPUQuota: ptr[int64](25000), CPUPeriod: ptr[uint64](50000)}, true,
			acct + " CPUQuotaPerSecUSec=500000(t) CPUQuotaPeriodUSec=50000(t)"},
		{"quota without a period is over 100ms", Resources{CPUQuota: ptr[int64](50000)}, false, acct + " CPUQuotaPerSecUSec=500000(t)"},
		{"pids 0 is 1", Resources{PidsLimit: ptr[int64](0)}, true, acct + " TasksMax=1(t)"},
	}
	for _, tt := range tests {
		if got := propsString(systemdProperties(tt.r, tt.unified)); got != tt.want {
			t.Errorf("%s:\n got %s\nwant %s", tt.name, got, tt.want)
		}
	}
}

func TestSystemdEnsureStartsAMissingSlice(t *testing.T) {
	fake := &fakeSystemd{}
	m, _ := newFakeSystemdManager(t, fake)
	pod := Name{"kubepods", "burstable", "pod12-34"}
	r := Resources{Memory: ptr(gi), CPUShares: ptr[uint64](1024)}
	if err := m.Ensure(context.Background(), pod, r); err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	slice := "kubepods-burstable-pod12_34.slice"
	if want := []string{"get " + slice + " ActiveState", "start-transient " + slice + " replace"}; !reflect.DeepEqual(fake.calls, want) {
		t.Fatalf("calls %q, want %q", fake.calls, want)
	}
	want := "Description=unitlet cgroup /kubepods/burstable/pod12-34(s) DefaultDependencies=false(b) " + propsString(systemdProperties(r, true))
	if got := propsString(fake.props[0]); got != want {
		t.Errorf("start properties\n got %s\nwant %s", got, want)
	}
	if m.Parent(pod) != "/kubepods.slice/kubepods-burstable.slice/"+slice {
		t.Errorf("Parent = %q", m.Parent(pod))
	}
}

func TestSystemdEnsureUpdatesAnActiveSlice(t *testing.T) {
	slice := "kubepods-besteffort.slice"
	fake := &fakeSystemd{state: map[string]string{slice: "active"}}
	m, _ := newFakeSystemdManager(t, fake)
	r := Resources{CPUShares: ptr[uint64](2)}
	if err := m.Ensure(context.Background(), Name{"kubepods", "besteffort"}, r); err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	if want := []string{"get " + slice + " ActiveState", "set " + slice + " runtime=true"}; !reflect.DeepEqual(fake.calls, want) {
		t.Fatalf("calls %q, want %q", fake.calls, want)
	}
	if got, want := propsString(fake.props[0]), propsString(systemdProperties(r, true)); got != want {
		t.Errorf("set properties\n got %s\nwant %s (no Description or DefaultDependencies on a live unit)", got, want)
	}
}

func TestSystemdEnsureAdoptsAnExistingUnit(t *testing.T) {
	slice := "kubepods.slice"
	fake := &fakeSystemd{startErr: dbus.Error{Name: dbusUnitExists, Body: []any{"Unit kubepods.slice already exists."}}}
	m, _ := newFakeSystemdManager(t, fake)
	if err := m.Ensure(context.Background(), Name{"kubepods"}, Resources{Memory: ptr(gi)}); err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	want := []string{"get " + slice + " ActiveState", "start-transient " + slice + " replace", "set " + slice + " runtime=true", "start " + slice + " replace"}
	if !reflect.DeepEqual(fake.calls, want) {
		t.Fatalf("calls %q, want %q", fake.calls, want)
	}
}

func TestSystemdEnsureFailures(t *testing.T) {
	for _, tt := range []struct {
		name    string
		fake    *fakeSystemd
		timeout time.Duration
		want    string
	}{
		{"failed job", &fakeSystemd{jobResult: "failed"}, time.Minute, "start kubepods.slice: job failed"},
		{"no job result", &fakeSystemd{jobResult: "never"}, 50 * time.Millisecond, "start kubepods.slice: context deadline exceeded"},
		{"start refused", &fakeSystemd{startErr: dbus.Error{Name: "org.freedesktop.DBus.Error.AccessDenied", Body: []any{"denied"}}}, time.Minute,
			"start transient unit kubepods.slice: denied"},
	} {
		m, _ := newFakeSystemdManager(t, tt.fake)
		ctx, cancel := context.WithTimeout(context.Background(), tt.timeout)
		err := m.Ensure(ctx, Name{"kubepods"}, Resources{})
		cancel()
		if err == nil || err.Error() != tt.want {
			t.Errorf("%s: Ensure = %v, want %q", tt.name, err, tt.want)
		}
	}
}

func TestSystemdRemoveNeverStopsASliceWithProcesses(t *testing.T) {
	fake := &fakeSystemd{}
	m, f := newFakeSystemdManager(t, fake)
	pod := Name{"kubepods", "burstable", "pod12-34"}
	dir := filepath.Join(f.dir, pod.SystemdPath())
	if err := os.MkdirAll(filepath.Join(dir, "crio-abc.scope"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "crio-abc.scope", "cgroup.procs"), []byte("4242\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := m.Remove(context.Background(), pod)
	if !errors.Is(err, ErrNotEmpty) || err.Error() != "cgroup kubepods-burstable-pod12_34.slice still has processes: 4242" {
		t.Fatalf("Remove = %v, want ErrNotEmpty naming pid 4242", err)
	}
	if len(fake.calls) != 0 {
		t.Fatalf("Remove talked to systemd with a process left: %q", fake.calls)
	}

	// The process gone but its scope left: still refused, still no stop.
	if err := os.WriteFile(filepath.Join(dir, "crio-abc.scope", "cgroup.procs"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := m.Remove(context.Background(), pod); !errors.Is(err, ErrNotEmpty) || len(fake.calls) != 0 {
		t.Fatalf("Remove with a child cgroup = %v, calls %q; want ErrNotEmpty and no calls", err, fake.calls)
	}
}

func TestSystemdRemoveStopsAnEmptySlice(t *testing.T) {
	slice := "kubepods-burstable-pod12_34.slice"
	fake := &fakeSystemd{}
	m, f := newFakeSystemdManager(t, fake)
	pod := Name{"kubepods", "burstable", "pod12-34"}
	dir := filepath.Join(f.dir, pod.SystemdPath())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	fake.onStop = func(string) { os.RemoveAll(dir) } // systemd removes the cgroup
	if err := m.Remove(context.Background(), pod); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if want := []string{"stop " + slice + " replace", "reset-failed " + slice}; !reflect.DeepEqual(fake.calls, want) {
		t.Fatalf("calls %q, want %q", fake.calls, want)
	}

	// Not loaded at all: a missing cgroup is removed already.
	notLoaded := dbus.Error{Name: dbusNoSuchUnit, Body: []any{"Unit " + slice + " not loaded."}}
	fake2 := &fakeSystemd{stopErr: notLoaded, resetErr: notLoaded}
	m2, _ := newFakeSystemdManager(t, fake2)
	if err := m2.Remove(context.Background(), pod); err != nil {
		t.Fatalf("Remove of a missing slice = %v, want nil", err)
	}
}

// The stop job can end before the kernel lets systemd remove the cgroup: Remove waits a
// moment for it, removes nothing itself (the unit's cgroup mount is read-only), and reports
// one still there as not empty, for the next cleanup.
func TestSystemdRemoveWaitsForTheCgroupSystemdRemovesLate(t *testing.T) {
	pod := Name{"kubepods", "besteffort", "pod56"}
	fake := &fakeSystemd{}
	m, f := newFakeSystemdManager(t, fake)
	dir := filepath.Join(f.dir, pod.SystemdPath())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	fake.onStop = func(string) { time.AfterFunc(100*time.Millisecond, func() { os.RemoveAll(dir) }) }
	if err := m.Remove(context.Background(), pod); err != nil {
		t.Fatalf("Remove with the cgroup gone 100 ms after the stop: %v, want nil", err)
	}

	fake.onStop = nil
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	err := m.Remove(context.Background(), pod)
	if !errors.Is(err, ErrNotEmpty) {
		t.Fatalf("Remove with the cgroup left after the stop = %v, want ErrNotEmpty", err)
	}
	if !isDir(dir) {
		t.Fatal("Remove removed the cgroup systemd left: it must leave it to systemd")
	}
}

func TestSystemdChildrenAndExists(t *testing.T) {
	m, f := newFakeSystemdManager(t, &fakeSystemd{})
	kubepods := Name{"kubepods"}
	for _, d := range []string{
		"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod12_34.slice/crio-abc.scope",
		"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod56.slice",
		"kubepods.slice/kubepods-besteffort.slice",
		"kubepods.slice/kubepods-pod78.slice",
		"kubepods.slice/stray",
	} {
		if err := os.MkdirAll(filepath.Join(f.dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range []struct {
		n    Name
		want []string
	}{
		{kubepods, []string{"besteffort", "burstable", "pod78"}},
		{kubepods.Child("burstable"), []string{"pod12-34", "pod56"}},
		{kubepods.Child("burstable").Child("pod12-34"), nil},
		{kubepods.Child("guaranteed"), nil},
	} {
		if got, err := m.Children(tt.n); err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Children(%s) = %q, %v; want %q", tt.n, got, err, tt.want)
		}
	}
	if !m.Exists(kubepods.Child("burstable")) || m.Exists(kubepods.Child("guaranteed")) {
		t.Error("Exists does not follow the slice directories")
	}
	if got, want := m.Path(kubepods.Child("besteffort")), filepath.Join(f.dir, "kubepods.slice/kubepods-besteffort.slice"); got != want {
		t.Errorf("Path = %q, want %q", got, want)
	}
}

func TestSystemdHugePages(t *testing.T) {
	fake := &fakeSystemd{}
	m, f := newFakeSystemdManager(t, fake)
	pod := Name{"kubepods", "pod1"}
	dir := filepath.Join(f.dir, pod.SystemdPath())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	r := Resources{HugePages: map[int64]int64{2 * mi: 4 * mi}}

	// systemd did not give the slice hugetlb: left alone, no error.
	if err := m.Ensure(context.Background(), pod, r); err != nil {
		t.Fatalf("Ensure without hugetlb: %v", err)
	}
	if got := f.take(); len(got) != 0 {
		t.Errorf("wrote %q into a slice without hugetlb", got)
	}

	if err := os.WriteFile(filepath.Join(dir, "cgroup.controllers"), []byte("cpu memory hugetlb pids"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := m.Ensure(context.Background(), pod, r); err != nil {
		t.Fatalf("Ensure with hugetlb: %v", err)
	}
	if got, want := f.take(), []string{"kubepods.slice/kubepods-pod1.slice/hugetlb.2MB.max=4194304"}; !reflect.DeepEqual(got, want) {
		t.Errorf("wrote %q, want %q", got, want)
	}
}

func TestSystemdRedialsAfterTheConnectionCloses(t *testing.T) {
	dead := &fakeSystemd{getErr: dbus.ErrClosed}
	live := &fakeSystemd{state: map[string]string{"kubepods.slice": "active"}}
	conns := []*fakeSystemd{dead, live}
	_, h := newFakeV2(t, "cpu memory pids")
	m := &systemdManager{h: h, dial: func(context.Context) (systemdConn, error) {
		if len(conns) == 0 {
			return nil, errors.New("no more connections")
		}
		c := conns[0]
		conns = conns[1:]
		return c, nil
	}}
	if err := m.Ensure(context.Background(), Name{"kubepods"}, Resources{}); err != nil {
		t.Fatalf("Ensure after a dropped connection: %v", err)
	}
	if !dead.closed || len(live.calls) != 2 {
		t.Errorf("dead closed %t, live calls %q", dead.closed, live.calls)
	}
	if err := m.Close(); err != nil || !live.closed {
		t.Errorf("Close = %v, live closed %t", err, live.closed)
	}
}
