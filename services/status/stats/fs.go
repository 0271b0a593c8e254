package stats

import (
	"context"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// fsStats is the size and use of the filesystem holding path.
func fsStats(path string, now time.Time) (*statsv1alpha1.FsStats, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return nil, fmt.Errorf("statfs %s: %w", path, err)
	}
	bsize := uint64(st.Bsize)
	capacity := st.Blocks * bsize
	available := st.Bavail * bsize
	used := (st.Blocks - st.Bfree) * bsize
	inodes, inodesFree := st.Files, st.Ffree
	inodesUsed := inodes - inodesFree
	return &statsv1alpha1.FsStats{
		Time:           metav1.NewTime(now),
		AvailableBytes: &available,
		CapacityBytes:  &capacity,
		UsedBytes:      &used,
		Inodes:         &inodes,
		InodesFree:     &inodesFree,
		InodesUsed:     &inodesUsed,
	}, nil
}

// runtimeFs is the runtime's image filesystem (and its container filesystem, the same one
// unless the runtime names another): what the runtime says it uses there, and the size of
// the filesystem holding its mountpoint when that is visible from here.
func (p *Provider) runtimeFs(ctx context.Context, now time.Time) (*statsv1alpha1.RuntimeStats, error) {
	resp, err := p.rt.ImageFsInfo(ctx, &runtimeapi.ImageFsInfoRequest{})
	if err != nil {
		return nil, err
	}
	if len(resp.GetImageFilesystems()) == 0 {
		return nil, fmt.Errorf("the runtime reports no image filesystem")
	}
	imageFs := filesystemStats(resp.GetImageFilesystems()[0], now)
	containerFs := imageFs
	if cf := resp.GetContainerFilesystems(); len(cf) > 0 {
		containerFs = filesystemStats(cf[0], now)
	}
	return &statsv1alpha1.RuntimeStats{ImageFs: imageFs, ContainerFs: containerFs}, nil
}

func filesystemStats(u *runtimeapi.FilesystemUsage, now time.Time) *statsv1alpha1.FsStats {
	s := &statsv1alpha1.FsStats{Time: metav1.NewTime(now)}
	if u.GetTimestamp() != 0 {
		s.Time = metav1.NewTime(time.Unix(0, u.GetTimestamp()))
	}
	if u.GetUsedBytes() != nil {
		v := u.GetUsedBytes().GetValue()
		s.UsedBytes = &v
	}
	if u.GetInodesUsed() != nil {
		v := u.GetInodesUsed().GetValue()
		s.InodesUsed = &v
	}
	// A mountpoint not visible here (another mount namespace) leaves the size out, as the
	// kubelet does when cadvisor does not know the device.
	if mp := u.GetFsId().GetMountpoint(); mp != "" {
		if fs, err := fsStats(mp, now); err == nil {
			s.CapacityBytes, s.AvailableBytes = fs.CapacityBytes, fs.AvailableBytes
			s.Inodes, s.InodesFree = fs.Inodes, fs.InodesFree
		}
	}
	return s
}
