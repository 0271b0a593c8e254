// Package emptydir sets up and tears down emptyDir volumes: a world-writable directory on
// the node's disk, or a tmpfs bounded in size for medium Memory.
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

// TearDown removes the emptyDir at dir: it unmounts the tmpfs mounted there, if any, and
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
		if top.FSType != "tmpfs" {
			return fmt.Errorf("tear down emptyDir %s: a %s file system (%s) is mounted there, not an emptyDir's tmpfs", dir, top.FSType, top.Source)
		}
		if err := unix.Unmount(top.Mountpoint, 0); err != nil {
			return fmt.Errorf("tear down emptyDir %s: unmount tmpfs: %w", dir, err)
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
