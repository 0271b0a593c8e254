package podsync

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/unitlet/unitlet/services/podsync/cgroups"
	"github.com/unitlet/unitlet/shared/daemon"
	"github.com/unitlet/unitlet/shared/nodeinfo"
)

type fakeRuntimeConfig struct {
	resp *runtimeapi.RuntimeConfigResponse
	err  error
}

func (f fakeRuntimeConfig) RuntimeConfig(context.Context, *runtimeapi.RuntimeConfigRequest, ...grpc.CallOption) (*runtimeapi.RuntimeConfigResponse, error) {
	return f.resp, f.err
}

func driverResponse(d runtimeapi.CgroupDriver) *runtimeapi.RuntimeConfigResponse {
	return &runtimeapi.RuntimeConfigResponse{Linux: &runtimeapi.LinuxRuntimeConfiguration{CgroupDriver: d}}
}

func TestCgroupDriverFromTheRuntime(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tt := range []struct {
		name       string
		configured string
		rt         fakeRuntimeConfig
		want       cgroups.Driver
		wantErr    string
	}{
		{"runtime without RuntimeConfig: the configuration's", "systemd", fakeRuntimeConfig{err: status.Error(codes.Unimplemented, "unknown method")}, cgroups.Systemd, ""},
		{"unset means cgroupfs", "", fakeRuntimeConfig{err: status.Error(codes.Unimplemented, "")}, cgroups.Cgroupfs, ""},
		{"runtime agrees", "systemd", fakeRuntimeConfig{resp: driverResponse(runtimeapi.CgroupDriver_SYSTEMD)}, cgroups.Systemd, ""},
		{"runtime disagrees", "cgroupfs", fakeRuntimeConfig{resp: driverResponse(runtimeapi.CgroupDriver_SYSTEMD)}, "", `cgroupDriver "cgroupfs": the container runtime uses the "systemd" cgroup driver`},
		{"runtime disagrees the other way", "systemd", fakeRuntimeConfig{resp: driverResponse(runtimeapi.CgroupDriver_CGROUPFS)}, "", `set cgroupDriver: cgroupfs`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			kc := &kubeletconfigv1beta1.KubeletConfiguration{CgroupDriver: tt.configured}
			got, err := cgroupDriver(context.Background(), tt.rt, kc, log)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("cgroupDriver = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

// fakeCgroups records what nodeCgroups asks of a cgroup manager.
type fakeCgroups struct {
	mu       sync.Mutex
	made     map[string]cgroups.Resources
	busy     map[string]bool // cgroups with processes
	stubborn map[string]bool // cgroups whose processes survive SIGKILL (uninterruptible sleep)
	removals []string
	kills    []string // cgroups Kill found processes in
}

func newFakeCgroups() *fakeCgroups {
	return &fakeCgroups{made: map[string]cgroups.Resources{}, busy: map[string]bool{}, stubborn: map[string]bool{}}
}

func (f *fakeCgroups) Driver() cgroups.Driver       { return cgroups.Cgroupfs }
func (f *fakeCgroups) Unified() bool                { return true }
func (f *fakeCgroups) Parent(n cgroups.Name) string { return n.CgroupfsPath() }
func (f *fakeCgroups) Path(n cgroups.Name) string   { return "/sys/fs/cgroup" + n.CgroupfsPath() }
func (f *fakeCgroups) Close() error                 { return nil }
func (f *fakeCgroups) Exists(n cgroups.Name) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.made[n.CgroupfsPath()]
	return ok || len(n) == 0
}

func (f *fakeCgroups) Ensure(_ context.Context, n cgroups.Name, r cgroups.Resources) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.made[n.CgroupfsPath()] = r
	return nil
}

func (f *fakeCgroups) Remove(_ context.Context, n cgroups.Name) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := n.CgroupfsPath()
	if f.busy[p] {
		return fmt.Errorf("remove %s: %w", p, cgroups.ErrNotEmpty)
	}
	var kids []string
	for q := range f.made {
		if rest, ok := strings.CutPrefix(q, p+"/"); ok && !strings.Contains(rest, "/") {
			kids = append(kids, rest)
		}
	}
	if len(kids) > 0 {
		slices.Sort(kids)
		return &cgroups.NotEmptyError{Cgroup: p, Children: kids}
	}
	delete(f.made, p)
	f.removals = append(f.removals, p)
	return nil
}

// Kill ends the processes of the cgroup and those below it, except stubborn ones.
func (f *fakeCgroups) Kill(_ context.Context, n cgroups.Name) ([]int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := n.CgroupfsPath()
	var found []int
	var left []int
	for q, busy := range f.busy {
		if !busy || (q != p && !strings.HasPrefix(q, p+"/")) {
			continue
		}
		found = append(found, len(found)+100)
		if f.stubborn[q] {
			left = append(left, found[len(found)-1])
			continue
		}
		f.busy[q] = false
	}
	if len(found) > 0 {
		f.kills = append(f.kills, p)
	}
	if len(left) > 0 {
		return found, &cgroups.NotEmptyError{Cgroup: p, PIDs: left}
	}
	return found, nil
}

func (f *fakeCgroups) Children(n cgroups.Name) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	prefix := n.CgroupfsPath() + "/"
	var out []string
	for p := range f.made {
		if rest, ok := strings.CutPrefix(p, prefix); ok && !strings.Contains(rest, "/") {
			out = append(out, rest)
		}
	}
	slices.Sort(out)
	return out, nil
}

