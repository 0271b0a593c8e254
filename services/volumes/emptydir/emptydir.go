// Package emptydir sets up and tears down emptyDir volumes: a world-writable directory on
// the node's disk, a tmpfs bounded in size for medium Memory, or a hugetlbfs for media
// HugePages and HugePages-<size>.
package emptydir

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"

	"github.com/unitlet/unitlet/services/volumes/ownership"
)

const (
	// volumeMode is the mode of an emptyDir, as the kubelet makes it: any user of any
	// container may write to it.
	volumeMode fs.FileMode = 0o777
	// parentMode is the mode of parent directories Setup has to create (the pod's volume
	// directories), not world-accessible, as the kubelet's pod directories.
	parentMode fs.FileMode = 0o750
)

// Setup makes dir an emptyDir volume of the given medium. The default medium is a
// directory of mode 0777 on the disk dir lies on. Memory mounts a tmpfs at dir, of mode
// 0777 and at most sizeLimit bytes; a nil or non-positive sizeLimit gives the node's total
// memory (callers pass MemorySize's answer, which bounds it by node allocatable memory and
// the pod's limit). Setup is idempotent: an existing directory is kept, its mode repaired,
// and a tmpfs already mounted at dir is left as it is.
func Setup(dir string, medium corev1.StorageMedium, sizeLimit *resource.Quantity) error {
	switch medium {
	case corev1.StorageMediumDefault:
		if err := makeDir(dir); err != nil {
			return fmt.Errorf("set up emptyDir %s: %w", dir, err)
		}
		return nil
	case corev1.StorageMediumMemory:
		if err := setupTmpfs(dir, sizeLimit); err != nil {
			return fmt.Errorf("set up emptyDir %s on tmpfs: %w", dir, err)
		}
		return nil
	default:
		return fmt.Errorf("set up emptyDir %s: medium %q is not supported", dir, medium)
	}
}

// HugePageSize is the page size, in bytes, of a HugePages emptyDir of pod, by the
// kubelet's rules and messages: for medium HugePages the one page size the pod requests
// (at pod level or in any container), for HugePages-<size> that size, which the pod must
// request.
func HugePageSize(medium corev1.StorageMedium, pod *corev1.Pod) (int64, error) {
	var want int64
	if medium != corev1.StorageMediumHugePages {
		size, ok := strings.CutPrefix(string(medium), string(corev1.StorageMediumHugePagesPrefix))
		q, err := resource.ParseQuantity(size)
		if !ok || err != nil {
			return 0, fmt.Errorf("medium: %s is not a hugepage medium with a valid page size", medium)
		}
		want = q.Value()
	}
	lists := []corev1.ResourceList{}
	if pod.Spec.Resources != nil {
		lists = append(lists, pod.Spec.Resources.Requests)
	}
	for _, cs := range [][]corev1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		for _, c := range cs {
			lists = append(lists, c.Resources.Requests)
		}
	}
	var found int64
	for _, l := range lists {
		for name := range l {
			size, ok := strings.CutPrefix(string(name), corev1.ResourceHugePagesPrefix)
			if !ok {
				continue
			}
			q, err := resource.ParseQuantity(size)
			if err != nil {
				return 0, fmt.Errorf("resource name: %s is an invalid hugepage name", name)
			}
			bytes := q.Value()
			switch {
			case medium == corev1.StorageMediumHugePages && found != 0 && found != bytes:
				return 0, fmt.Errorf("medium: %s can't be used if container requests multiple huge page sizes", medium)
			case medium == corev1.StorageMediumHugePages, bytes == want:
				found = bytes
			}
		}
	}
	if found == 0 {
		return 0, fmt.Errorf("medium %s: hugePages storage requested, but there is no resource request for huge pages", medium)
	}
	return found, nil
}

