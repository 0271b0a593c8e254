package observe

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/unitlet/unitlet/shared/usage"
)

const mib = int64(1) << 20

// container is a CRI container of a pod, running or exited, with its stats.
func container(id, uid, ns, pod, name string, running bool, workingSet, rootfs, rootfsInodes int64) (*runtimeapi.Container, *runtimeapi.ContainerStats) {
	state := runtimeapi.ContainerState_CONTAINER_EXITED
	if running {
		state = runtimeapi.ContainerState_CONTAINER_RUNNING
	}
	labels := map[string]string{}
	if uid != "" {
		labels = map[string]string{labelPodUID: uid, labelPodNamespace: ns, labelPodName: pod, labelContainerName: name}
	}
	c := &runtimeapi.Container{Id: id, State: state, Labels: labels, Metadata: &runtimeapi.ContainerMetadata{Name: name}}
	st := &runtimeapi.ContainerStats{
		Attributes:    &runtimeapi.ContainerAttributes{Id: id, Metadata: &runtimeapi.ContainerMetadata{Name: name}},
		Memory:        &runtimeapi.MemoryUsage{WorkingSetBytes: &runtimeapi.UInt64Value{Value: uint64(workingSet)}},
		WritableLayer: &runtimeapi.FilesystemUsage{UsedBytes: &runtimeapi.UInt64Value{Value: uint64(rootfs)}, InodesUsed: &runtimeapi.UInt64Value{Value: uint64(rootfsInodes)}},
	}
	return c, st
}

// podsRuntime is three pods' containers: a's app and sidecar running and an exited one,
// b's main, c's x, and a running container that is no pod's.
func podsRuntime(root string) *fakeRuntime {
	rt := &fakeRuntime{imageFs: imageFsAt(root, "")}
	for _, c := range []struct {
		id, uid, ns, pod, name string
		running                bool
		ws, rootfs, inodes     int64
	}{
		{"c1", "aaaa-1111", "ns", "a", "sidecar", true, 20 * mib, 1 * mib, 3},
		{"c2", "aaaa-1111", "ns", "a", "app", true, 100 * mib, 10 * mib, 5},
		{"c3", "aaaa-1111", "ns", "a", "app", false, 900 * mib, 900 * mib, 900},
		{"c4", "bbbb-2222", "kube-system", "b", "main", true, 50 * mib, 2 * mib, 1},
		{"c5", "cccc-3333", "ns", "c", "x", true, 7 * mib, 0, 0},
		{"c6", "", "", "", "", true, 1, 1, 1},
	} {
		ctr, st := container(c.id, c.uid, c.ns, c.pod, c.name, c.running, c.ws, c.rootfs, c.inodes)
		rt.containers = append(rt.containers, ctr)
		rt.stats = append(rt.stats, st)
	}
	// Stats of a container the list does not have (gone meanwhile).
	_, st := container("c7", "aaaa-1111", "ns", "a", "late", true, 1, 1, 1)
	rt.stats = append(rt.stats, st)
	return rt
}

// fileBlocks is the bytes allocated to each path, summed (st_blocks times 512).
func fileBlocks(t *testing.T, paths ...string) int64 {
	t.Helper()
	var n int64
	for _, p := range paths {
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			t.Fatal(err)
		}
		n += st.Blocks * 512
	}
	return n
}

