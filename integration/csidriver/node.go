package csidriver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// imageSize is the size of a staged volume's ext4 image.
const imageSize = 32 << 20

// node is the driver's Node service. Every call is idempotent, as the CSI spec asks.
type node struct {
	csipb.UnimplementedNodeServer
	d *Driver
}

func (n *node) NodeGetInfo(context.Context, *csipb.NodeGetInfoRequest) (*csipb.NodeGetInfoResponse, error) {
	n.d.record("NodeGetInfo")
	res := &csipb.NodeGetInfoResponse{NodeId: n.d.o.NodeID, MaxVolumesPerNode: n.d.o.MaxVolumesPerNode}
	if len(n.d.o.Topology) > 0 {
		res.AccessibleTopology = &csipb.Topology{Segments: n.d.o.Topology}
	}
	return res, nil
}

func (n *node) NodeGetCapabilities(context.Context, *csipb.NodeGetCapabilitiesRequest) (*csipb.NodeGetCapabilitiesResponse, error) {
	n.d.record("NodeGetCapabilities")
	res := &csipb.NodeGetCapabilitiesResponse{}
	types := []csipb.NodeServiceCapability_RPC_Type{csipb.NodeServiceCapability_RPC_GET_VOLUME_STATS, csipb.NodeServiceCapability_RPC_VOLUME_CONDITION}
	if n.d.o.Stage {
		// No EXPAND_VOLUME: growing a mounted ext4 (resize2fs online) needs
		// CAP_SYS_RESOURCE, which these machines do not give even to root.
		types = append(types, csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME)
	} else {
		types = append(types, csipb.NodeServiceCapability_RPC_EXPAND_VOLUME)
	}
	for _, t := range types {
		res.Capabilities = append(res.Capabilities, &csipb.NodeServiceCapability{Type: &csipb.NodeServiceCapability_Rpc{
			Rpc: &csipb.NodeServiceCapability_RPC{Type: t}}})
	}
	return res, nil
}

// validHandle refuses a volume handle that would leave the state directory.
func validHandle(h string) error {
	if h == "" || h == "." || h == ".." || strings.ContainsAny(h, "/\x00") {
		return status.Errorf(codes.InvalidArgument, "volume_id %q: a name without slashes is required", h)
	}
	return nil
}

func (n *node) NodeStageVolume(_ context.Context, req *csipb.NodeStageVolumeRequest) (*csipb.NodeStageVolumeResponse, error) {
	n.d.recordCall(Call{Method: "NodeStageVolume", VolumeID: req.GetVolumeId(), Staging: req.GetStagingTargetPath(), VolumeContext: req.GetVolumeContext(), Capability: req.GetVolumeCapability()})
	if !n.d.o.Stage {
		return nil, status.Error(codes.Unimplemented, "this driver does not stage")
	}
	if err := validHandle(req.GetVolumeId()); err != nil {
		return nil, err
	}
	staging := req.GetStagingTargetPath()
	if staging == "" {
		return nil, status.Error(codes.InvalidArgument, "staging_target_path: required")
	}
	if req.GetVolumeCapability() == nil {
		return nil, status.Error(codes.InvalidArgument, "volume_capability: required")
	}
	if err := os.MkdirAll(staging, 0o750); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if req.GetVolumeCapability().GetBlock() != nil {
		return n.stageBlock(req.GetVolumeId(), staging)
	}
	if mounted, err := mountinfo.Mounted(staging); err != nil {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	} else if mounted {
		return &csipb.NodeStageVolumeResponse{}, nil
	}
	img := filepath.Join(n.d.o.StateDir, req.GetVolumeId()+".img")
	if err := makeImage(img); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	out, err := exec.Command("losetup", "--find", "--show", img).CombinedOutput()
	if err != nil {
		return nil, status.Errorf(codes.Internal, "losetup %s: %v: %s", img, err, out)
	}
	dev := strings.TrimSpace(string(out))
	if err := unix.Mount(dev, staging, "ext4", 0, ""); err != nil {
		_ = exec.Command("losetup", "-d", dev).Run()
		return nil, status.Errorf(codes.Internal, "mount %s (%s) at %s: %v", dev, img, staging, err)
	}
	return &csipb.NodeStageVolumeResponse{}, nil
}

