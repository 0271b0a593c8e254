package csi

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Block volumes (a PV of volumeMode Block) live at the kubelet's paths under
// <root-dir>/plugins/kubernetes.io/csi/volumeDevices: staging/<pv> is where the driver
// stages the volume, publish/<pv>/<pod uid> the device file it publishes for a pod, and
// <pv>/data/vol_data.json the volume's record (written before anything else and removed
// after the unstage). A pod's <pods>/<uid>/volumeDevices/kubernetes.io~csi/<pv> is a
// symbolic link to its device file: what the runtime hands to the containers, and what a
// teardown (after a restart too) starts from.
const (
	blockDir    = "volumeDevices"
	blockPodDir = "volumeDevices"
	// The names a block PV cannot have: its directories would be the staging and publish
	// directories of every block volume.
	blockStaging = "staging"
	blockPublish = "publish"
)

func (m *Mounter) blockStagingPath(pv string) string {
	return filepath.Join(m.stagingDir, blockDir, blockStaging, pv)
}

func (m *Mounter) blockPublishPath(pv string, uid types.UID) string {
	return filepath.Join(m.stagingDir, blockDir, blockPublish, pv, string(uid))
}

func (m *Mounter) blockDataDir(pv string) string {
	return filepath.Join(m.stagingDir, blockDir, pv, "data")
}

// BlockLink is a pod's link to its block volume's device,
// <pods>/<uid>/volumeDevices/kubernetes.io~csi/<pv>.
func (m *Mounter) BlockLink(uid types.UID, pv string) string {
	return filepath.Join(m.podsDir, string(uid), blockPodDir, "kubernetes.io~csi", pv)
}

// SetUpBlock makes a pod's CSI persistent volume of volumeMode Block ready and returns the
// pod's link to its device (p.Dir, which must be BlockLink of the pod and the PV):
// attached and staged as a file system volume is, then published as a device file for the
// pod. No fsGroup applies: a device's group is the runtime's.
func (m *Mounter) SetUpBlock(ctx context.Context, p Publication) (string, error) {
	src := p.PV.Spec.CSI
	if src.VolumeHandle == "" {
		return "", fmt.Errorf("PersistentVolume %s: spec.csi.volumeHandle is empty", p.PV.Name)
	}
	if p.PV.Name == blockStaging || p.PV.Name == blockPublish {
		return "", fmt.Errorf("PersistentVolume %s: a block volume cannot be named %q, the name of the node's directory of every block volume's %s paths; rename the PV", p.PV.Name, p.PV.Name, p.PV.Name)
	}
	if p.Dir != m.BlockLink(p.Pod.UID, p.PV.Name) {
		return "", fmt.Errorf("PersistentVolume %s: the link to a block volume must be %s, not %s", p.PV.Name, m.BlockLink(p.Pod.UID, p.PV.Name), p.Dir)
	}
	return m.setUp(ctx, p.Pod, p.Dir, volumeSpec{
		name: p.PV.Name, what: "PersistentVolume " + p.PV.Name, driver: src.Driver, handle: src.VolumeHandle, mode: storagev1.VolumeLifecyclePersistent,
		readOnly: p.ReadOnly || src.ReadOnly, attributes: src.VolumeAttributes, publishSecret: src.NodePublishSecretRef,
		accessModes: p.PV.Spec.AccessModes, source: src, block: true,
	})
}

// LinkDevice makes link a symbolic link to target (replacing a link to elsewhere), its
// directory made first.
func LinkDevice(link, target string) error {
	if to, err := os.Readlink(link); err == nil && to == target {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(link), 0o750); err != nil {
		return err
	}
	if err := os.Remove(link); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return os.Symlink(target, link)
}

// stageBlock stages a block volume at staging unless another pod of the node has it
// published (staged then). Called with the volume's lock held.
func (m *Mounter) stageBlock(ctx context.Context, drv Driver, src *corev1.CSIPersistentVolumeSource, pv string, self types.UID, staging string, publishContext map[string]string, capability *csipb.VolumeCapability) error {
	published, err := os.ReadDir(filepath.Dir(m.blockPublishPath(pv, self)))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if slices.ContainsFunc(published, func(e os.DirEntry) bool { return e.Name() != string(self) }) {
		return nil
	}
	if err := os.MkdirAll(staging, 0o750); err != nil {
		return err
	}
	secrets, err := m.secrets(ctx, src.NodeStageSecretRef, "nodeStageSecretRef")
	if err != nil {
		return err
	}
	_, err = call(ctx, drv, "NodeStageVolume", func(ctx context.Context, c csipb.NodeClient) (*csipb.NodeStageVolumeResponse, error) {
		return c.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{
			VolumeId: src.VolumeHandle, PublishContext: publishContext, StagingTargetPath: staging,
			VolumeCapability: capability, Secrets: secrets, VolumeContext: src.VolumeAttributes,
		})
	})
	return err
}