func (f *fakeCgroups) shares(path string) uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s := f.made[path].CPUShares; s != nil {
		return *s
	}
	return 0
}

func testCgroupPod(uid string, cpuRequest string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p-" + uid, Namespace: "default", UID: types.UID(uid)},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}}
	if cpuRequest != "" {
		p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpuRequest)}
	}
	return p
}

func TestNodeCgroupsPodsAndCleanup(t *testing.T) {
	f := newFakeCgroups()
	active := map[types.UID]bool{}
	var mu sync.Mutex
	n := &nodeCgroups{
		m: f, perQOS: true, kubepods: cgroups.Name{"kubepods"}, pidsLimit: 100,
		log: slog.New(slog.NewTextHandler(io.Discard, nil)), pods: map[types.UID]*corev1.Pod{},
	}
	running := func() map[types.UID]bool { mu.Lock(); defer mu.Unlock(); return maps.Clone(active) }
	ctx := context.Background()
	a, b, be := testCgroupPod("a", "250m"), testCgroupPod("b", "500m"), testCgroupPod("be", "")
	for _, p := range []*corev1.Pod{a, b, be} {
		mu.Lock()
		active[p.UID] = true
		mu.Unlock()
		if err := n.EnsurePod(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	if got := n.Parent(a); got != "/kubepods/burstable/poda" {
		t.Errorf("Parent(a) = %q", got)
	}
	if got := n.Parent(be); got != "/kubepods/besteffort/podbe" {
		t.Errorf("Parent(be) = %q", got)
	}
	if r := f.made["/kubepods/burstable/poda"]; r.PidsLimit == nil || *r.PidsLimit != 100 {
		t.Errorf("pod a's cgroup: pids limit %v, want 100", r.PidsLimit)
	}
	if got, want := f.shares("/kubepods/burstable"), cgroups.MilliCPUToShares(750); got != want {
		t.Errorf("burstable shares = %d, want %d (the sum of 250m and 500m)", got, want)
	}
	if got := f.shares("/kubepods/besteffort"); got != 2 {
		t.Errorf("besteffort shares = %d, want 2", got)
	}
	// A resize of a's CPU request: the burstable shares follow.
	resized := testCgroupPod("a", "400m")
	if err := n.EnsurePod(ctx, resized); err != nil {
		t.Fatal(err)
	}
	if got, want := f.shares("/kubepods/burstable"), cgroups.MilliCPUToShares(900); got != want {
		t.Errorf("burstable shares after a's resize = %d, want %d (400m and 500m)", got, want)
	}
	if err := n.EnsurePod(ctx, a); err != nil {
		t.Fatal(err)
	}

	// a is gone and something of it still runs in its cgroup: killed, then the cgroup is
	// removed, as the kubelet destroys it. b is gone and empty: removed, and burstable's
	// shares drop. A cgroup of a pod this process never ran (made before a restart, its
	// worker maybe not started yet) goes once empty, and its processes are not killed;
	// an active pod's stays.
	f.busy["/kubepods/burstable/poda"] = true
	f.made["/kubepods/besteffort/podold"] = cgroups.Resources{}
	f.made["/kubepods/besteffort/podolder"] = cgroups.Resources{}
	f.busy["/kubepods/besteffort/podolder"] = true
	f.busy["/kubepods/besteffort/podbe"] = true
	mu.Lock()
	delete(active, "a")
	delete(active, "b")
	mu.Unlock()
	n.cleanup(ctx, running, noOrphans)
	if want := []string{"/kubepods/burstable/poda"}; !slices.Equal(f.kills, want) {
		t.Errorf("killed in %v, want only %v", f.kills, want)
	}
	for _, want := range []string{"/kubepods/burstable/poda", "/kubepods/burstable/podb", "/kubepods/besteffort/podold"} {
		if !slices.Contains(f.removals, want) {
			t.Errorf("%s not removed (removals %v)", want, f.removals)
		}
	}
	if slices.Contains(f.removals, "/kubepods/besteffort/podbe") {
		t.Error("an active pod's cgroup was removed")
	}
	if slices.Contains(f.removals, "/kubepods/besteffort/podolder") {
		t.Error("a cgroup with processes of a pod this process never ran was removed")
	}
	// The older pod's last process exits: its cgroup goes at the next round.
	f.busy["/kubepods/besteffort/podolder"] = false
	n.cleanup(ctx, running, noOrphans)
	if !slices.Contains(f.removals, "/kubepods/besteffort/podolder") {
		t.Errorf("the emptied cgroup not removed (removals %v)", f.removals)
	}
	if got := f.shares("/kubepods/burstable"); got != 2 {
		t.Errorf("burstable shares with no burstable pod = %d, want 2", got)
	}
}

// A gone pod's cgroup that still holds a child cgroup the runtime left behind (no process
// in it) is removed, the child first, as the kubelet removes a pod cgroup's whole tree; a
// child with a process keeps both (fault run 18: most pods' cgroups were kept for good).
func TestNodeCgroupsCleanupRemovesChildCgroupsTheRuntimeLeft(t *testing.T) {
	f := newFakeCgroups()
	n := &nodeCgroups{
		m: f, perQOS: true, kubepods: cgroups.Name{"kubepods"},
		log: slog.New(slog.NewTextHandler(io.Discard, nil)), pods: map[types.UID]*corev1.Pod{},
	}
	ctx := context.Background()
	if err := n.EnsurePod(ctx, testCgroupPod("left", "")); err != nil {
		t.Fatal(err)
	}
	if err := n.EnsurePod(ctx, testCgroupPod("busy", "")); err != nil {
		t.Fatal(err)
	}
	f.made["/kubepods/besteffort/podleft/0123abcd"] = cgroups.Resources{}
	f.made["/kubepods/besteffort/podbusy/4567ef01"] = cgroups.Resources{}
	f.busy["/kubepods/besteffort/podbusy/4567ef01"] = true
	f.stubborn["/kubepods/besteffort/podbusy/4567ef01"] = true
	n.cleanup(ctx, func() map[types.UID]bool { return nil }, noOrphans)
	if want := []string{"/kubepods/besteffort/podleft/0123abcd", "/kubepods/besteffort/podleft"}; !slices.Equal(f.removals, want) {
		t.Errorf("removals %v, want %v", f.removals, want)
	}
	if !f.Exists(cgroups.Name{"kubepods", "besteffort", "podbusy"}) {
		t.Error("a pod cgroup whose child has a process that survived the kill was removed")
	}
}

// The kill waits for the pod's worker to have ended, asked again just before it: a pod
// that became active since the cgroups were listed (a static pod back with the same UID)
// keeps its processes; one whose processes survive SIGKILL keeps its cgroup for the next
// round.
func TestNodeCgroupsCleanupKillsOnlyWhatAnEndedPodLeft(t *testing.T) {
	f := newFakeCgroups()
	n := &nodeCgroups{
		m: f, perQOS: true, kubepods: cgroups.Name{"kubepods"},
		log: slog.New(slog.DiscardHandler), pods: map[types.UID]*corev1.Pod{},
	}
	ctx := context.Background()
	for _, uid := range []string{"back", "stuck"} {
		if err := n.EnsurePod(ctx, testCgroupPod(uid, "")); err != nil {
			t.Fatal(err)
		}
		f.busy["/kubepods/besteffort/pod"+uid] = true
	}
	f.stubborn["/kubepods/besteffort/podstuck"] = true
	calls := 0
	active := func() map[types.UID]bool {
		calls++
		if calls == 1 {
			return nil // the listing: neither is active
		}
		return map[types.UID]bool{"back": true}
	}
	n.cleanup(ctx, active, noOrphans)
	if want := []string{"/kubepods/besteffort/podstuck"}; !slices.Equal(f.kills, want) {
		t.Errorf("killed in %v, want only %v", f.kills, want)
	}
	if len(f.removals) != 0 {
		t.Errorf("removed %v: the returned pod's cgroup and the one whose process survived must stay", f.removals)
	}
	if _, ok := n.pods["stuck"]; !ok {
		t.Error("the pod whose cgroup could not be emptied is forgotten: the next round would not kill again")
	}
}

// noOrphans is Service.RuntimeRemovable before every pod source has reported.
func noOrphans() func(types.UID) bool { return func(types.UID) bool { return false } }

// A pod cgroup this process never ran (its pod ended while podsync was down) has its
// processes killed once orphaned says the pod may go (every source has reported and no
// worker runs it), and not before: a pod found after a restart may only not have its
// worker yet.
func TestNodeCgroupsCleanupKillsAnOrphanedCgroupOnceTheSourcesReported(t *testing.T) {
	f := newFakeCgroups()
	n := &nodeCgroups{
		m: f, perQOS: true, kubepods: cgroups.Name{"kubepods"},
		log: slog.New(slog.DiscardHandler), pods: map[types.UID]*corev1.Pod{},
	}
	ctx := context.Background()
	for _, uid := range []string{"orphan", "wanted"} {
		f.made["/kubepods/besteffort/pod"+uid] = cgroups.Resources{}
		f.busy["/kubepods/besteffort/pod"+uid] = true
	}
	none := func() map[types.UID]bool { return nil }
	n.cleanup(ctx, none, noOrphans)
	if len(f.kills) != 0 || len(f.removals) != 0 {
		t.Fatalf("before the sources reported: killed in %v, removed %v; want nothing touched", f.kills, f.removals)
	}
	orphaned := func() func(types.UID) bool { return func(uid types.UID) bool { return uid == "orphan" } }
	n.cleanup(ctx, none, orphaned)
	if want := []string{"/kubepods/besteffort/podorphan"}; !slices.Equal(f.kills, want) {
		t.Errorf("killed in %v, want only %v", f.kills, want)
	}
	if want := []string{"/kubepods/besteffort/podorphan"}; !slices.Equal(f.removals, want) {
		t.Errorf("removed %v, want %v", f.removals, want)
	}
}

// roCgroups fails every Ensure as a read-only cgroup filesystem does.
type roCgroups struct{ *fakeCgroups }

func (roCgroups) Ensure(_ context.Context, n cgroups.Name, _ cgroups.Resources) error {
	return fmt.Errorf("make cgroup %s: mkdir /sys/fs/cgroup%s: %w", n, n.CgroupfsPath(), syscall.EROFS)
}

func TestReadOnlyCgroupfsSaysWhatToDo(t *testing.T) {
	n := &nodeCgroups{m: roCgroups{newFakeCgroups()}, perQOS: true, kubepods: cgroups.Name{"kubepods"},
		log: slog.New(slog.NewTextHandler(io.Discard, nil)), pods: map[types.UID]*corev1.Pod{}}
	err := n.ensure(context.Background(), n.kubepods, cgroups.Resources{})
	if err == nil || !strings.Contains(err.Error(), "cgroupDriver: systemd") || !strings.Contains(err.Error(), "ProtectControlGroups=no") {
		t.Fatalf("err = %v, want one that names both ways out", err)
	}
	if !daemon.IsConfigError(err) {
		t.Errorf("err = %v: not a configuration error (exit 2, no restart loop)", err)
	}
}

// The node's cgroups take the runtime's driver: a runtime that disagrees with the
// configuration stops the start before any cgroup is touched.
func TestNodeCgroupsRefuseTheRuntimesOtherDriver(t *testing.T) {
	kc := &kubeletconfigv1beta1.KubeletConfiguration{CgroupDriver: "cgroupfs"}
	rt := fakeRuntimeConfig{resp: driverResponse(runtimeapi.CgroupDriver_SYSTEMD)}
	_, err := newNodeCgroups(context.Background(), rt, kc, nodeinfo.Machine{}, t.TempDir(), slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), `the container runtime uses the "systemd" cgroup driver`) || !daemon.IsConfigError(err) {
		t.Fatalf("err = %v, want the driver mismatch as a configuration error", err)
	}
}

// Without QoS cgroups the sweep removes nothing: its loop waits and closes the manager.
func TestNodeCgroupsSweepWaitsWithoutQOSCgroups(t *testing.T) {
	n := &nodeCgroups{m: newFakeCgroups(), log: slog.New(slog.DiscardHandler), pods: map[types.UID]*corev1.Pod{}}
	endsWithCtx(t, n.Sweep(func() map[types.UID]bool { t.Error("active asked without QoS cgroups"); return nil }, noOrphans))
}