// SetupHugePages makes dir an emptyDir on a hugetlbfs of the given page size (bytes),
// mounted nodev and nosuid (the kubelet's is only nodev; nothing set-user-ID belongs on
// it), of hugetlbfs's default mode 0755 as the kubelet's: root creates files there, or the
// pod's fsGroup once ApplyFSGroup has given the directory to it. Idempotent: a hugetlbfs of that page size already mounted there is kept, one of
// another size is an error.
func SetupHugePages(dir string, pageSize int64) error {
	if err := makeDir(dir); err != nil {
		return fmt.Errorf("set up emptyDir %s on hugetlbfs: %w", dir, err)
	}
	top, err := topMount(dir)
	if err != nil {
		return fmt.Errorf("set up emptyDir %s on hugetlbfs: %w", dir, err)
	}
	want := resource.NewQuantity(pageSize, resource.BinarySI)
	if top != nil && top.FSType == "hugetlbfs" {
		got, ok := mountPageSize(top.VFSOptions)
		if !ok || got != pageSize {
			return fmt.Errorf("set up emptyDir %s: mounted dir pagesize '%s' and requested medium size '%s' differ", dir, resource.NewQuantity(got, resource.BinarySI), want)
		}
		return nil
	}
	options := fmt.Sprintf("pagesize=%d", pageSize)
	if err := unix.Mount("nodev", dir, "hugetlbfs", unix.MS_NOSUID|unix.MS_NODEV, options); err != nil {
		return fmt.Errorf("set up emptyDir %s: mount hugetlbfs (%s): %w", dir, options, err)
	}
	return nil
}

// mountPageSize is the pagesize option of a hugetlbfs mount's options ("pagesize=2M").
func mountPageSize(options string) (int64, bool) {
	for _, o := range strings.Split(options, ",") {
		v, ok := strings.CutPrefix(o, "pagesize=")
		if !ok {
			continue
		}
		// The kernel writes K, M and G, in powers of two.
		q, err := resource.ParseQuantity(v + "i")
		if err != nil {
			if q, err = resource.ParseQuantity(v); err != nil {
				return 0, false
			}
		}
		return q.Value(), true
	}
	return 0, false
}

// makeDir creates dir with mode 0777 whatever the process's umask, and its missing parents
// with mode 0750.
func makeDir(dir string) error {
	if err := os.MkdirAll(filepath.Dir(dir), parentMode); err != nil {
		return fmt.Errorf("create parent directory: %w", err)
	}
	if err := os.Mkdir(dir, volumeMode); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("create directory: %w", err)
	}
	info, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if !info.IsDir() {
		return fmt.Errorf("%s exists and is not a directory (%v)", dir, info.Mode().Type())
	}
	if info.Mode().Perm() != volumeMode {
		// The umask took bits away; chmod is not subject to it.
		if err := os.Chmod(dir, volumeMode); err != nil {
			return fmt.Errorf("set mode %v: %w", volumeMode, err)
		}
	}
	return nil
}

func setupTmpfs(dir string, sizeLimit *resource.Quantity) error {
	if err := makeDir(dir); err != nil {
		return err
	}
	top, err := topMount(dir)
	if err != nil {
		return err
	}
	if top != nil && top.FSType == "tmpfs" {
		return nil
	}
	size, err := tmpfsSize(sizeLimit)
	if err != nil {
		return err
	}
	options := fmt.Sprintf("size=%d,mode=%#o", size, volumeMode)
	// nosuid and nodev: a pod's memory volume never needs set-user-ID files or devices,
	// and the kubelet's tmpfs mounts allow both; this one is stricter.
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, options); err != nil {
		return fmt.Errorf("mount tmpfs (%s): %w", options, err)
	}
	return nil
}

// tmpfsSize is sizeLimit in bytes, or all of the node's memory without one.
func tmpfsSize(sizeLimit *resource.Quantity) (int64, error) {
	if sizeLimit != nil && sizeLimit.Sign() > 0 {
		return sizeLimit.Value(), nil
	}
	var info unix.Sysinfo_t
	if err := unix.Sysinfo(&info); err != nil {
		return 0, fmt.Errorf("read the node's memory: %w", err)
	}
	return int64(info.Totalram) * int64(info.Unit), nil
}