// makeImage makes a volume's ext4 image unless it exists.
func makeImage(img string) error {
	if _, err := os.Stat(img); err == nil {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(img), 0o700); err != nil {
		return err
	}
	tmp := img + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	err = f.Truncate(imageSize)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", tmp).CombinedOutput(); err != nil {
		return fmt.Errorf("mkfs.ext4 %s: %v: %s", tmp, err, out)
	}
	return os.Rename(tmp, img)
}

func (n *node) NodeUnstageVolume(_ context.Context, req *csipb.NodeUnstageVolumeRequest) (*csipb.NodeUnstageVolumeResponse, error) {
	n.d.recordCall(Call{Method: "NodeUnstageVolume", VolumeID: req.GetVolumeId(), Staging: req.GetStagingTargetPath()})
	staging := req.GetStagingTargetPath()
	if req.GetVolumeId() == "" || staging == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id and staging_target_path: required")
	}
	if err := n.unstageBlock(req.GetVolumeId(), staging); err != nil {
		return nil, err
	}
	mounts, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(staging))
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	for _, m := range mounts {
		if err := unix.Unmount(staging, 0); err != nil {
			return nil, status.Errorf(codes.Internal, "unmount %s: %v", staging, err)
		}
		if strings.HasPrefix(m.Source, "/dev/loop") {
			if out, err := exec.Command("losetup", "-d", m.Source).CombinedOutput(); err != nil {
				return nil, status.Errorf(codes.Internal, "losetup -d %s: %v: %s", m.Source, err, out)
			}
		}
	}
	return &csipb.NodeUnstageVolumeResponse{}, nil
}

func (n *node) NodePublishVolume(_ context.Context, req *csipb.NodePublishVolumeRequest) (*csipb.NodePublishVolumeResponse, error) {
	n.d.recordCall(Call{Method: "NodePublishVolume", VolumeID: req.GetVolumeId(), Target: req.GetTargetPath(), Staging: req.GetStagingTargetPath(),
		ReadOnly: req.GetReadonly(), VolumeContext: req.GetVolumeContext(), PublishContext: req.GetPublishContext(), Capability: req.GetVolumeCapability()})
	if err := validHandle(req.GetVolumeId()); err != nil {
		return nil, err
	}
	target := req.GetTargetPath()
	if target == "" {
		return nil, status.Error(codes.InvalidArgument, "target_path: required")
	}
	if req.GetVolumeCapability() == nil {
		return nil, status.Error(codes.InvalidArgument, "volume_capability: required")
	}
	if req.GetVolumeCapability().GetBlock() != nil {
		return n.publishBlock(req)
	}
	src := filepath.Join(n.d.o.StateDir, req.GetVolumeId())
	if n.d.o.Stage {
		src = req.GetStagingTargetPath()
		if mounted, err := mountinfo.Mounted(src); err != nil || !mounted {
			return nil, status.Errorf(codes.FailedPrecondition, "volume %s is not staged at %q", req.GetVolumeId(), src)
		}
	} else if err := os.MkdirAll(src, 0o755); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if err := os.MkdirAll(target, 0o750); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if mounted, err := mountinfo.Mounted(target); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	} else if mounted {
		return &csipb.NodePublishVolumeResponse{}, nil
	}
	if err := unix.Mount(src, target, "", unix.MS_BIND, ""); err != nil {
		return nil, status.Errorf(codes.Internal, "bind-mount %s at %s: %v", src, target, err)
	}
	if req.GetReadonly() {
		if err := unix.Mount("", target, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
			_ = unix.Unmount(target, 0)
			return nil, status.Errorf(codes.Internal, "remount %s read-only: %v", target, err)
		}
	}
	return &csipb.NodePublishVolumeResponse{}, nil
}

