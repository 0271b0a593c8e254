package emptydir

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatalf("this test mounts a tmpfs and must run as root (CAP_SYS_ADMIN); running as euid %d", os.Geteuid())
	}
}

// mountsAt lists the mounts at dir, bottom first.
func mountsAt(t *testing.T, dir string) []*mountinfo.Info {
	t.Helper()
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	mounts, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(real))
	if err != nil {
		t.Fatal(err)
	}
	return mounts
}

// unmountAll undoes mounts a failed test left behind, so the temporary directory can go.
func unmountAll(t *testing.T, root string) {
	t.Cleanup(func() {
		real, err := filepath.EvalSymlinks(root)
		if err != nil {
			return
		}
		mounts, _ := mountinfo.GetMounts(mountinfo.PrefixFilter(real))
		for i := len(mounts) - 1; i >= 0; i-- {
			unix.Unmount(mounts[i].Mountpoint, unix.MNT_DETACH)
		}
	})
}

func withUmask(t *testing.T, mask int) {
	old := unix.Umask(mask)
	t.Cleanup(func() { unix.Umask(old) })
}

func TestSetupDiskMakesWorldWritableDir(t *testing.T) {
	withUmask(t, 0o022)
	root := t.TempDir()
	parent := filepath.Join(root, "pods", "uid", "volumes", "kubernetes.io~empty-dir")
	dir := filepath.Join(parent, "cache")

	for range 2 { // idempotent
		if err := Setup(dir, corev1.StorageMediumDefault, nil); err != nil {
			t.Fatal(err)
		}
		info, err := os.Stat(dir)
		if err != nil {
			t.Fatal(err)
		}
		if !info.IsDir() || info.Mode().Perm() != 0o777 {
			t.Fatalf("%s: %v, want a directory of mode 0777 despite umask 022", dir, info.Mode())
		}
	}
	info, err := os.Stat(parent)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm()&0o007 != 0 {
		t.Errorf("parent %s has mode %v: others may enter it", parent, info.Mode().Perm())
	}
	if got := mountsAt(t, dir); len(got) != 0 {
		t.Errorf("disk emptyDir has %d mounts at it", len(got))
	}
}

func TestSetupDiskRepairsMode(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "v")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "keep"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Setup(dir, "", nil); err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o777 {
		t.Errorf("mode %v, want 0777", info.Mode().Perm())
	}
	if _, err := os.Stat(filepath.Join(dir, "keep")); err != nil {
		t.Errorf("existing content lost: %v", err)
	}
}

func TestSetupRefusesFileAndUnknownMedium(t *testing.T) {
	file := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Setup(file, corev1.StorageMediumDefault, nil); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("Setup on a file = %v, want a not-a-directory error", err)
	}
	dir := filepath.Join(t.TempDir(), "v")
	if err := Setup(dir, corev1.StorageMediumHugePages, nil); err == nil || !strings.Contains(err.Error(), "not supported") {
		t.Errorf("Setup with HugePages = %v, want not supported", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("unsupported medium left %s behind: %v", dir, err)
	}
}

func TestTearDownDisk(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "v")
	if err := Setup(dir, corev1.StorageMediumDefault, nil); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "a", "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o400); err != nil {
		t.Fatal(err)
	}
	if err := TearDown(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("%s still there: %v", dir, err)
	}
	if err := TearDown(dir); err != nil {
		t.Errorf("second TearDown = %v, want nil", err)
	}
}