func TestPodsCgroupV1Cgroupfs(t *testing.T) {
	mnt, proc, root, logs := v1Fixture(t), procFixture(t), t.TempDir(), t.TempDir()
	// a is burstable, b guaranteed (directly in kubepods), c has no pod cgroup.
	write(t, mnt, "memory/unitlet/kubepods/burstable/podaaaa-1111/memory.usage_in_bytes", fmt.Sprint(300*mib))
	write(t, mnt, "memory/unitlet/kubepods/burstable/podaaaa-1111/memory.stat", fmt.Sprintf("total_inactive_file %d\n", 100*mib))
	write(t, mnt, "pids/unitlet/kubepods/burstable/podaaaa-1111/pids.current", "7\n")
	write(t, mnt, "memory/unitlet/kubepods/podbbbb-2222/memory.usage_in_bytes", fmt.Sprint(80*mib))
	write(t, mnt, "memory/unitlet/kubepods/podbbbb-2222/memory.stat", fmt.Sprintf("total_inactive_file %d\n", 10*mib))
	write(t, mnt, "pids/unitlet/kubepods/podbbbb-2222/pids.current", "3\n")
	write(t, mnt, "memory/unitlet/kubepods/besteffort/memory.usage_in_bytes", "0")

	// Logs: two files of app (one rotated), one of sidecar, one of the pod itself.
	aLogs := filepath.Join(logs, "ns_a_aaaa-1111")
	write(t, aLogs, "app/0.log", strings.Repeat("x", 5000))
	write(t, aLogs, "app/0.log.20240101-000000.gz", strings.Repeat("y", 9000))
	write(t, aLogs, "sidecar/0.log", strings.Repeat("z", 100))
	write(t, aLogs, "pod.log", strings.Repeat("p", 10))

	podDir := filepath.Join(root, "pods", "aaaa-1111")
	write(t, podDir, "etc-hosts", "127.0.0.1 localhost\n")

	rt := podsRuntime(root)
	s, err := New(Options{CgroupMount: mnt, CgroupRoot: "/unitlet", CgroupDriver: "cgroupfs", RootDir: root, PodLogsDir: logs, ProcRoot: proc, Runtime: rt})
	if err != nil {
		t.Fatal(err)
	}
	pods, err := s.Pods(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(pods) != 3 {
		t.Fatalf("%d pods, want a, b and c: %+v", len(pods), pods)
	}

	a := pods["aaaa-1111"]
	if a.Namespace != "ns" || a.Name != "a" || a.UID != "aaaa-1111" {
		t.Errorf("pod a named %s/%s %s", a.Namespace, a.Name, a.UID)
	}
	if a.Err != nil {
		t.Errorf("pod a: %v", a.Err)
	}
	if a.Memory != 200*mib {
		t.Errorf("pod a memory %d, want the pod cgroup's working set %d", a.Memory, 200*mib)
	}
	if a.Processes != 7 {
		t.Errorf("pod a processes %d, want 7", a.Processes)
	}
	want := []Container{
		{Name: "app", Memory: 100 * mib, Rootfs: 10 * mib, RootfsInodes: 5, LogsInodes: 2,
			Logs: fileBlocks(t, filepath.Join(aLogs, "app/0.log"), filepath.Join(aLogs, "app/0.log.20240101-000000.gz"))},
		{Name: "sidecar", Memory: 20 * mib, Rootfs: 1 * mib, RootfsInodes: 3, LogsInodes: 1,
			Logs: fileBlocks(t, filepath.Join(aLogs, "sidecar/0.log"))},
	}
	if fmt.Sprint(a.Containers) != fmt.Sprint(want) {
		t.Errorf("pod a containers\n %+v\nwant\n %+v", a.Containers, want)
	}
	if a.PodLogs != fileBlocks(t, filepath.Join(aLogs, "pod.log")) || a.PodLogs == 0 {
		t.Errorf("pod a's own logs %d", a.PodLogs)
	}
	if a.EtcHosts != fileBlocks(t, filepath.Join(podDir, "etc-hosts")) || a.EtcHosts == 0 {
		t.Errorf("pod a's hosts file %d", a.EtcHosts)
	}
	sum := a.EtcHosts + a.PodLogs
	for _, c := range want {
		sum += c.Rootfs + c.Logs
	}
	if got := a.EphemeralStorage(); got != sum {
		t.Errorf("pod a ephemeral storage %d, want %d", got, sum)
	}

	b := pods["bbbb-2222"]
	if b.Err != nil || b.Memory != 70*mib || b.Processes != 3 || b.Namespace != "kube-system" || len(b.Containers) != 1 {
		t.Errorf("pod b (guaranteed) = %+v", b)
	}
	c := pods["cccc-3333"]
	if c.Memory != 7*mib || c.Processes != 0 {
		t.Errorf("pod c without a cgroup: memory %d, processes %d; want its container's 7 MiB, 0", c.Memory, c.Processes)
	}
	if c.Err == nil || !strings.Contains(c.Err.Error(), "no pod cgroup") {
		t.Errorf("pod c without a cgroup: error %v", c.Err)
	}
}

func TestPodsCgroupV2Systemd(t *testing.T) {
	mnt, proc, root := v2Fixture(t), procFixture(t), t.TempDir()
	top := "unitlet.slice/unitlet-kubepods.slice"
	write(t, mnt, top+"/memory.max", "max\n")
	burstable := top + "/unitlet-kubepods-burstable.slice/unitlet-kubepods-burstable-podaaaa_1111.slice"
	write(t, mnt, burstable+"/memory.current", fmt.Sprint(300*mib))
	write(t, mnt, burstable+"/memory.stat", fmt.Sprintf("anon 1\ninactive_file %d\n", 50*mib))
	write(t, mnt, burstable+"/pids.current", "12\n")
	write(t, mnt, burstable+"/cri-containerd-c2.scope/memory.current", "1")
	guaranteed := top + "/unitlet-kubepods-podbbbb_2222.slice"
	write(t, mnt, guaranteed+"/memory.current", fmt.Sprint(60*mib))
	write(t, mnt, guaranteed+"/memory.stat", "inactive_file 0\n")
	write(t, mnt, guaranteed+"/pids.current", "2\n")
	besteffort := top + "/unitlet-kubepods-besteffort.slice/unitlet-kubepods-besteffort-podcccc_3333.slice"
	write(t, mnt, besteffort+"/memory.current", fmt.Sprint(8*mib))
	write(t, mnt, besteffort+"/memory.stat", fmt.Sprintf("inactive_file %d\n", 9*mib))
	write(t, mnt, besteffort+"/pids.current", "1\n")

	s, err := New(Options{CgroupMount: mnt, CgroupRoot: "unitlet.slice", CgroupDriver: "systemd", RootDir: root, PodLogsDir: t.TempDir(), ProcRoot: proc, Runtime: podsRuntime(root)})
	if err != nil {
		t.Fatal(err)
	}
	pods, err := s.Pods(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for uid, want := range map[types.UID]struct{ memory, processes int64 }{
		"aaaa-1111": {250 * mib, 12},
		"bbbb-2222": {60 * mib, 2},
		"cccc-3333": {0, 1}, // inactive file above usage: a working set of zero
	} {
		p := pods[uid]
		if p.Err != nil {
			t.Errorf("pod %s: %v", uid, p.Err)
		}
		if p.Memory != want.memory || p.Processes != want.processes {
			t.Errorf("pod %s: memory %d, processes %d; want %d, %d", uid, p.Memory, p.Processes, want.memory, want.processes)
		}
	}
}

func TestPodUIDFromCgroup(t *testing.T) {
	for _, tc := range []struct {
		name, driver string
		want         types.UID
		ok           bool
	}{
		{"pod12-34", "cgroupfs", "12-34", true},
		{"burstable", "cgroupfs", "", false},
		{"pod", "cgroupfs", "", false},
		{"kubepods-burstable-pod12_34.slice", "systemd", "12-34", true},
		{"kubepods-pod12_34.slice", "systemd", "12-34", true},
		{"a-kubepods-besteffort-pod12_34.slice", "systemd", "12-34", true},
		{"kubepods-burstable.slice", "systemd", "", false},
		{"kubepods-burstable-pod12_34", "systemd", "", false},
		{"cri-containerd-abc.scope", "systemd", "", false},
	} {
		got, ok := podUIDFromCgroup(tc.name, tc.driver)
		if got != tc.want || ok != tc.ok {
			t.Errorf("podUIDFromCgroup(%q, %s) = %q, %v; want %q, %v", tc.name, tc.driver, got, ok, tc.want, tc.ok)
		}
	}
}

func TestPodVolumes(t *testing.T) {
	mnt, proc, root := v1Fixture(t), procFixture(t), t.TempDir()
	vols := filepath.Join(root, "pods", "aaaa-1111", "volumes")
	cache := filepath.Join(vols, "kubernetes.io~empty-dir", "cache")
	write(t, cache, "f1", strings.Repeat("a", 100<<10))
	write(t, cache, "sub/f2", strings.Repeat("b", 10))
	if err := os.Link(filepath.Join(cache, "f1"), filepath.Join(cache, "sub", "f1-link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("f1", filepath.Join(cache, "f1-symlink")); err != nil {
		t.Fatal(err)
	}
	// A sparse file: 1 GiB long, nothing allocated; du counts blocks, not sizes.
	sparse, err := os.Create(filepath.Join(cache, "sparse"))
	if err != nil {
		t.Fatal(err)
	}
	if err := sparse.Truncate(gib); err != nil {
		t.Fatal(err)
	}
	sparse.Close()
	cfg := filepath.Join(vols, "kubernetes.io~configmap", "cfg")
	write(t, cfg, "..2024_01_01/key", "value")
	if err := os.Symlink("..2024_01_01", filepath.Join(cfg, "..data")); err != nil {
		t.Fatal(err)
	}
	write(t, vols, "kubernetes.io~secret/token/token", strings.Repeat("s", 3000))
	write(t, vols, "kubernetes.io~downward-api/info/labels", "a=b")

	// A memory emptyDir is a tmpfs of its own; a mount inside a disk emptyDir is not
	// entered.
	mem := filepath.Join(vols, "kubernetes.io~empty-dir", "mem")
	if err := os.MkdirAll(mem, 0o755); err != nil {
		t.Fatal(err)
	}
	mountTmpfs(t, mem)
	write(t, mem, "data", strings.Repeat("m", 50<<10))
	inner := filepath.Join(cache, "inner")
	if err := os.Mkdir(inner, 0o755); err != nil {
		t.Fatal(err)
	}
	mountTmpfs(t, inner)
	write(t, inner, "big", strings.Repeat("i", 1<<20))

	write(t, mnt, "memory/unitlet/kubepods/burstable/podaaaa-1111/memory.usage_in_bytes", "1")
	write(t, mnt, "memory/unitlet/kubepods/burstable/podaaaa-1111/memory.stat", "")
	write(t, mnt, "pids/unitlet/kubepods/burstable/podaaaa-1111/pids.current", "1")
	s, err := New(Options{CgroupMount: mnt, CgroupRoot: "/unitlet", CgroupDriver: "cgroupfs", RootDir: root, PodLogsDir: t.TempDir(), ProcRoot: proc, Runtime: podsRuntime(root)})
	if err != nil {
		t.Fatal(err)
	}
	pods, err := s.Pods(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	a := pods["aaaa-1111"]

	// Every inode once: the two directories, f1 (its second link not again), f2, the
	// symbolic link and the sparse file; nothing of the tmpfs mounted on inner.
	wantCache := fileBlocks(t, cache, filepath.Join(cache, "f1"), filepath.Join(cache, "sub"), filepath.Join(cache, "sub/f2"),
		filepath.Join(cache, "f1-symlink"), filepath.Join(cache, "sparse"))
	if got := a.Volumes["cache"]; got != wantCache {
		t.Errorf("emptyDir cache uses %d, want %d", got, wantCache)
	}
	if got := a.VolumeInodes["cache"]; got != 6 {
		t.Errorf("emptyDir cache has %d inodes, want 6", got)
	}
	if a.Volumes["cache"] > 1<<20 {
		t.Errorf("emptyDir cache uses %d: the sparse file's size or the inner mount was counted", a.Volumes["cache"])
	}
	wantCfg := fileBlocks(t, cfg, filepath.Join(cfg, "..2024_01_01"), filepath.Join(cfg, "..2024_01_01/key"), filepath.Join(cfg, "..data"))
	if got := a.Volumes["cfg"]; got != wantCfg || a.VolumeInodes["cfg"] != 4 {
		t.Errorf("configMap cfg uses %d bytes and %d inodes, want %d and 4", got, a.VolumeInodes["cfg"], wantCfg)
	}
	wantMem := fileBlocks(t, mem, filepath.Join(mem, "data"))
	if _, ok := a.Volumes["mem"]; ok || a.MemoryVolumes["mem"] != wantMem || wantMem < 50<<10 {
		t.Errorf("memory emptyDir: volumes %v, memory volumes %v, want mem only in the latter at %d", a.Volumes, a.MemoryVolumes, wantMem)
	}
	for _, v := range []string{"token", "info"} {
		if _, ok := a.Volumes[v]; ok {
			t.Errorf("volume %s counted: the kubelet does not count secret or downwardAPI volumes", v)
		}
	}
	if a.Err != nil {
		t.Errorf("pod a: %v", a.Err)
	}
	if got, want := a.EphemeralStorage(), a.Volumes["cache"]+a.Volumes["cfg"]+11*mib; got != want {
		t.Errorf("ephemeral storage %d, want %d (no memory volume in it)", got, want)
	}
}

func TestPodsRuntimeError(t *testing.T) {
	mnt, proc, root := v1Fixture(t), procFixture(t), t.TempDir()
	rt := podsRuntime(root)
	rt.listErr = fmt.Errorf("runtime down")
	s, err := New(Options{CgroupMount: mnt, CgroupDriver: "cgroupfs", RootDir: root, ProcRoot: proc, Runtime: rt})
	if err != nil {
		t.Fatal(err)
	}
	if pods, err := s.Pods(context.Background()); err == nil || !strings.Contains(err.Error(), "runtime down") {
		t.Errorf("Pods with the runtime down = %v, %v; want its error", pods, err)
	}
}

func TestPodVolumesReused(t *testing.T) {
	mnt, proc, root := v1Fixture(t), procFixture(t), t.TempDir()
	cache := filepath.Join(root, "pods", "aaaa-1111", "volumes", "kubernetes.io~empty-dir", "cache")
	write(t, cache, "f1", strings.Repeat("a", 10<<10))
	rt := podsRuntime(root)
	s, err := New(Options{CgroupMount: mnt, CgroupDriver: "cgroupfs", RootDir: root, ProcRoot: proc, Runtime: rt, VolumeStatsPeriod: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	used := func() int64 {
		t.Helper()
		pods, err := s.Pods(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return pods["aaaa-1111"].Volumes["cache"]
	}
	first := used()
	write(t, cache, "f2", strings.Repeat("b", 100<<10))
	if got := used(); got != first {
		t.Errorf("within the period: %d, want the first measurement %d", got, first)
	}
	// A pod gone from the runtime is forgotten, and measured afresh when it is back.
	saved := rt.stats
	rt.stats = nil
	used()
	rt.stats = saved
	if got := used(); got <= first {
		t.Errorf("after the pod was gone: %d, want more than %d", got, first)
	}
	// Without a period, every call measures.
	s.o.VolumeStatsPeriod = 0
	before := used()
	write(t, cache, "f3", strings.Repeat("c", 100<<10))
	if got := used(); got <= before {
		t.Errorf("without a period: %d, want more than %d", got, before)
	}
}

// TestPodVolumeDeeperThanTheWalkCountsWhatIsAbove: an emptyDir nested deeper than the walk
// goes (usage.ErrTooDeep) still counts against the pod with what lies above that depth, a
// lower bound, and the pod's Err says what was left out; dropping the volume would count
// nothing of it.
func TestPodVolumeDeeperThanTheWalkCountsWhatIsAbove(t *testing.T) {
	mnt, proc, root := v1Fixture(t), procFixture(t), t.TempDir()
	deep := filepath.Join(root, "pods", "aaaa-1111", "volumes", "kubernetes.io~empty-dir", "deep")
	write(t, deep, "big", strings.Repeat("a", 1<<20))
	fd, err := unix.Open(deep, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	for range 1100 {
		if err := unix.Mkdirat(fd, "d", 0o755); err != nil {
			t.Fatal(err)
		}
		next, err := unix.Openat(fd, "d", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			t.Fatal(err)
		}
		fd = next
	}
	unix.Close(fd)
	s, err := New(Options{CgroupMount: mnt, CgroupDriver: "cgroupfs", RootDir: root, PodLogsDir: t.TempDir(), ProcRoot: proc, Runtime: podsRuntime(root)})
	if err != nil {
		t.Fatal(err)
	}
	pods, err := s.Pods(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	a := pods["aaaa-1111"]
	if !errors.Is(a.Err, usage.ErrTooDeep) || !strings.Contains(a.Err.Error(), "volume deep") {
		t.Errorf("pod a: error %v, want volume deep's usage.ErrTooDeep", a.Err)
	}
	if got := a.Volumes["deep"]; got < 1<<20 {
		t.Errorf("emptyDir deep uses %d, want at least its 1 MiB file (what is above the depth walked)", got)
	}
	if got := a.VolumeInodes["deep"]; got < 1000 {
		t.Errorf("emptyDir deep has %d inodes, want the directories walked", got)
	}
}

// TestSlowVolumeWalkDoesNotStallPods: a walk of a pod's volumes that takes long (a volume
// with a million entries) runs in the background: Pods returns after volumeWait with what
// it has (nothing yet, said in the pod's Err; later the previous measurement), starts no
// second walk of the same pod meanwhile, and takes the walk's result once it ends.
func TestSlowVolumeWalkDoesNotStallPods(t *testing.T) {
	mnt, proc, root := v1Fixture(t), procFixture(t), t.TempDir()
	s, err := New(Options{CgroupMount: mnt, CgroupDriver: "cgroupfs", RootDir: root, PodLogsDir: t.TempDir(), ProcRoot: proc, Runtime: podsRuntime(root)})
	if err != nil {
		t.Fatal(err)
	}
	s.volumeWait = 50 * time.Millisecond
	release := make(chan struct{})
	var mu sync.Mutex
	walks := map[types.UID]int{}
	s.measure = func(uid types.UID) volumeUsage {
		mu.Lock()
		walks[uid]++
		n := walks[uid]
		mu.Unlock()
		if uid == "aaaa-1111" {
			<-release
		}
		return volumeUsage{volumes: map[string]int64{"data": int64(n) * mib}}
	}
	pods := func() map[types.UID]Pod {
		t.Helper()
		start := time.Now()
		p, err := s.Pods(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Fatalf("Pods took %s while a walk was under way, want about volumeWait (%s)", took, s.volumeWait)
		}
		return p
	}

	// A walk of a's volumes is under way: a has none yet, and says so.
	first := pods()
	if a := first["aaaa-1111"]; a.Volumes != nil || a.Err == nil || !strings.Contains(a.Err.Error(), "volumes: not measured yet") {
		t.Errorf("a during its first walk: volumes %v, error %v; want none, and an error saying the walk is under way", a.Volumes, a.Err)
	}
	if b := first["bbbb-2222"]; b.Volumes["data"] != mib {
		t.Errorf("b: volumes %v, want its walk's result: a's slow walk does not hold it up", b.Volumes)
	}
	pods()
	mu.Lock()
	if walks["aaaa-1111"] != 1 {
		t.Errorf("%d walks of a's volumes, want 1: none started while one is under way", walks["aaaa-1111"])
	}
	mu.Unlock()

	close(release)
	deadline := time.Now().Add(10 * time.Second)
	for {
		a := pods()["aaaa-1111"]
		if a.Volumes["data"] >= mib {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a's walk ended and its result never came: volumes %v, error %v", a.Volumes, a.Err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
