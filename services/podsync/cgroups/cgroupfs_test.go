package cgroups

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// hostMount is where the host running the tests has its cgroups.
const hostMount = "/sys/fs/cgroup"

// TestCgroupfsReal makes, updates and removes real cgroups with the cgroupfs driver: on
// the host's cgroup v1 hierarchies, or, on a host with only cgroup v2, on that.
func TestCgroupfsReal(t *testing.T) {
	unified := requireHostCgroups(t)
	m, err := New(Cgroupfs, hostMount)
	if err != nil {
		t.Fatalf("New(cgroupfs, %s): %v", hostMount, err)
	}
	defer m.Close()
	if m.Unified() != unified {
		t.Fatalf("Unified() = %t, but the host's cgroup v2 is %t", m.Unified(), unified)
	}
	dirs := hostHierarchies(t, unified)
	if !unified && len(dirs) < 3 {
		t.Fatalf("found only %q as cgroup v1 hierarchies in /proc/self/mountinfo", dirs)
	}
	exerciseReal(t, m, dirs, !unified)
}

// TestCgroupfsRealHybridV2 runs the same steps with the cgroupfs driver on the cgroup v2
// tree a hybrid host mounts at /sys/fs/cgroup/unified: no controllers there, so it proves
// the v2 directories, the process check and the removal, not the limits.
func TestCgroupfsRealHybridV2(t *testing.T) {
	mount := filepath.Join(hostMount, "unified")
	if !exists(filepath.Join(mount, "cgroup.controllers")) {
		// A v2-only host: its one v2 tree is at the mount point itself.
		mount = hostMount
		if !exists(filepath.Join(mount, "cgroup.controllers")) {
			t.Fatalf("no cgroup v2 tree at %s/unified (a hybrid host) or %s (a v2-only host): mount cgroup2 at one of them", hostMount, hostMount)
		}
	}
	requireHostCgroups(t)
	m, err := New(Cgroupfs, mount)
	if err != nil {
		t.Fatalf("New(cgroupfs, %s): %v", mount, err)
	}
	if !m.Unified() {
		t.Fatalf("Unified() = false for %s", mount)
	}
	exerciseReal(t, m, []string{mount}, false)
}