func TestMemoryEnforcesSizeLimit(t *testing.T) {
	requireRoot(t)
	root := t.TempDir()
	unmountAll(t, root)
	dir := filepath.Join(root, "pods", "uid", "volumes", "kubernetes.io~empty-dir", "mem")
	limit := resource.MustParse("1Mi")

	for range 2 { // idempotent: the second call mounts nothing more
		if err := Setup(dir, corev1.StorageMediumMemory, &limit); err != nil {
			t.Fatal(err)
		}
	}
	mounts := mountsAt(t, dir)
	if len(mounts) != 1 || mounts[0].FSType != "tmpfs" {
		t.Fatalf("mounts at %s: %+v, want exactly one tmpfs", dir, mounts)
	}
	if !strings.Contains(mounts[0].VFSOptions, "size=1024k") {
		t.Errorf("tmpfs options %q, want size=1024k", mounts[0].VFSOptions)
	}
	for _, o := range []string{"nosuid", "nodev"} {
		if !slices.Contains(strings.Split(mounts[0].Options, ","), o) {
			t.Errorf("tmpfs mount options %q lack %s", mounts[0].Options, o)
		}
	}
	info, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o777 || info.Mode()&fs.ModeSticky != 0 {
		t.Errorf("tmpfs root mode %v, want 0777 (tmpfs's default would be 1777)", info.Mode())
	}

	err = os.WriteFile(filepath.Join(dir, "big"), bytes.Repeat([]byte{'x'}, 2<<20), 0o644)
	if !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("writing 2 MiB into a 1 MiB tmpfs: %v, want ENOSPC", err)
	}

	if err := TearDown(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("%s still there after TearDown: %v", dir, err)
	}
	real, _ := filepath.EvalSymlinks(root)
	if left, _ := mountinfo.GetMounts(mountinfo.PrefixFilter(real)); len(left) != 0 {
		t.Fatalf("mounts left after TearDown: %+v", left[0])
	}
}

func TestMemoryWithoutLimitUsesNodeMemory(t *testing.T) {
	requireRoot(t)
	root := t.TempDir()
	unmountAll(t, root)
	dir := filepath.Join(root, "mem")
	if err := Setup(dir, corev1.StorageMediumMemory, nil); err != nil {
		t.Fatal(err)
	}
	var sfs unix.Statfs_t
	if err := unix.Statfs(dir, &sfs); err != nil {
		t.Fatal(err)
	}
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		t.Fatal(err)
	}
	size := int64(sfs.Blocks) * int64(sfs.Bsize)
	total := int64(si.Totalram) * int64(si.Unit)
	if size < total-int64(sfs.Bsize) || size > total {
		t.Errorf("tmpfs size %d, want the node's memory %d (not tmpfs's default half)", size, total)
	}
	if err := TearDown(dir); err != nil {
		t.Fatal(err)
	}
}