// TearDownBlock unpublishes a pod's block volume (link is the pod's link to it) and,
// when no other pod of the node links to it, unstages it and removes its record.
func (m *Mounter) TearDownBlock(ctx context.Context, link string) error {
	pv := filepath.Base(link)
	uid := types.UID(filepath.Base(filepath.Dir(filepath.Dir(filepath.Dir(link)))))
	if link != m.BlockLink(uid, pv) {
		return fmt.Errorf("tear down CSI block volume %s: not a pod's link to a block volume", link)
	}
	publish := m.blockPublishPath(pv, uid)
	rec, err := readVolData(m.blockDataDir(pv))
	if errors.Is(err, os.ErrNotExist) {
		// The record is written before the link and removed after the last link: a link
		// without one was never published.
		if mounted, merr := isMountPoint(publish); merr != nil || mounted {
			return fmt.Errorf("tear down CSI block volume %s: %s is published but the volume has no %s naming its driver", link, publish, volDataFile)
		}
		return removeLink(link)
	}
	if err != nil {
		return fmt.Errorf("tear down CSI block volume %s: %w", link, err)
	}
	drv, err := m.drivers.Driver(rec.DriverName)
	if err != nil {
		return fmt.Errorf("tear down CSI block volume %s: %w", link, err)
	}
	unlock := m.lock(rec.DriverName, rec.VolumeHandle)
	defer unlock()
	if _, err := os.Lstat(publish); err == nil {
		if _, err := call(ctx, drv, "NodeUnpublishVolume", func(ctx context.Context, c csipb.NodeClient) (*csipb.NodeUnpublishVolumeResponse, error) {
			return c.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: rec.VolumeHandle, TargetPath: publish})
		}); err != nil {
			return fmt.Errorf("tear down CSI block volume %s: %w", link, err)
		}
		if mounted, err := isMountPoint(publish); err != nil || mounted {
			return fmt.Errorf("tear down CSI block volume %s: %s is still mounted after the driver's unpublish", link, publish)
		}
		if err := os.Remove(publish); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("tear down CSI block volume %s: %w", link, err)
		}
	}
	if err := removeLink(link); err != nil {
		return err
	}
	return m.unstageUnusedBlock(ctx, drv, pv, rec)
}

func removeLink(link string) error {
	if err := os.Remove(link); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("tear down CSI block volume %s: %w", link, err)
	}
	return nil
}

// unstageUnusedBlock unstages a block volume no pod of the node links to, then removes
// its directories and record. Called with the volume's lock held.
func (m *Mounter) unstageUnusedBlock(ctx context.Context, drv Driver, pv string, rec volData) error {
	links, err := filepath.Glob(filepath.Join(m.podsDir, "*", blockPodDir, "kubernetes.io~csi", pv))
	if err != nil || len(links) > 0 {
		return err
	}
	staging := m.blockStagingPath(pv)
	if _, err := os.Stat(staging); err == nil {
		if _, err := call(ctx, drv, "NodeUnstageVolume", func(ctx context.Context, c csipb.NodeClient) (*csipb.NodeUnstageVolumeResponse, error) {
			return c.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: rec.VolumeHandle, StagingTargetPath: staging})
		}); err != nil {
			return fmt.Errorf("unstage CSI block volume %s of driver %s: %w", rec.VolumeHandle, rec.DriverName, err)
		}
		if mounted, err := isMountPoint(staging); err != nil || mounted {
			return fmt.Errorf("unstage CSI block volume %s of driver %s: %s is still mounted after the driver's unstage", rec.VolumeHandle, rec.DriverName, staging)
		}
		if err := os.Remove(staging); err != nil {
			return fmt.Errorf("unstage CSI block volume %s of driver %s: %w (left as it is)", rec.VolumeHandle, rec.DriverName, err)
		}
	}
	data := m.blockDataDir(pv)
	for _, p := range []string{filepath.Join(m.stagingDir, blockDir, blockPublish, pv), filepath.Join(data, volDataFile), filepath.Join(data, "."+volDataFile+".tmp"), data, filepath.Dir(data)} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove CSI block volume %s's directories: %w", pv, err)
		}
	}
	m.log.Info("released a CSI block volume no pod uses", "driver", rec.DriverName, "volumeHandle", rec.VolumeHandle, "pv", pv)
	return nil
}

// blockRecords are the block volumes' records on the node, by PV name.
func (m *Mounter) blockRecords() (map[string]volData, error) {
	files, err := filepath.Glob(filepath.Join(m.stagingDir, blockDir, "*", "data", volDataFile))
	if err != nil {
		return nil, err
	}
	out := map[string]volData{}
	for _, f := range files {
		pv := filepath.Base(filepath.Dir(filepath.Dir(f)))
		if pv == blockStaging || pv == blockPublish {
			continue
		}
		rec, err := readVolData(filepath.Dir(f))
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue // released meanwhile
			}
			return nil, err
		}
		out[pv] = rec
	}
	return out, nil
}

// unstageOrphanBlocks is UnstageOrphans for block volumes: those no pod links to.
func (m *Mounter) unstageOrphanBlocks(ctx context.Context) error {
	recs, err := m.blockRecords()
	if err != nil {
		return err
	}
	var errs []error
	for pv, rec := range recs {
		drv, err := m.drivers.Driver(rec.DriverName)
		if err != nil {
			continue
		}
		unlock := m.lock(rec.DriverName, rec.VolumeHandle)
		errs = append(errs, m.unstageUnusedBlock(ctx, drv, pv, rec))
		unlock()
	}
	return errors.Join(errs...)
}