// exerciseReal is the real-cgroup scenario. dirs are the hierarchy roots the cgroup must
// appear in; limits says whether the controllers are there to read the limits back.
func exerciseReal(t *testing.T, m Manager, dirs []string, v1Limits bool) {
	ctx := context.Background()
	root := Name{"unitlet-test-" + randomHex(t)}
	t.Cleanup(func() { removeTestTree(t, dirs, root) })
	burstable := root.Child("kubepods").Child("burstable")
	pod := burstable.Child("pod1234-abcd")
	rel := pod.CgroupfsPath()
	unified := m.Unified()
	withLimits := v1Limits || (unified && slices.Contains(readFields(t, filepath.Join(dirs[0], "cgroup.controllers")), "memory"))

	first := Resources{Memory: ptr(256 * mi), CPUShares: ptr[uint64](512), CPUQuota: ptr[int64](50000),
		CPUPeriod: ptr[uint64](100000), PidsLimit: ptr[int64](100)}
	if err := m.Ensure(ctx, pod, first); err != nil {
		t.Fatalf("Ensure(%s): %v", pod, err)
	}
	for _, d := range dirs {
		if !isDir(filepath.Join(d, rel)) {
			t.Fatalf("Ensure made no %s in hierarchy %s", rel, d)
		}
	}
	wantPath := filepath.Join(dirs[0], rel)
	if !unified {
		wantPath = filepath.Join(hostMount, "memory", rel)
	}
	if got := m.Path(pod); got != wantPath {
		t.Errorf("Path(%s) = %q, want %q", pod, got, wantPath)
	}
	if got := m.Parent(pod); got != rel {
		t.Errorf("Parent(%s) = %q, want %q", pod, got, rel)
	}
	if !m.Exists(pod) || m.Exists(root.Child("nope")) {
		t.Errorf("Exists(%s) = %t, Exists(nope) = %t", pod, m.Exists(pod), m.Exists(root.Child("nope")))
	}
	if withLimits {
		checkLimits(t, m, pod, unified, map[string]string{
			"memory": "268435456", "shares": "512", "weight": "20", "quota": "50000", "period": "100000", "pids": "100",
		})
	}
	if !unified {
		cpuset := filepath.Join(hostMount, "cpuset")
		want := readTrimmedT(t, filepath.Join(cpuset, "cpuset.cpus"))
		if got := readTrimmedT(t, filepath.Join(cpuset, rel, "cpuset.cpus")); got != want {
			t.Errorf("pod's cpuset.cpus = %q, want the root's %q", got, want)
		}
		if got := readTrimmedT(t, filepath.Join(cpuset, rel, "cpuset.mems")); got == "" {
			t.Error("pod's cpuset.mems is empty")
		}
	}

	// A real process in the pod's cgroup, in every hierarchy.
	sleep := exec.Command("sleep", "300")
	if err := sleep.Start(); err != nil {
		t.Fatalf("start sleep: %v", err)
	}
	pid := sleep.Process.Pid
	t.Cleanup(func() { sleep.Process.Kill(); sleep.Wait() })
	for _, d := range dirs {
		if err := os.WriteFile(filepath.Join(d, rel, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
			t.Fatalf("move sleep %d into %s: %v", pid, filepath.Join(d, rel), err)
		}
	}

	// Ensure again adopts the cgroup and updates it; the process stays where it is.
	second := Resources{Memory: ptr(128 * mi), CPUShares: ptr[uint64](256), CPUQuota: ptr[int64](-1),
		CPUPeriod: ptr[uint64](50000), PidsLimit: ptr[int64](-1)}
	if err := m.Ensure(ctx, pod, second); err != nil {
		t.Fatalf("Ensure(%s) again: %v", pod, err)
	}
	if withLimits {
		checkLimits(t, m, pod, unified, map[string]string{
			"memory": "134217728", "shares": "256", "weight": "10", "quota": "-1", "period": "50000", "pids": "max",
		})
	}
	checkHasPid(t, dirs, rel, pid)

	err := m.Remove(ctx, pod)
	if !errors.Is(err, ErrNotEmpty) {
		t.Fatalf("Remove(%s) with sleep %d in it = %v, want ErrNotEmpty", pod, pid, err)
	}
	var ne *NotEmptyError
	if !errors.As(err, &ne) || !reflect.DeepEqual(ne.PIDs, []int{pid}) {
		t.Errorf("Remove's error %v does not name exactly pid %d", err, pid)
	}
	if want := "cgroup " + rel + " still has processes: " + strconv.Itoa(pid); err.Error() != want {
		t.Errorf("Remove's error = %q, want %q", err, want)
	}
	if err := sleep.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("Remove touched sleep %d: %v", pid, err)
	}
	checkHasPid(t, dirs, rel, pid)
	for _, d := range dirs {
		if !isDir(filepath.Join(d, rel)) {
			t.Fatalf("refused Remove still took %s from %s", rel, d)
		}
	}

	if got, err := m.Children(burstable); err != nil || !reflect.DeepEqual(got, []string{"pod1234-abcd"}) {
		t.Errorf("Children(%s) = %q, %v; want [pod1234-abcd]", burstable, got, err)
	}
	if got, err := m.Children(root); err != nil || !reflect.DeepEqual(got, []string{"kubepods"}) {
		t.Errorf("Children(%s) = %q, %v; want [kubepods]", root, got, err)
	}
	if got, err := m.Children(root.Child("nope")); err != nil || got != nil {
		t.Errorf("Children(missing) = %q, %v; want nil, nil", got, err)
	}

	sleep.Process.Kill()
	sleep.Wait()

	err = m.Remove(ctx, burstable)
	if !errors.As(err, &ne) || !reflect.DeepEqual(ne.Children, []string{"pod1234-abcd"}) || !errors.Is(err, ErrNotEmpty) {
		t.Errorf("Remove(%s) with a pod under it = %v, want ErrNotEmpty naming the pod", burstable, err)
	}
	// A child cgroup a runtime left behind (runc's for a container, no process in it): the
	// pod's Remove names it, the child's own Remove takes it, and then the pod goes.
	left := "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0"
	for _, d := range dirs {
		if err := os.Mkdir(filepath.Join(d, rel, left), 0o755); err != nil {
			t.Fatalf("make a runtime's child cgroup in %s: %v", d, err)
		}
	}
	err = m.Remove(ctx, pod)
	if !errors.As(err, &ne) || !reflect.DeepEqual(ne.Children, []string{left}) {
		t.Fatalf("Remove(%s) with an empty child cgroup = %v, want ErrNotEmpty naming the child", pod, err)
	}
	if err := m.Remove(ctx, pod.Child(left)); err != nil {
		t.Fatalf("Remove of the empty child cgroup: %v", err)
	}
	if err := m.Remove(ctx, pod); err != nil {
		t.Fatalf("Remove(%s) once empty: %v", pod, err)
	}
	for _, d := range dirs {
		if exists(filepath.Join(d, rel)) {
			t.Errorf("Remove left %s in %s", rel, d)
		}
	}
	if m.Exists(pod) {
		t.Errorf("Exists(%s) after Remove", pod)
	}
	if err := m.Remove(ctx, pod); err != nil {
		t.Errorf("Remove of a missing cgroup = %v, want nil", err)
	}
	for _, n := range []Name{burstable, root.Child("kubepods"), root} {
		if err := m.Remove(ctx, n); err != nil {
			t.Fatalf("Remove(%s): %v", n, err)
		}
	}
	for _, d := range dirs {
		if exists(filepath.Join(d, root.CgroupfsPath())) {
			t.Errorf("Remove left %s in %s", root, d)
		}
	}
}