func (n *node) NodeUnpublishVolume(_ context.Context, req *csipb.NodeUnpublishVolumeRequest) (*csipb.NodeUnpublishVolumeResponse, error) {
	n.d.recordCall(Call{Method: "NodeUnpublishVolume", VolumeID: req.GetVolumeId(), Target: req.GetTargetPath()})
	target := req.GetTargetPath()
	if req.GetVolumeId() == "" || target == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id and target_path: required")
	}
	for {
		mounted, err := mountinfo.Mounted(target)
		if errors.Is(err, os.ErrNotExist) {
			return &csipb.NodeUnpublishVolumeResponse{}, nil
		}
		if err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		if !mounted {
			break
		}
		if err := unix.Unmount(target, 0); err != nil {
			return nil, status.Errorf(codes.Internal, "unmount %s: %v", target, err)
		}
	}
	if err := os.Remove(target); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csipb.NodeUnpublishVolumeResponse{}, nil
}

// NodeGetVolumeStats reports the file system at the volume's path, and the condition
// SetCondition gave the volume (healthy by default).
func (n *node) NodeGetVolumeStats(_ context.Context, req *csipb.NodeGetVolumeStatsRequest) (*csipb.NodeGetVolumeStatsResponse, error) {
	if req.GetVolumeId() == "" || req.GetVolumePath() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id and volume_path: required")
	}
	if validHandle(req.GetVolumeId()) != nil || !n.d.exists(req.GetVolumeId()) {
		return nil, status.Errorf(codes.NotFound, "volume %s does not exist", req.GetVolumeId())
	}
	var st unix.Statfs_t
	if err := unix.Statfs(req.GetVolumePath(), &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil, status.Errorf(codes.NotFound, "volume path %s: %v", req.GetVolumePath(), err)
		}
		return nil, status.Error(codes.Internal, err.Error())
	}
	bs := int64(st.Bsize)
	n.d.mu.Lock()
	cond := n.d.conditions[req.GetVolumeId()]
	n.d.mu.Unlock()
	return &csipb.NodeGetVolumeStatsResponse{
		Usage: []*csipb.VolumeUsage{
			{Unit: csipb.VolumeUsage_BYTES, Total: int64(st.Blocks) * bs, Available: int64(st.Bavail) * bs, Used: int64(st.Blocks-st.Bfree) * bs},
			{Unit: csipb.VolumeUsage_INODES, Total: int64(st.Files), Available: int64(st.Ffree), Used: int64(st.Files - st.Ffree)},
		},
		VolumeCondition: &csipb.VolumeCondition{Abnormal: cond != "", Message: cond},
	}, nil
}

// NodeExpandVolume, for directory volumes: a directory has no size of its own to grow,
// so it answers the required capacity (as the hostpath driver does). The staging mode
// does not offer it (NodeGetCapabilities).
func (n *node) NodeExpandVolume(_ context.Context, req *csipb.NodeExpandVolumeRequest) (*csipb.NodeExpandVolumeResponse, error) {
	n.d.recordCall(Call{Method: "NodeExpandVolume", VolumeID: req.GetVolumeId(), Target: req.GetVolumePath(), Staging: req.GetStagingTargetPath()})
	if req.GetVolumeId() == "" || req.GetVolumePath() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id and volume_path: required")
	}
	if validHandle(req.GetVolumeId()) != nil || !n.d.exists(req.GetVolumeId()) {
		return nil, status.Errorf(codes.NotFound, "volume %s does not exist", req.GetVolumeId())
	}
	if n.d.o.Stage {
		return nil, status.Error(codes.Unimplemented, "the staging mode does not expand volumes on the node")
	}
	if _, err := os.Stat(req.GetVolumePath()); err != nil {
		return nil, status.Errorf(codes.NotFound, "volume path %s: %v", req.GetVolumePath(), err)
	}
	return &csipb.NodeExpandVolumeResponse{CapacityBytes: req.GetCapacityRange().GetRequiredBytes()}, nil
}

// stagedDevice is the file in a block volume's staging directory where its loop device is
// bind-mounted.
func stagedDevice(staging string) string { return filepath.Join(staging, "device") }