func TestTearDownRefusesMountsBelow(t *testing.T) {
	requireRoot(t)
	root := t.TempDir()
	unmountAll(t, root)
	dir := filepath.Join(root, "v")
	if err := Setup(dir, corev1.StorageMediumDefault, nil); err != nil {
		t.Fatal(err)
	}
	precious := t.TempDir()
	if err := os.WriteFile(filepath.Join(precious, "data"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(precious, sub, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}

	err := TearDown(dir)
	if err == nil || !strings.Contains(err.Error(), "still mounted below") {
		t.Fatalf("TearDown with a bind mount below = %v, want a refusal", err)
	}
	if _, err := os.Stat(filepath.Join(precious, "data")); err != nil {
		t.Fatalf("TearDown deleted through a mount: %v", err)
	}

	if err := unix.Unmount(sub, 0); err != nil {
		t.Fatal(err)
	}
	if err := TearDown(dir); err != nil {
		t.Fatalf("TearDown after the mount went: %v", err)
	}
}

func TestTearDownRefusesOtherFileSystemAtDir(t *testing.T) {
	requireRoot(t)
	root := t.TempDir()
	unmountAll(t, root)
	dir := filepath.Join(root, "v")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	precious := t.TempDir()
	if err := os.WriteFile(filepath.Join(precious, "data"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(precious, dir, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	if err := TearDown(dir); err == nil || !strings.Contains(err.Error(), "not an emptyDir's tmpfs or hugetlbfs") {
		t.Fatalf("TearDown of a bind mount = %v, want a refusal", err)
	}
	if _, err := os.Stat(filepath.Join(precious, "data")); err != nil {
		t.Fatalf("TearDown deleted through a mount: %v", err)
	}
}

func TestMemorySize(t *testing.T) {
	q := func(s string) *resource.Quantity { v := resource.MustParse(s); return &v }
	container := func(limit string) corev1.Container {
		c := corev1.Container{Name: "c"}
		if limit != "" {
			c.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(limit)}
		}
		return c
	}
	pod := func(cs ...corev1.Container) *corev1.Pod { return &corev1.Pod{Spec: corev1.PodSpec{Containers: cs}} }

	tests := []struct {
		name        string
		allocatable *resource.Quantity
		pod         *corev1.Pod
		sizeLimit   *resource.Quantity
		want        string // "" for nil
	}{
		{"node allocatable alone", q("8Gi"), pod(container("")), nil, "8Gi"},
		{"sizeLimit below allocatable", q("8Gi"), pod(container("")), q("1Mi"), "1Mi"},
		{"sizeLimit above allocatable", q("8Gi"), pod(container("")), q("16Gi"), "8Gi"},
		{"pod limit below both", q("8Gi"), pod(container("64Mi"), container("64Mi")), q("1Gi"), "128Mi"},
		{"sizeLimit below pod limit", q("8Gi"), pod(container("512Mi")), q("1Mi"), "1Mi"},
		{"a container without limit leaves the pod unbounded", q("8Gi"), pod(container("64Mi"), container("")), nil, "8Gi"},
		{"pod-level limit", q("8Gi"), &corev1.Pod{Spec: corev1.PodSpec{
			Containers: []corev1.Container{container("")},
			Resources:  &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")}},
		}}, nil, "256Mi"},
		{"zero sizeLimit ignored", q("8Gi"), nil, q("0"), "8Gi"},
		{"nothing known", nil, nil, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := MemorySize(tt.allocatable, tt.pod, tt.sizeLimit)
			switch {
			case tt.want == "" && got != nil:
				t.Fatalf("MemorySize = %v, want nil", got)
			case tt.want == "":
			case got == nil:
				t.Fatalf("MemorySize = nil, want %s", tt.want)
			case got.Cmp(resource.MustParse(tt.want)) != 0:
				t.Fatalf("MemorySize = %v, want %s", got, tt.want)
			}
		})
	}
}

func TestApplyFSGroupMakesTheDirectoryTheGroups(t *testing.T) {
	requireRoot(t)
	for _, medium := range []corev1.StorageMedium{corev1.StorageMediumDefault, corev1.StorageMediumMemory} {
		t.Run(string(medium), func(t *testing.T) {
			root := t.TempDir()
			unmountAll(t, root)
			dir := filepath.Join(root, "vol")
			if err := Setup(dir, medium, nil); err != nil {
				t.Fatal(err)
			}
			if err := ApplyFSGroup(dir, nil); err != nil {
				t.Fatal(err)
			}
			if info, _ := os.Stat(dir); info.Mode()&fs.ModeSetgid != 0 {
				t.Fatalf("no fsGroup: mode %v, want no set-group-ID", info.Mode())
			}
			group := int64(2000)
			for range 2 { // idempotent
				if err := ApplyFSGroup(dir, &group); err != nil {
					t.Fatal(err)
				}
			}
			var st unix.Stat_t
			if err := unix.Stat(dir, &st); err != nil {
				t.Fatal(err)
			}
			if st.Gid != 2000 || st.Mode&0o7777 != 0o2777 {
				t.Errorf("gid %d mode %#o, want 2000 and 02777", st.Gid, st.Mode&0o7777)
			}
			// A file made in it takes the group.
			f := filepath.Join(dir, "made")
			if err := os.WriteFile(f, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := unix.Stat(f, &st); err != nil || st.Gid != 2000 {
				t.Errorf("a new file's gid %d (%v), want 2000", st.Gid, err)
			}
		})
	}
}

// TestApplyFSGroupTakesWhatTheVolumeHolds: while the root lacks the group, what the
// volume already holds is given to it too, as the kubelet's recursive change does.
func TestApplyFSGroupTakesWhatTheVolumeHolds(t *testing.T) {
	requireRoot(t)
	dir := filepath.Join(t.TempDir(), "vol")
	if err := Setup(dir, corev1.StorageMediumDefault, nil); err != nil {
		t.Fatal(err)
	}
	old := filepath.Join(dir, "old")
	if err := os.WriteFile(old, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	group := int64(2000)
	if err := ApplyFSGroup(dir, &group); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat(old, &st); err != nil || st.Gid != 2000 || st.Mode&0o777 != 0o660 {
		t.Errorf("a file already there: gid %d mode %#o (%v), want 2000 and 0660", st.Gid, st.Mode&0o777, err)
	}
}

// TestHugePageSize: the kubelet's rules and messages for a HugePages emptyDir's page size.
func TestHugePageSize(t *testing.T) {
	req := func(names ...string) corev1.ResourceList {
		l := corev1.ResourceList{}
		for _, n := range names {
			l[corev1.ResourceName(n)] = resource.MustParse("4Mi")
		}
		return l
	}
	pod := func(container, podLevel corev1.ResourceList) *corev1.Pod {
		p := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Requests: container}}}}}
		if podLevel != nil {
			p.Spec.Resources = &corev1.ResourceRequirements{Requests: podLevel}
		}
		return p
	}
	for _, tc := range []struct {
		name    string
		medium  corev1.StorageMedium
		pod     *corev1.Pod
		want    int64
		wantErr string
	}{
		{"HugePages, one size", corev1.StorageMediumHugePages, pod(req("hugepages-2Mi", "memory"), nil), 2 << 20, ""},
		{"HugePages, the pod-level request", corev1.StorageMediumHugePages, pod(req("memory"), req("hugepages-1Gi")), 1 << 30, ""},
		{"HugePages, two sizes", corev1.StorageMediumHugePages, pod(req("hugepages-2Mi", "hugepages-1Gi"), nil), 0, "medium: HugePages can't be used if container requests multiple huge page sizes"},
		{"HugePages-2Mi among two sizes", "HugePages-2Mi", pod(req("hugepages-2Mi", "hugepages-1Gi"), nil), 2 << 20, ""},
		{"HugePages-1Gi not requested", "HugePages-1Gi", pod(req("hugepages-2Mi"), nil), 0, "medium HugePages-1Gi: hugePages storage requested, but there is no resource request for huge pages"},
		{"no huge pages requested", corev1.StorageMediumHugePages, pod(req("memory"), nil), 0, "medium HugePages: hugePages storage requested, but there is no resource request for huge pages"},
		{"a medium without a size", "HugePages-x", pod(req("hugepages-2Mi"), nil), 0, "medium: HugePages-x is not a hugepage medium with a valid page size"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := HugePageSize(tc.medium, tc.pod)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Errorf("HugePageSize = %d, %v; want the error %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("HugePageSize = %d, %v; want %d", got, err, tc.want)
			}
		})
	}
}