// checkLimits reads the limit files back. want has the values by kind; which files hold
// them depends on the version.
func checkLimits(t *testing.T, m Manager, n Name, unified bool, want map[string]string) {
	t.Helper()
	rel := n.CgroupfsPath()
	files := map[string]string{ // file → want
		filepath.Join(hostMount, "memory", rel, "memory.limit_in_bytes"): want["memory"],
		filepath.Join(hostMount, "cpu", rel, "cpu.shares"):               want["shares"],
		filepath.Join(hostMount, "cpu", rel, "cpu.cfs_quota_us"):         want["quota"],
		filepath.Join(hostMount, "cpu", rel, "cpu.cfs_period_us"):        want["period"],
		filepath.Join(hostMount, "pids", rel, "pids.max"):                want["pids"],
	}
	if unified {
		quota := want["quota"]
		if quota == "-1" {
			quota = "max"
		}
		files = map[string]string{
			filepath.Join(m.Path(n), "memory.max"): want["memory"],
			filepath.Join(m.Path(n), "cpu.weight"): want["weight"],
			filepath.Join(m.Path(n), "cpu.max"):    quota + " " + want["period"],
			filepath.Join(m.Path(n), "pids.max"):   want["pids"],
		}
	}
	for f, w := range files {
		if got := readTrimmedT(t, f); got != w {
			t.Errorf("%s = %q, want %q", f, got, w)
		}
	}
}

func checkHasPid(t *testing.T, dirs []string, rel string, pid int) {
	t.Helper()
	for _, d := range dirs {
		ps, err := readPids(filepath.Join(d, rel, "cgroup.procs"))
		if err != nil || !slices.Contains(ps, pid) {
			t.Fatalf("pid %d is no longer in %s (%v, %v)", pid, filepath.Join(d, rel), ps, err)
		}
	}
}

// requireHostCgroups fails the test, saying what to do, unless it runs as root on a host
// whose cgroups it can write: v1 hierarchies at /sys/fs/cgroup/<controller>, or only v2 at
// /sys/fs/cgroup. It reports whether the host is v2-only.
func requireHostCgroups(t *testing.T) bool {
	t.Helper()
	const how = "run these tests as root (sudo -E go test ./services/podsync/cgroups/) on a Linux host with " +
		"writable cgroup v1 hierarchies at /sys/fs/cgroup/<controller> or cgroup v2 at /sys/fs/cgroup"
	if os.Geteuid() != 0 {
		t.Fatalf("not root (euid %d): %s", os.Geteuid(), how)
	}
	unified := exists(filepath.Join(hostMount, "cgroup.controllers"))
	probeIn := filepath.Join(hostMount, "memory")
	if unified {
		probeIn = hostMount
	} else if !exists(filepath.Join(probeIn, "memory.limit_in_bytes")) {
		t.Fatalf("%s is not a cgroup v1 memory hierarchy and %s is not cgroup v2: %s", probeIn, hostMount, how)
	}
	probe := filepath.Join(probeIn, "unitlet-test-probe-"+randomHex(t))
	if err := os.Mkdir(probe, 0o755); err != nil {
		t.Fatalf("cannot make a cgroup in %s: %v: %s", probeIn, err, how)
	}
	if err := syscall.Rmdir(probe); err != nil {
		t.Fatalf("cannot remove probe cgroup %s: %v", probe, err)
	}
	return unified
}

