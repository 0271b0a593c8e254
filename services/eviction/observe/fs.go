package observe

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/unitlet/unitlet/shared/usage"
)

// fsStats is one file system's size and free space, as cadvisor's vfs stats read them.
type fsStats struct {
	capacity, available int64 // bytes
	inodes, inodesFree  int64
	dev                 uint64 // the device of the path measured
}

func (f fsStats) bytesValue() Value  { return Value{Available: f.available, Capacity: f.capacity} }
func (f fsStats) inodesValue() Value { return Value{Available: f.inodesFree, Capacity: f.inodes} }

// statFs measures the file system holding path: f_frsize times f_blocks and f_bavail (the
// space an unprivileged writer has), f_files and f_ffree.
func statFs(path string) (fsStats, error) {
	var sfs unix.Statfs_t
	if err := unix.Statfs(path, &sfs); err != nil {
		return fsStats{}, fmt.Errorf("statfs %s: %w", path, err)
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return fsStats{}, fmt.Errorf("stat %s: %w", path, err)
	}
	size := int64(sfs.Frsize)
	return fsStats{
		capacity:   size * int64(sfs.Blocks),
		available:  size * int64(sfs.Bavail),
		inodes:     int64(sfs.Files),
		inodesFree: int64(sfs.Ffree),
		dev:        st.Dev,
	}, nil
}

// runtimeFs measures the runtime's image file system and its container file system: the
// mount points the runtime names first in ImageFsInfo. The container file system is the
// image one unless the runtime names another mount point on another device (split).
func (s *Source) runtimeFs(ctx context.Context) (image fsStats, imageErr error, container fsStats, containerErr error, split bool) {
	resp, err := s.o.Runtime.ImageFsInfo(ctx, &runtimeapi.ImageFsInfoRequest{})
	if err != nil {
		err = fmt.Errorf("runtime image file system info: %w", err)
		return fsStats{}, err, fsStats{}, err, false
	}
	imageFss := resp.GetImageFilesystems()
	if len(imageFss) == 0 || imageFss[0].GetFsId().GetMountpoint() == "" {
		err := errors.New("the runtime names no image file system")
		return fsStats{}, err, fsStats{}, err, false
	}
	imageMount := imageFss[0].GetFsId().GetMountpoint()
	image, imageErr = statFs(imageMount)
	if imageErr != nil {
		imageErr = fmt.Errorf("image file system: %w", imageErr)
	}
	container, containerErr = image, imageErr
	if cfs := resp.GetContainerFilesystems(); len(cfs) > 0 {
		mount := cfs[0].GetFsId().GetMountpoint()
		if mount != "" && mount != imageMount {
			c, err := statFs(mount)
			switch {
			case err != nil:
				return image, imageErr, fsStats{}, fmt.Errorf("container file system: %w", err), false
			case imageErr != nil || c.dev != image.dev:
				return image, imageErr, c, nil, imageErr == nil
			}
		}
	}
	return image, imageErr, container, containerErr, false
}

// diskUsage is the kubelet's du of path (usage.DiskUsage): the blocks allocated (times
// 512) and the inodes of path and everything below it, a file with several links counted
// once, entries on another device than path's (mounts below it) left out. Files that
// vanish meanwhile are not used. The walk is bounded in memory (streamed directory reads,
// a capped set of hard-linked inodes, a depth limit): whatever a pod writes into a volume,
// measuring it does not take this service past its MemoryMax=. With usage.ErrTooDeep the
// counts are a lower bound, and the caller keeps them.
func diskUsage(path string) (bytes, inodes int64, err error) {
	return usage.DiskUsage(path)
}

// filesUsage is the du of each file (not directory) directly in dir, summed: how the
// kubelet measures a log directory. A missing dir uses nothing.
func filesUsage(dir string) (bytes, inodes int64, err error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, fmt.Errorf("list %s: %w", dir, err)
	}
	var errs []error
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		b, i, err := diskUsage(filepath.Join(dir, e.Name()))
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
			continue
		}
		bytes += b
		inodes += i
	}
	return bytes, inodes, errors.Join(errs...)
}
