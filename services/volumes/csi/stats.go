package csi

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	corev1 "k8s.io/api/core/v1"
)

// statsTimeout bounds a NodeGetVolumeStats: the usage loop measures volume after volume,
// and a hung driver must not hold it for a call's whole two minutes.
const statsTimeout = 10 * time.Second

// ErrNoVolumeStats is a driver without the GET_VOLUME_STATS capability: the kubelet then
// reports no usage for its volumes; unitlet measures their file system instead.
var ErrNoVolumeStats = errors.New("the driver does not report volume stats (no GET_VOLUME_STATS capability)")

// VolumeStats is a CSI volume's usage and condition, as its driver reports them.
type VolumeStats struct {
	UsedBytes, CapacityBytes, AvailableBytes int64
	Inodes, InodesFree, InodesUsed           int64
	// Condition is the driver's word on the volume's health (VOLUME_CONDITION); nil when
	// it gives none.
	Condition *VolumeCondition
}

// VolumeCondition is a volume's health as its driver says.
type VolumeCondition struct {
	Abnormal bool
	Message  string
}

// Stats asks the driver of the volume published at target (a pod's .../mount) for its
// usage and condition (NodeGetVolumeStats), as the kubelet's CSI metrics provider does.
func (m *Mounter) Stats(ctx context.Context, target string) (VolumeStats, error) {
	rec, err := readVolData(filepath.Dir(target))
	if err != nil {
		return VolumeStats{}, err
	}
	drv, err := m.drivers.Driver(rec.DriverName)
	if err != nil {
		return VolumeStats{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, statsTimeout)
	defer cancel()
	has, err := nodeCapabilities(ctx, drv)
	if err != nil {
		return VolumeStats{}, err
	}
	if !has(csipb.NodeServiceCapability_RPC_GET_VOLUME_STATS) {
		return VolumeStats{}, ErrNoVolumeStats
	}
	req := &csipb.NodeGetVolumeStatsRequest{VolumeId: rec.VolumeHandle, VolumePath: target}
	if has(csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME) && rec.VolumeLifecycleMode != "Ephemeral" {
		req.StagingTargetPath = m.StagingPath(rec.DriverName, rec.VolumeHandle)
	}
	res, err := call(ctx, drv, "NodeGetVolumeStats", func(ctx context.Context, c csipb.NodeClient) (*csipb.NodeGetVolumeStatsResponse, error) {
		return c.NodeGetVolumeStats(ctx, req)
	})
	if err != nil {
		return VolumeStats{}, err
	}
	var out VolumeStats
	for _, u := range res.GetUsage() {
		switch u.GetUnit() {
		case csipb.VolumeUsage_BYTES:
			out.UsedBytes, out.CapacityBytes, out.AvailableBytes = u.GetUsed(), u.GetTotal(), u.GetAvailable()
		case csipb.VolumeUsage_INODES:
			out.InodesUsed, out.Inodes, out.InodesFree = u.GetUsed(), u.GetTotal(), u.GetAvailable()
		default:
			return VolumeStats{}, fmt.Errorf("CSI driver %s: NodeGetVolumeStats: unknown usage unit %v", drv.Name, u.GetUnit())
		}
	}
	if c := res.GetVolumeCondition(); c != nil && has(csipb.NodeServiceCapability_RPC_VOLUME_CONDITION) {
		out.Condition = &VolumeCondition{Abnormal: c.GetAbnormal(), Message: c.GetMessage()}
	}
	return out, nil
}

// ErrNoNodeExpansion is a driver without the EXPAND_VOLUME node capability: its volumes
// need no expansion on the node.
var ErrNoNodeExpansion = errors.New("the driver does not expand volumes on the node (no EXPAND_VOLUME capability)")

// Expand has the driver of the volume published at target grow its file system to newSize
// bytes (NodeExpandVolume), once the controller side has grown the volume, as the
// kubelet's node expansion does; it returns the capacity the driver reports (newSize when
// it reports none).
func (m *Mounter) Expand(ctx context.Context, target string, pv *corev1.PersistentVolume, newSize int64) (int64, error) {
	rec, err := readVolData(filepath.Dir(target))
	if err != nil {
		return 0, err
	}
	drv, err := m.drivers.Driver(rec.DriverName)
	if err != nil {
		return 0, err
	}
	has, err := nodeCapabilities(ctx, drv)
	if err != nil {
		return 0, err
	}
	if !has(csipb.NodeServiceCapability_RPC_EXPAND_VOLUME) {
		return 0, ErrNoNodeExpansion
	}
	fsType := ""
	if pv.Spec.CSI != nil {
		fsType = pv.Spec.CSI.FSType
	}
	unlock := m.lock(rec.DriverName, rec.VolumeHandle)
	defer unlock()
	req := &csipb.NodeExpandVolumeRequest{
		VolumeId: rec.VolumeHandle, VolumePath: target, CapacityRange: &csipb.CapacityRange{RequiredBytes: newSize},
		VolumeCapability: volumeCapability(pv.Spec.AccessModes, pv.Spec.MountOptions, fsType, has(csipb.NodeServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER), false),
	}
	if has(csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME) {
		req.StagingTargetPath = m.StagingPath(rec.DriverName, rec.VolumeHandle)
	}
	res, err := call(ctx, drv, "NodeExpandVolume", func(ctx context.Context, c csipb.NodeClient) (*csipb.NodeExpandVolumeResponse, error) {
		return c.NodeExpandVolume(ctx, req)
	})
	if err != nil {
		return 0, err
	}
	if res.GetCapacityBytes() > 0 {
		return res.GetCapacityBytes(), nil
	}
	return newSize, nil
}