// TestHugePagesMountAndTearDown: a hugetlbfs of the page size at the volume (the kernel's
// own; no huge page need be reserved to mount one), of mode 0755, kept by a second
// set-up, refused for another page size, gone with TearDown.
func TestHugePagesMountAndTearDown(t *testing.T) {
	requireRoot(t)
	if _, err := os.Stat("/sys/kernel/mm/hugepages/hugepages-2048kB"); err != nil {
		t.Fatalf("this test mounts a hugetlbfs of 2 MiB pages, which the kernel does not offer: %v", err)
	}
	root := t.TempDir()
	unmountAll(t, root)
	dir := filepath.Join(root, "v")
	if err := SetupHugePages(dir, 2<<20); err != nil {
		t.Fatal(err)
	}
	mounts := mountsAt(t, dir)
	if len(mounts) != 1 || mounts[0].FSType != "hugetlbfs" || !strings.Contains(mounts[0].VFSOptions, "pagesize=2M") ||
		!strings.Contains(mounts[0].Options, "nosuid") || !strings.Contains(mounts[0].Options, "nodev") {
		t.Fatalf("mounts at the volume: %+v, want one nosuid,nodev hugetlbfs of 2M pages", mounts)
	}
	if info, err := os.Stat(dir); err != nil || info.Mode().Perm() != 0o755 {
		t.Errorf("the volume's mode: %v, %v; want hugetlbfs's 0755, as the kubelet's", info.Mode(), err)
	}
	if err := SetupHugePages(dir, 2<<20); err != nil || len(mountsAt(t, dir)) != 1 {
		t.Errorf("a second set-up: %v, %d mounts; want it kept", err, len(mountsAt(t, dir)))
	}
	if err := SetupHugePages(dir, 1<<30); err == nil || !strings.Contains(err.Error(), "mounted dir pagesize '2Mi' and requested medium size '1Gi' differ") {
		t.Errorf("a set-up with another page size = %v, want the kubelet's refusal", err)
	}
	if err := TearDown(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("TearDown left the volume: %v", err)
	}
}