// hostHierarchies reads the cgroup mounts under /sys/fs/cgroup from /proc/self/mountinfo,
// independently of the code under test.
func hostHierarchies(t *testing.T, unified bool) []string {
	if unified {
		return []string{hostMount}
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatalf("read mountinfo: %v", err)
	}
	defer f.Close()
	var out []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		sep := slices.Index(fields, "-")
		if sep < 0 || sep+1 >= len(fields) || fields[sep+1] != "cgroup" {
			continue
		}
		if mp := fields[4]; strings.HasPrefix(mp, hostMount+"/") && !slices.Contains(out, mp) {
			out = append(out, mp)
		}
	}
	return out
}

// removeTestTree removes what a test left under root in every hierarchy, deepest first,
// without the code under test.
func removeTestTree(t *testing.T, dirs []string, root Name) {
	for _, d := range dirs {
		top := filepath.Join(d, root.CgroupfsPath())
		var all []string
		filepath.WalkDir(top, func(p string, e os.DirEntry, err error) error {
			if err == nil && e.IsDir() {
				all = append(all, p)
			}
			return nil
		})
		for i := len(all) - 1; i >= 0; i-- {
			if err := syscall.Rmdir(all[i]); err != nil {
				t.Logf("cleanup: rmdir %s: %v", all[i], err)
			}
		}
	}
}