// TearDown removes the emptyDir at dir: it unmounts the tmpfs or hugetlbfs mounted there,
// if any, and
// removes the directory with its content. It refuses, removing nothing, when another kind
// of file system is mounted at dir or anything is mounted below it, so that it never
// deletes through a mount into files that are not the volume's. A missing dir is not an
// error.
func TearDown(dir string) error {
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	for {
		top, err := topMount(dir)
		if err != nil {
			return fmt.Errorf("tear down emptyDir %s: %w", dir, err)
		}
		if top == nil {
			break
		}
		if top.FSType != "tmpfs" && top.FSType != "hugetlbfs" {
			return fmt.Errorf("tear down emptyDir %s: a %s file system (%s) is mounted there, not an emptyDir's tmpfs or hugetlbfs", dir, top.FSType, top.Source)
		}
		if err := unix.Unmount(top.Mountpoint, 0); err != nil {
			return fmt.Errorf("tear down emptyDir %s: unmount %s: %w", dir, top.FSType, err)
		}
	}
	below, err := mountsBelow(dir)
	if err != nil {
		return fmt.Errorf("tear down emptyDir %s: %w", dir, err)
	}
	if len(below) > 0 {
		return fmt.Errorf("tear down emptyDir %s: still mounted below it: %s", dir, strings.Join(below, ", "))
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("tear down emptyDir %s: %w", dir, err)
	}
	return nil
}

// topMount is the mount at dir that is visible (the last one mounted there), or nil.
func topMount(dir string) (*mountinfo.Info, error) {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", dir, err)
	}
	mounts, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(real))
	if err != nil {
		return nil, fmt.Errorf("read mounts: %w", err)
	}
	if len(mounts) == 0 {
		return nil, nil
	}
	return mounts[len(mounts)-1], nil
}

// mountsBelow lists the mount points strictly below dir.
func mountsBelow(dir string) ([]string, error) {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", dir, err)
	}
	mounts, err := mountinfo.GetMounts(mountinfo.PrefixFilter(real))
	if err != nil {
		return nil, fmt.Errorf("read mounts: %w", err)
	}
	var below []string
	for _, m := range mounts {
		if m.Mountpoint != real {
			below = append(below, m.Mountpoint)
		}
	}
	return below, nil
}

// MemorySize is the size of a memory-backed emptyDir as the kubelet reckons it: the
// smallest of the node's allocatable memory, the pod's memory limit (when every container,
// or the pod itself, declares one) and the volume's sizeLimit, ignoring those that are nil
// or not positive. It is nil when none is known.
func MemorySize(nodeAllocatable *resource.Quantity, pod *corev1.Pod, sizeLimit *resource.Quantity) *resource.Quantity {
	var size *resource.Quantity
	consider := func(q *resource.Quantity) {
		if q == nil || q.Sign() <= 0 {
			return
		}
		if size == nil || q.Cmp(*size) < 0 {
			c := q.DeepCopy()
			size = &c
		}
	}
	consider(nodeAllocatable)
	if pod != nil {
		consider(podMemoryLimit(pod))
	}
	consider(sizeLimit)
	return size
}

// podMemoryLimit is the pod's effective memory limit, or nil when some container has none
// and the pod sets no pod-level limit (the pod is then unbounded).
func podMemoryLimit(pod *corev1.Pod) *resource.Quantity {
	declared := true
	limits := resourcehelper.PodLimits(pod, resourcehelper.PodResourcesOptions{
		ContainerFn: func(res corev1.ResourceList, _ resourcehelper.ContainerType) {
			if res.Memory().IsZero() {
				declared = false
			}
		},
	})
	if pod.Spec.Resources != nil && !pod.Spec.Resources.Limits.Memory().IsZero() {
		declared = true
	}
	if !declared {
		return nil
	}
	limit, ok := limits[corev1.ResourceMemory]
	if !ok {
		return nil
	}
	return &limit
}

// ApplyFSGroup gives the emptyDir at dir to a pod's fsGroup, as the kubelet does when it
// sets one up: the directory and what it holds take the group, and directories become
// set-group-ID (the root 02777), so that what the pod's containers create in it belongs
// to the group too. The kubelet does this once, at the first set-up (an empty directory);
// so here it is done only while the root lacks the group or the bits, whatever the pod's
// fsGroupChangePolicy, which the kubelet does not apply to emptyDirs either. nil does
// nothing.
func ApplyFSGroup(dir string, fsGroup *int64) error {
	if fsGroup == nil || ownership.RootMatches(dir, *fsGroup, false) {
		return nil
	}
	return ownership.Set(dir, *fsGroup, false)
}