// stageBlock attaches a block volume's image to a loop device (the image made when it is
// new; its file system is the pod's business) and bind-mounts the device at
// staging/device, which publishes bind-mount in turn.
func (n *node) stageBlock(id, staging string) (*csipb.NodeStageVolumeResponse, error) {
	dev := stagedDevice(staging)
	if mounted, err := mountinfo.Mounted(dev); err == nil && mounted {
		return &csipb.NodeStageVolumeResponse{}, nil
	}
	img := filepath.Join(n.d.o.StateDir, id+".img")
	if err := makeImage(img); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	out, err := exec.Command("losetup", "--find", "--show", img).CombinedOutput()
	if err != nil {
		return nil, status.Errorf(codes.Internal, "losetup %s: %v: %s", img, err, out)
	}
	loop := strings.TrimSpace(string(out))
	if err := os.WriteFile(dev, nil, 0o600); err != nil {
		_ = exec.Command("losetup", "-d", loop).Run()
		return nil, status.Error(codes.Internal, err.Error())
	}
	if err := unix.Mount(loop, dev, "", unix.MS_BIND, ""); err != nil {
		_ = exec.Command("losetup", "-d", loop).Run()
		return nil, status.Errorf(codes.Internal, "bind-mount %s (%s) at %s: %v", loop, img, dev, err)
	}
	return &csipb.NodeStageVolumeResponse{}, nil
}

// unstageBlock undoes stageBlock, if the staging directory has a staged device: the bind
// mount, the file, and every loop device of the volume's image.
func (n *node) unstageBlock(id, staging string) error {
	dev := stagedDevice(staging)
	if _, err := os.Lstat(dev); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	for {
		mounted, err := mountinfo.Mounted(dev)
		if err != nil {
			return status.Error(codes.Internal, err.Error())
		}
		if !mounted {
			break
		}
		if err := unix.Unmount(dev, 0); err != nil {
			return status.Errorf(codes.Internal, "unmount %s: %v", dev, err)
		}
	}
	if err := os.Remove(dev); err != nil && !errors.Is(err, os.ErrNotExist) {
		return status.Error(codes.Internal, err.Error())
	}
	if validHandle(id) != nil {
		return nil
	}
	img := filepath.Join(n.d.o.StateDir, id+".img")
	out, err := exec.Command("losetup", "--noheadings", "--output", "NAME", "--associated", img).CombinedOutput()
	if err != nil {
		return status.Errorf(codes.Internal, "losetup --associated %s: %v: %s", img, err, out)
	}
	for _, loop := range strings.Fields(string(out)) {
		if out, err := exec.Command("losetup", "-d", loop).CombinedOutput(); err != nil {
			return status.Errorf(codes.Internal, "losetup -d %s: %v: %s", loop, err, out)
		}
	}
	return nil
}

// publishBlock bind-mounts a staged block volume's device at the target file, which it
// makes (the CO makes its directory, as the CSI spec says). Block volumes need the
// staging mode.
func (n *node) publishBlock(req *csipb.NodePublishVolumeRequest) (*csipb.NodePublishVolumeResponse, error) {
	if !n.d.o.Stage {
		return nil, status.Error(codes.InvalidArgument, "block volumes need the staging mode of this driver")
	}
	src := stagedDevice(req.GetStagingTargetPath())
	if mounted, err := mountinfo.Mounted(src); err != nil || !mounted {
		return nil, status.Errorf(codes.FailedPrecondition, "block volume %s is not staged at %q", req.GetVolumeId(), req.GetStagingTargetPath())
	}
	target := req.GetTargetPath()
	if mounted, err := mountinfo.Mounted(target); err == nil && mounted {
		return &csipb.NodePublishVolumeResponse{}, nil
	}
	f, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	_ = f.Close()
	if err := unix.Mount(src, target, "", unix.MS_BIND, ""); err != nil {
		return nil, status.Errorf(codes.Internal, "bind-mount %s at %s: %v", src, target, err)
	}
	if req.GetReadonly() {
		if err := unix.Mount("", target, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
			_ = unix.Unmount(target, 0)
			return nil, status.Errorf(codes.Internal, "remount %s read-only: %v", target, err)
		}
	}
	return &csipb.NodePublishVolumeResponse{}, nil
}