func randomHex(t *testing.T) string {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func readTrimmedT(t *testing.T, path string) string {
	t.Helper()
	s, err := readTrimmed(path)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func readFields(t *testing.T, path string) []string {
	t.Helper()
	return strings.Fields(readTrimmedT(t, path))
}

// fakeV2 is a temporary directory standing in for a cgroup v2 mount: the root's
// cgroup.controllers and cgroup.subtree_control, a writer that records every write and,
// for cgroup.subtree_control, keeps the enabled set as the kernel would, and a mkdir that
// gives a new cgroup the kernel's files.
type fakeV2 struct {
	dir    string
	writes []string // "<path below dir>=<value>"
}

func newFakeV2(t *testing.T, controllers string) (*fakeV2, *hierarchies) {
	f := &fakeV2{dir: t.TempDir()}
	for file, v := range map[string]string{"cgroup.controllers": controllers, "cgroup.subtree_control": "", "cgroup.procs": ""} {
		if err := os.WriteFile(filepath.Join(f.dir, file), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	h, err := detect(f.dir)
	if err != nil || !h.unified {
		t.Fatalf("detect(%s) = %+v, %v; want cgroup v2", f.dir, h, err)
	}
	h.write = f.write
	h.mkdir = f.mkdir
	return f, h
}

// mkdir makes a cgroup directory with the files the kernel gives a new one.
func (f *fakeV2) mkdir(path string) error {
	if err := os.Mkdir(path, 0o755); err != nil {
		if errors.Is(err, os.ErrExist) {
			return nil
		}
		return err
	}
	parent, _ := os.ReadFile(filepath.Join(filepath.Dir(path), "cgroup.subtree_control"))
	for file, v := range map[string]string{"cgroup.controllers": string(parent), "cgroup.subtree_control": "", "cgroup.procs": ""} {
		if err := os.WriteFile(filepath.Join(path, file), []byte(v), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func (f *fakeV2) write(path, value string) error {
	rel, _ := filepath.Rel(f.dir, path)
	f.writes = append(f.writes, rel+"="+value)
	if filepath.Base(path) == "cgroup.subtree_control" {
		b, _ := os.ReadFile(path)
		enabled := strings.Fields(string(b))
		if c := strings.TrimPrefix(value, "+"); !slices.Contains(enabled, c) {
			enabled = append(enabled, c)
		}
		value = strings.Join(enabled, " ")
	}
	return os.WriteFile(path, []byte(value), 0o644)
}

// take returns the writes so far and forgets them.
func (f *fakeV2) take() []string {
	w := f.writes
	f.writes = nil
	return w
}

func TestCgroupfsV2Writes(t *testing.T) {
	ctx := context.Background()
	f, h := newFakeV2(t, "cpuset cpu io memory hugetlb pids rdma misc")
	m := &cgroupfsManager{h: h}
	if !m.Unified() || m.Path(Name{"kubepods"}) != filepath.Join(f.dir, "kubepods") {
		t.Fatalf("Unified() = %t, Path = %q", m.Unified(), m.Path(Name{"kubepods"}))
	}

	kubepods := Name{"kubepods"}
	if err := m.Ensure(ctx, kubepods, Resources{Memory: ptr(gi), CPUShares: ptr[uint64](1024), PidsLimit: ptr[int64](-1)}); err != nil {
		t.Fatalf("Ensure(%s): %v", kubepods, err)
	}
	want := []string{
		"cgroup.subtree_control=+cpu", "cgroup.subtree_control=+memory", "cgroup.subtree_control=+pids",
		"cgroup.subtree_control=+cpuset", "cgroup.subtree_control=+hugetlb", "cgroup.subtree_control=+io",
		"kubepods/memory.max=1073741824", "kubepods/cpu.weight=39", "kubepods/pids.max=max",
	}
	if got := f.take(); !reflect.DeepEqual(got, want) {
		t.Errorf("Ensure(%s) wrote\n%q\nwant\n%q", kubepods, got, want)
	}

	pod := kubepods.Child("burstable").Child("pod12-34")
	r := Resources{Memory: ptr(256 * mi), CPUShares: ptr[uint64](512), CPUQuota: ptr[int64](50000), CPUPeriod: ptr[uint64](100000),
		PidsLimit: ptr[int64](0), HugePages: map[int64]int64{gi: 0, 2 * mi: 4 * mi}}
	if err := m.Ensure(ctx, pod, r); err != nil {
		t.Fatalf("Ensure(%s): %v", pod, err)
	}
	var enable []string
	for _, c := range []string{"cpu", "memory", "pids", "cpuset", "hugetlb", "io"} {
		enable = append(enable, "kubepods/cgroup.subtree_control=+"+c)
	}
	for _, c := range []string{"cpu", "memory", "pids", "cpuset", "hugetlb", "io"} {
		enable = append(enable, "kubepods/burstable/cgroup.subtree_control=+"+c)
	}
	p := "kubepods/burstable/pod12-34/"
	want = append(enable, p+"memory.max=268435456", p+"cpu.weight=20", p+"cpu.max=50000 100000", p+"pids.max=1",
		p+"hugetlb.2MB.max=4194304", p+"hugetlb.1GB.max=0")
	if got := f.take(); !reflect.DeepEqual(got, want) {
		t.Errorf("Ensure(%s) wrote\n%q\nwant\n%q", pod, got, want)
	}

	// Adopted: nothing enabled again; a new period alone keeps the quota; quota 0 is no limit.
	if err := m.Ensure(ctx, pod, Resources{CPUPeriod: ptr[uint64](50000)}); err != nil {
		t.Fatal(err)
	}
	if got, want := f.take(), []string{p + "cpu.max=50000 50000"}; !reflect.DeepEqual(got, want) {
		t.Errorf("period-only Ensure wrote %q, want %q", got, want)
	}
	if err := m.Ensure(ctx, pod, Resources{CPUQuota: ptr[int64](0), CPUPeriod: ptr[uint64](100000)}); err != nil {
		t.Fatal(err)
	}
	if got, want := f.take(), []string{p + "cpu.max=max 100000"}; !reflect.DeepEqual(got, want) {
		t.Errorf("quota-0 Ensure wrote %q, want %q", got, want)
	}

	// A process seen in a cgroup below refuses the removal and removes nothing.
	if err := os.WriteFile(filepath.Join(f.dir, p, "cgroup.procs"), []byte("4242\n4243\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := m.Remove(ctx, kubepods.Child("burstable"))
	var ne *NotEmptyError
	if !errors.As(err, &ne) || !errors.Is(err, ErrNotEmpty) || !reflect.DeepEqual(ne.PIDs, []int{4242, 4243}) {
		t.Fatalf("Remove with pids below = %v, want ErrNotEmpty naming 4242, 4243", err)
	}
	if !isDir(filepath.Join(f.dir, p)) {
		t.Fatal("refused Remove removed the pod's directory")
	}
	if err := m.Ensure(ctx, nil, Resources{}); err == nil {
		t.Error("Ensure of the root succeeded")
	}
	if err := m.Remove(ctx, nil); err == nil {
		t.Error("Remove of the root succeeded")
	}
}

func TestCgroupfsV2OnlyAvailableControllers(t *testing.T) {
	f, h := newFakeV2(t, "cpu memory pids")
	m := &cgroupfsManager{h: h}
	err := m.Ensure(context.Background(), Name{"kubepods"}, Resources{Memory: ptr(gi), HugePages: map[int64]int64{2 * mi: 0}})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"cgroup.subtree_control=+cpu", "cgroup.subtree_control=+memory", "cgroup.subtree_control=+pids", "kubepods/memory.max=1073741824"}
	if got := f.take(); !reflect.DeepEqual(got, want) {
		t.Errorf("wrote %q, want %q", got, want)
	}
}
