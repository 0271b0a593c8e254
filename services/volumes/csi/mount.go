package csi

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/moby/sys/mountinfo"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/utils/ptr"

	"github.com/unitlet/unitlet/services/volumes/ownership"
)

// PluginName is the kubelet's CSI volume plugin: a pod's CSI volume lives in
// <pods>/<uid>/volumes/kubernetes.io~csi/<pv name>/mount, its record in vol_data.json
// beside it; a staged volume in <root-dir>/plugins/kubernetes.io/csi/<driver>/<sha256 of
// its handle>/globalmount, with its own vol_data.json. The same layout as the kubelet's,
// so a node's drivers find what they expect.
const PluginName = "kubernetes.io/csi"

const (
	volDataFile = "vol_data.json"
	mountDir    = "mount"
	globalMount = "globalmount"
)

// volData is a publication's or a staging's record, with the kubelet's keys: what a
// teardown needs (the driver and the handle), read from disk, so that it works after a
// restart too.
type volData struct {
	SpecVolID           string `json:"specVolID,omitempty"`
	VolumeHandle        string `json:"volumeHandle"`
	DriverName          string `json:"driverName"`
	NodeName            string `json:"nodeName,omitempty"`
	AttachmentID        string `json:"attachmentID,omitempty"`
	VolumeLifecycleMode string `json:"volumeLifecycleMode,omitempty"`
	// AttachRequired ("true"), unitlet's own key: the volume is attached by the
	// attach/detach controller, and is in the Node's volumesInUse while this record is.
	AttachRequired string `json:"attachRequired,omitempty"`
	// RequiresRepublish ("true"), unitlet's own key: the driver's CSIDriver asks for the
	// volume to be published again at every resync (fresh service account tokens).
	RequiresRepublish string `json:"requiresRepublish,omitempty"`
}

// UniqueName is the kubelet's unique name of a CSI volume: what the Node's volumesInUse
// and volumesAttached list.
func UniqueName(driver, handle string) string { return PluginName + "/" + driver + "^" + handle }

// Objects reads what a CSI volume's set-up needs from the API server.
type Objects interface {
	// CSIDriver is the driver's CSIDriver object; nil, without error, when it has none.
	CSIDriver(ctx context.Context, name string) (*storagev1.CSIDriver, error)
	VolumeAttachment(ctx context.Context, name string) (*storagev1.VolumeAttachment, error)
	// VolumesInUse is the Node's status.volumesInUse, as the API server has it.
	VolumesInUse(ctx context.Context) ([]corev1.UniqueVolumeName, error)
	// Secret is a secret's data, as strings.
	Secret(ctx context.Context, namespace, name string) (map[string]string, error)
}

// Tokens hands out service account tokens bound to a pod (token.Manager).
type Tokens interface {
	TokenWithExpiry(ctx context.Context, pod *corev1.Pod, serviceAccount, audience string, expirationSeconds int64) ([]byte, time.Time, error)
}

// Mounter stages and publishes CSI persistent volumes for pods, and takes them down, as
// the kubelet's CSI plugin does.
type Mounter struct {
	drivers *Handler
	api     Objects
	tokens  Tokens
	// podsDir is <root-dir>/pods; stagingDir <root-dir>/plugins/kubernetes.io/csi.
	podsDir, stagingDir string
	node                string
	log                 *slog.Logger
	// selinux reports whether the host runs SELinux (hostSELinux).
	selinux func() bool

	mu sync.Mutex
	// volumes are the locks of the volumes being set up or torn down, by driver and
	// handle: a volume's stage, publishes, unpublishes and unstage never overlap, and
	// other volumes never wait for them.
	volumes map[string]*volumeLock
}

type volumeLock struct {
	sync.Mutex
	users int
}

// MounterOptions are what a Mounter is built from.
type MounterOptions struct {
	Drivers *Handler
	API     Objects
	// Tokens serve the CSIDriver tokenRequests; nil refuses such drivers.
	Tokens Tokens
	// RootDir is the node's <root-dir>.
	RootDir, NodeName string
	Log               *slog.Logger
}

// NewMounter mounts CSI volumes through the registered drivers.
func NewMounter(o MounterOptions) *Mounter {
	return &Mounter{
		drivers: o.Drivers, api: o.API, tokens: o.Tokens, node: o.NodeName, log: o.Log,
		podsDir:    filepath.Join(o.RootDir, "pods"),
		stagingDir: filepath.Join(o.RootDir, "plugins", PluginName),
		volumes:    map[string]*volumeLock{},
		selinux:    hostSELinux,
	}
}

// lock takes the lock of one volume; the returned func releases it.
func (m *Mounter) lock(driver, handle string) func() {
	key := driver + "\x00" + handle
	m.mu.Lock()
	l := m.volumes[key]
	if l == nil {
		l = &volumeLock{}
		m.volumes[key] = l
	}
	l.users++
	m.mu.Unlock()
	l.Lock()
	return func() {
		l.Unlock()
		m.mu.Lock()
		if l.users--; l.users == 0 {
			delete(m.volumes, key)
		}
		m.mu.Unlock()
	}
}

// Publication is one pod's use of a CSI persistent volume.
type Publication struct {
	Pod *corev1.Pod
	PV  *corev1.PersistentVolume
	// Dir is the pod's directory of the volume, <pods>/<uid>/volumes/kubernetes.io~csi/<pv>.
	Dir string
	// ReadOnly: the pod's claim is mounted read-only.
	ReadOnly bool
}

// StagingPath is where a driver with STAGE_UNSTAGE_VOLUME stages a volume, the kubelet's.
func (m *Mounter) StagingPath(driver, handle string) string {
	return filepath.Join(m.stagingDir, driver, fmt.Sprintf("%x", sha256.Sum256([]byte(handle))), globalMount)
}

// AttachmentName is the VolumeAttachment the attach/detach controller makes for a
// volume on a node: csi-<sha256 of handle, driver and node>.
func AttachmentName(handle, driver, node string) string {
	return fmt.Sprintf("csi-%x", sha256.Sum256([]byte(handle+driver+node)))
}

// SetUp makes a pod's CSI persistent volume ready and returns its mount path: attached
// (when the driver needs attaching), staged once for the node (when the driver stages),
// published for the pod, the pod's fsGroup applied by the CSIDriver's policy. A volume
// already published for the pod (its record there, its target mounted) is left as it
// is: no call to the driver.
func (m *Mounter) SetUp(ctx context.Context, p Publication) (string, error) {
	src := p.PV.Spec.CSI
	if src.VolumeHandle == "" {
		return "", fmt.Errorf("PersistentVolume %s: spec.csi.volumeHandle is empty", p.PV.Name)
	}
	return m.setUp(ctx, p.Pod, p.Dir, volumeSpec{
		name: p.PV.Name, what: "PersistentVolume " + p.PV.Name, driver: src.Driver, handle: src.VolumeHandle, mode: storagev1.VolumeLifecyclePersistent,
		fsType: src.FSType, readOnly: p.ReadOnly || src.ReadOnly, attributes: src.VolumeAttributes, publishSecret: src.NodePublishSecretRef,
		accessModes: p.PV.Spec.AccessModes, mountOptions: p.PV.Spec.MountOptions, source: src,
	})
}

// InlinePublication is a pod's csi volume (a CSI ephemeral volume).
type InlinePublication struct {
	Pod    *corev1.Pod
	Volume *corev1.Volume
	// Dir is the pod's directory of the volume, <pods>/<uid>/volumes/kubernetes.io~csi/<volume>.
	Dir string
}

// InlineHandle is the handle the kubelet gives a pod's inline CSI volume:
// csi-<sha256 of the pod's UID and the volume's name>.
func InlineHandle(podUID, volume string) string {
	return fmt.Sprintf("csi-%x", sha256.Sum256([]byte(podUID+volume)))
}

// SetUpInline publishes a pod's inline CSI volume, for a driver whose CSIDriver lists the
// Ephemeral lifecycle mode: never attached nor staged, the volume lives as long as the pod.
func (m *Mounter) SetUpInline(ctx context.Context, p InlinePublication) (string, error) {
	src := p.Volume.CSI
	var secret *corev1.SecretReference
	if src.NodePublishSecretRef != nil {
		secret = &corev1.SecretReference{Namespace: p.Pod.Namespace, Name: src.NodePublishSecretRef.Name}
	}
	return m.setUp(ctx, p.Pod, p.Dir, volumeSpec{
		name: p.Volume.Name, what: "volume " + p.Volume.Name, driver: src.Driver, handle: InlineHandle(string(p.Pod.UID), p.Volume.Name),
		mode: storagev1.VolumeLifecycleEphemeral, fsType: ptr.Deref(src.FSType, ""), readOnly: ptr.Deref(src.ReadOnly, false),
		attributes: src.VolumeAttributes, publishSecret: secret,
	})
}

// volumeSpec is what a publication needs, from a PV or an inline volume.
type volumeSpec struct {
	// name is the PV's or the pod volume's name; what names it in errors.
	name, what     string
	driver, handle string
	mode           storagev1.VolumeLifecycleMode
	fsType         string
	readOnly       bool
	attributes     map[string]string
	publishSecret  *corev1.SecretReference
	// accessModes and mountOptions are the PV's (none for an inline volume); source the
	// PV's csi source (nil inline).
	accessModes  []corev1.PersistentVolumeAccessMode
	mountOptions []string
	source       *corev1.CSIPersistentVolumeSource
	// block: the PV's volumeMode is Block; a device, not a mount, for the pod.
	block bool
}

func (m *Mounter) setUp(ctx context.Context, pod *corev1.Pod, dir string, spec volumeSpec) (string, error) {
	// A file system volume: published at dir/mount, its record in dir. A block volume:
	// published at its device file for the pod, its record the volume's, dir the pod's
	// link to the device.
	target, recordDir, result := filepath.Join(dir, mountDir), dir, filepath.Join(dir, mountDir)
	if spec.block {
		target, recordDir, result = m.blockPublishPath(spec.name, pod.UID), m.blockDataDir(spec.name), dir
	}
	if rec, err := readVolData(recordDir); err == nil && rec.DriverName == spec.driver && rec.VolumeHandle == spec.handle && rec.RequiresRepublish != "true" {
		linked := true
		if spec.block {
			to, err := os.Readlink(dir)
			linked = err == nil && to == target
		}
		if mounted, err := isMountPoint(target); err == nil && mounted && linked {
			return result, nil
		}
	}
	drv, err := m.drivers.Driver(spec.driver)
	if err != nil {
		return "", err
	}
	cd, err := m.api.CSIDriver(ctx, spec.driver)
	if err != nil {
		return "", fmt.Errorf("read CSIDriver %s: %w", spec.driver, err)
	}
	if err := m.refuseDriverFeatures(cd, pod); err != nil {
		return "", err
	}
	// As the kubelet: a driver without a CSIDriver, or one listing no modes, serves
	// persistent volumes only.
	modes := []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent}
	if cd != nil && len(cd.Spec.VolumeLifecycleModes) > 0 {
		modes = cd.Spec.VolumeLifecycleModes
	}
	if !slices.Contains(modes, spec.mode) {
		return "", fmt.Errorf("CSIDriver %s does not support the volume lifecycle mode %q (its volumeLifecycleModes are %v), which %s needs", spec.driver, spec.mode, modes, spec.what)
	}
	attach := spec.mode == storagev1.VolumeLifecyclePersistent && (cd == nil || cd.Spec.AttachRequired == nil || *cd.Spec.AttachRequired)
	has, err := nodeCapabilities(ctx, drv)
	if err != nil {
		return "", err
	}
	var fsGroup *int64
	if sc := pod.Spec.SecurityContext; sc != nil {
		fsGroup = sc.FSGroup
	}
	capability := volumeCapability(spec.accessModes, spec.mountOptions, spec.fsType, has(csipb.NodeServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER), spec.block)
	if has(csipb.NodeServiceCapability_RPC_VOLUME_MOUNT_GROUP) && fsGroup != nil && !spec.block {
		// The driver applies the group itself, at its mount.
		capability.GetMount().VolumeMountGroup = strconv.FormatInt(*fsGroup, 10)
	}

	unlock := m.lock(spec.driver, spec.handle)
	defer unlock()
	// The record first: from now on the volume is in the node's volumesInUse (when it is
	// attached), and a teardown finds it whatever happens next (a block volume's through
	// the pod's link, made after the record).
	if err := os.MkdirAll(recordDir, 0o750); err != nil {
		return "", err
	}
	rec := volData{
		SpecVolID: spec.name, VolumeHandle: spec.handle, DriverName: spec.driver, NodeName: m.node,
		AttachmentID: AttachmentName(spec.handle, spec.driver, m.node), VolumeLifecycleMode: string(spec.mode),
	}
	if attach {
		rec.AttachRequired = "true"
	}
	if cd != nil && cd.Spec.RequiresRepublish != nil && *cd.Spec.RequiresRepublish {
		rec.RequiresRepublish = "true"
	}
	if err := writeVolData(recordDir, rec); err != nil {
		return "", err
	}
	if spec.block {
		if err := LinkDevice(dir, target); err != nil {
			return "", err
		}
	}
	var publishContext map[string]string
	if attach {
		if publishContext, err = m.attached(ctx, spec.driver, spec.handle); err != nil {
			return "", err
		}
	}
	staging := ""
	if spec.source != nil && has(csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME) {
		if spec.block {
			staging = m.blockStagingPath(spec.name)
			err = m.stageBlock(ctx, drv, spec.source, spec.name, pod.UID, staging, publishContext, capability)
		} else {
			staging = m.StagingPath(spec.driver, spec.handle)
			err = m.stage(ctx, drv, spec.source, dir, staging, publishContext, capability)
		}
		if err != nil {
			return "", err
		}
	}
	if spec.block {
		// The driver makes the device file; its directory is the node's.
		if err := os.MkdirAll(filepath.Dir(target), 0o750); err != nil {
			return "", err
		}
	}
	secrets, err := m.secrets(ctx, spec.publishSecret, "nodePublishSecretRef")
	if err != nil {
		return "", err
	}
	volumeContext := spec.attributes
	if cd != nil && cd.Spec.PodInfoOnMount != nil && *cd.Spec.PodInfoOnMount {
		volumeContext = podInfo(volumeContext, pod, spec.mode == storagev1.VolumeLifecycleEphemeral)
	}
	if cd != nil && len(cd.Spec.TokenRequests) > 0 {
		tokens, err := m.podTokens(ctx, pod, cd)
		if err != nil {
			return "", err
		}
		// As the kubelet: in the volume context, or in the secrets when the CSIDriver says
		// serviceAccountTokenInSecrets.
		if cd.Spec.ServiceAccountTokenInSecrets != nil && *cd.Spec.ServiceAccountTokenInSecrets {
			secrets = mergeInto(secrets, tokens)
		} else {
			volumeContext = mergeInto(volumeContext, tokens)
		}
	}
	republish, _ := isMountPoint(target)
	_, err = call(ctx, drv, "NodePublishVolume", func(ctx context.Context, c csipb.NodeClient) (*csipb.NodePublishVolumeResponse, error) {
		return c.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{
			VolumeId: spec.handle, PublishContext: publishContext, StagingTargetPath: staging, TargetPath: target,
			VolumeCapability: capability, Readonly: spec.readOnly, Secrets: secrets, VolumeContext: volumeContext,
		})
	})
	if err != nil {
		if final(err) && !republish {
			// The driver says it did nothing: no record left for a teardown to find. (A
			// republish that fails leaves the volume published as it was.) A block
			// volume's record is the volume's: a teardown, or the orphan round once no
			// pod links to it, takes it with the stage.
			if spec.block {
				_ = os.Remove(dir)
			} else {
				_ = removeMountDir(dir)
			}
		}
		return "", err
	}
	if spec.block {
		return result, nil
	}
	if !has(csipb.NodeServiceCapability_RPC_VOLUME_MOUNT_GROUP) && fsGroup != nil && !spec.readOnly && appliesFSGroup(cd, spec) {
		sc := pod.Spec.SecurityContext
		onMismatch := sc.FSGroupChangePolicy != nil && *sc.FSGroupChangePolicy == corev1.FSGroupChangeOnRootMismatch
		if !onMismatch || !ownership.RootMatches(target, *fsGroup, false) {
			if err := ownership.Set(target, *fsGroup, false); err != nil {
				return "", fmt.Errorf("apply fsGroup %d to the CSI volume of %s: %w", *fsGroup, spec.what, err)
			}
		}
	}
	return target, nil
}

// stage stages a volume at staging unless a pod of the node has it published already (it
// is staged then: published only after a stage that succeeded). NodeStageVolume is
// idempotent by the CSI spec, so a stage the process did not live to record is done again.
func (m *Mounter) stage(ctx context.Context, drv Driver, src *corev1.CSIPersistentVolumeSource, self, staging string, publishContext map[string]string, capability *csipb.VolumeCapability) error {
	users, err := m.publications(src.Driver, src.VolumeHandle)
	if err != nil {
		return err
	}
	users = slices.DeleteFunc(users, func(dir string) bool { return dir == self })
	if _, err := readVolData(filepath.Dir(staging)); err == nil && len(users) > 0 {
		return nil
	}
	if err := os.MkdirAll(staging, 0o750); err != nil {
		return err
	}
	if err := writeVolData(filepath.Dir(staging), volData{VolumeHandle: src.VolumeHandle, DriverName: src.Driver}); err != nil {
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
	if err != nil && final(err) {
		_ = removeMountDir(filepath.Dir(staging))
	}
	return err
}

// TearDown unpublishes the CSI volume of a pod's directory dir (its record there names the
// driver and the handle) and, when no other pod of the node has it published, unstages
// it. The directory goes; the volume's data is the driver's.
func (m *Mounter) TearDown(ctx context.Context, dir string) error {
	target := filepath.Join(dir, mountDir)
	rec, err := readVolData(dir)
	if errors.Is(err, os.ErrNotExist) {
		// A set-up that ended before its record was written: nothing was published.
		if mounted, merr := isMountPoint(target); merr != nil || mounted {
			return fmt.Errorf("tear down CSI volume %s: it is mounted but has no %s naming its driver", dir, volDataFile)
		}
		return removeMountDir(dir)
	}
	if err != nil {
		return fmt.Errorf("tear down CSI volume %s: %w", dir, err)
	}
	drv, err := m.drivers.Driver(rec.DriverName)
	if err != nil {
		return fmt.Errorf("tear down CSI volume %s: %w", dir, err)
	}
	unlock := m.lock(rec.DriverName, rec.VolumeHandle)
	defer unlock()
	if _, err := os.Lstat(target); errors.Is(err, os.ErrNotExist) {
		// Never published (its set-up waited for the attach, or its stage failed): there
		// is nothing for the driver to unpublish.
		if err := removeMountDir(dir); err != nil {
			return fmt.Errorf("tear down CSI volume %s: %w", dir, err)
		}
		return m.unstageUnused(ctx, drv, rec.DriverName, rec.VolumeHandle)
	}
	if _, err := call(ctx, drv, "NodeUnpublishVolume", func(ctx context.Context, c csipb.NodeClient) (*csipb.NodeUnpublishVolumeResponse, error) {
		return c.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: rec.VolumeHandle, TargetPath: target})
	}); err != nil {
		return fmt.Errorf("tear down CSI volume %s: %w", dir, err)
	}
	if err := removeMountDir(dir); err != nil {
		return fmt.Errorf("tear down CSI volume %s: %w", dir, err)
	}
	return m.unstageUnused(ctx, drv, rec.DriverName, rec.VolumeHandle)
}

// unstageUnused unstages a staged volume no pod of the node has published. Called with
// the volume's lock held.
func (m *Mounter) unstageUnused(ctx context.Context, drv Driver, driver, handle string) error {
	staging := m.StagingPath(driver, handle)
	if _, err := readVolData(filepath.Dir(staging)); errors.Is(err, os.ErrNotExist) {
		return nil // never staged
	}
	users, err := m.publications(driver, handle)
	if err != nil || len(users) > 0 {
		return err
	}
	if _, err := call(ctx, drv, "NodeUnstageVolume", func(ctx context.Context, c csipb.NodeClient) (*csipb.NodeUnstageVolumeResponse, error) {
		return c.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: handle, StagingTargetPath: staging})
	}); err != nil {
		return fmt.Errorf("unstage CSI volume %s of driver %s: %w", handle, driver, err)
	}
	if err := removeMountDir(filepath.Dir(staging)); err != nil {
		return fmt.Errorf("unstage CSI volume %s of driver %s: %w", handle, driver, err)
	}
	m.log.Info("unstaged a CSI volume no pod uses", "driver", driver, "volumeHandle", handle)
	return nil
}

// UnstageOrphans unstages the staged volumes that no pod of the node has published (block
// volumes: that no pod links to): what a restart between a pod's unpublish and its
// volume's unstage left. A driver not registered
// is left for a later round.
func (m *Mounter) UnstageOrphans(ctx context.Context) error {
	dirs, err := filepath.Glob(filepath.Join(m.stagingDir, "*", "*", volDataFile))
	if err != nil {
		return err
	}
	var errs []error
	for _, f := range dirs {
		rec, err := readVolData(filepath.Dir(f))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		drv, err := m.drivers.Driver(rec.DriverName)
		if err != nil {
			continue
		}
		unlock := m.lock(rec.DriverName, rec.VolumeHandle)
		err = m.unstageUnused(ctx, drv, rec.DriverName, rec.VolumeHandle)
		unlock()
		errs = append(errs, err)
	}
	errs = append(errs, m.unstageOrphanBlocks(ctx))
	return errors.Join(errs...)
}

// publications are the pods' directories where the volume is published (or being
// published): its record there, and its target made.
func (m *Mounter) publications(driver, handle string) ([]string, error) {
	recs, err := m.records()
	if err != nil {
		return nil, err
	}
	var out []string
	for dir, rec := range recs {
		if rec.DriverName != driver || rec.VolumeHandle != handle {
			continue
		}
		if _, err := os.Lstat(filepath.Join(dir, mountDir)); err == nil {
			out = append(out, dir)
		}
	}
	return out, nil
}

// records are the pods' CSI volume records, by directory.
func (m *Mounter) records() (map[string]volData, error) {
	files, err := filepath.Glob(filepath.Join(m.podsDir, "*", "volumes", "kubernetes.io~csi", "*", volDataFile))
	if err != nil {
		return nil, err
	}
	out := map[string]volData{}
	for _, f := range files {
		rec, err := readVolData(filepath.Dir(f))
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue // torn down meanwhile
			}
			return nil, err
		}
		out[filepath.Dir(f)] = rec
	}
	return out, nil
}

// InUse are the unique names of the attached volumes the node's pods have, mounted or
// being mounted, sorted: the Node's status.volumesInUse. Read from the records on disk,
// so a restart loses none.
func (m *Mounter) InUse() ([]string, error) {
	recs, err := m.records()
	if err != nil {
		return nil, err
	}
	blocks, err := m.blockRecords()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, rec := range append(slices.Collect(maps.Values(recs)), slices.Collect(maps.Values(blocks))...) {
		if rec.AttachRequired == "true" {
			out = append(out, UniqueName(rec.DriverName, rec.VolumeHandle))
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// attached is the publish context the driver's attacher recorded in the volume's
// VolumeAttachment for this node, once the volume is attached. As the kubelet, the volume
// must first be in the Node's volumesInUse (unitlet-status reports what InUse lists), so
// that the attach/detach controller never detaches it under a mount; until then, and until
// the attachment says attached, the set-up fails with what it waits for and is tried again.
func (m *Mounter) attached(ctx context.Context, driver, handle string) (map[string]string, error) {
	unique := UniqueName(driver, handle)
	inUse, err := m.api.VolumesInUse(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the Node's volumesInUse: %w", err)
	}
	if !slices.Contains(inUse, corev1.UniqueVolumeName(unique)) {
		return nil, fmt.Errorf("volume %s is not yet in the Node's status.volumesInUse (unitlet-status reports it at its next status update); waiting before it is attached", unique)
	}
	name := AttachmentName(handle, driver, m.node)
	va, err := m.api.VolumeAttachment(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("volume %s is not attached yet: VolumeAttachment %s: %w", unique, name, err)
	}
	if !va.Status.Attached {
		msg := ""
		if e := va.Status.AttachError; e != nil {
			msg = ": the attacher says: " + e.Message
		}
		return nil, fmt.Errorf("volume %s is not attached yet: VolumeAttachment %s is not attached%s", unique, name, msg)
	}
	return va.Status.AttachmentMetadata, nil
}

// secrets reads a secret the PV names for a call, nil when it names none.
func (m *Mounter) secrets(ctx context.Context, ref *corev1.SecretReference, field string) (map[string]string, error) {
	if ref == nil {
		return nil, nil
	}
	data, err := m.api.Secret(ctx, ref.Namespace, ref.Name)
	if err != nil {
		return nil, fmt.Errorf("fetching %s %s/%s failed: %w", field, ref.Namespace, ref.Name, err)
	}
	return data, nil
}

// refuseDriverFeatures refuses what a CSIDriver asks that this Mounter cannot give, rather
// than mount without it.
func (m *Mounter) refuseDriverFeatures(cd *storagev1.CSIDriver, pod *corev1.Pod) error {
	if cd != nil && len(cd.Spec.TokenRequests) > 0 && m.tokens == nil {
		return fmt.Errorf("CSIDriver %s sets tokenRequests, and this unitlet-volumes has no service account tokens to give", cd.Name)
	}
	// The kubelet mounts such a volume with the pod's SELinux context (a context= mount
	// option) on a node that enforces SELinux; unitlet does not compute contexts, so it
	// refuses rather than mount without one. A node without SELinux mounts as the kubelet
	// does there: no context.
	if cd != nil && ptr.Deref(cd.Spec.SELinuxMount, false) && podSELinux(pod) && m.selinux() {
		return fmt.Errorf("CSIDriver %s sets seLinuxMount and pod %s/%s sets seLinuxOptions: unitlet does not mount volumes with an SELinux context on this SELinux node; unset seLinuxMount or the pod's seLinuxOptions", cd.Name, pod.Namespace, pod.Name)
	}
	return nil
}

// podSELinux reports whether the pod or one of its containers sets seLinuxOptions.
func podSELinux(pod *corev1.Pod) bool {
	if sc := pod.Spec.SecurityContext; sc != nil && sc.SELinuxOptions != nil {
		return true
	}
	for _, c := range append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
		if c.SecurityContext != nil && c.SecurityContext.SELinuxOptions != nil {
			return true
		}
	}
	return false
}

// hostSELinux reports whether the host runs SELinux (its file system is mounted).
func hostSELinux() bool {
	_, err := os.Stat("/sys/fs/selinux/enforce")
	return err == nil
}

// tokensKey is the volume context (or secrets) key of the service account tokens.
const tokensKey = "csi.storage.k8s.io/serviceAccount.tokens"

// podTokens are the tokens the CSIDriver's tokenRequests ask for, of the pod's service
// account, bound to the pod: a JSON object by audience of {token, expirationTimestamp},
// the kubelet's format.
func (m *Mounter) podTokens(ctx context.Context, pod *corev1.Pod, cd *storagev1.CSIDriver) (map[string]string, error) {
	type status struct {
		Token               string `json:"token"`
		ExpirationTimestamp string `json:"expirationTimestamp"`
	}
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	out := map[string]status{}
	for _, tr := range cd.Spec.TokenRequests {
		token, expires, err := m.tokens.TokenWithExpiry(ctx, pod, sa, tr.Audience, ptr.Deref(tr.ExpirationSeconds, 0))
		if err != nil {
			return nil, fmt.Errorf("CSIDriver %s tokenRequests: %w", cd.Name, err)
		}
		out[tr.Audience] = status{Token: string(token), ExpirationTimestamp: expires.UTC().Format(time.RFC3339)}
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, err
	}
	return map[string]string{tokensKey: string(b)}, nil
}

// mergeInto is a with b's entries added (a copy; neither is changed).
func mergeInto(a, b map[string]string) map[string]string {
	out := make(map[string]string, len(a)+len(b))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

// NeedsRepublish reports whether the volume published at target is to be published again
// at each resync (its driver's CSIDriver sets requiresRepublish), by its record.
func (m *Mounter) NeedsRepublish(target string) bool {
	dir := filepath.Dir(target)
	if filepath.Base(filepath.Dir(dir)) == blockPodDir {
		dir = m.blockDataDir(filepath.Base(target)) // a pod's link to a block volume
	}
	rec, err := readVolData(dir)
	return err == nil && rec.RequiresRepublish == "true"
}

// volumeCapability is the capability a PV is staged and published with: a mount with its
// file system type and mount options (or a block device, for volumeMode Block), the access mode of its first access mode, as the
// kubelet maps them (ReadWriteOnce to SINGLE_NODE_MULTI_WRITER, ReadWriteOncePod to
// SINGLE_NODE_SINGLE_WRITER, for drivers that know them).
func volumeCapability(accessModes []corev1.PersistentVolumeAccessMode, mountOptions []string, fsType string, multiWriter, block bool) *csipb.VolumeCapability {
	mode := csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER
	am := corev1.ReadWriteOnce
	if len(accessModes) > 0 {
		am = accessModes[0]
	}
	switch am {
	case corev1.ReadOnlyMany:
		mode = csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY
	case corev1.ReadWriteMany:
		mode = csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER
	case corev1.ReadWriteOnce:
		if multiWriter {
			mode = csipb.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER
		}
	case corev1.ReadWriteOncePod:
		if multiWriter {
			mode = csipb.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER
		}
	}
	if block {
		return &csipb.VolumeCapability{
			AccessMode: &csipb.VolumeCapability_AccessMode{Mode: mode},
			AccessType: &csipb.VolumeCapability_Block{Block: &csipb.VolumeCapability_BlockVolume{}},
		}
	}
	return &csipb.VolumeCapability{
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: mode},
		AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{FsType: fsType, MountFlags: mountOptions}},
	}
}

// appliesFSGroup is the CSIDriver's fsGroupPolicy, as the kubelet reads it: File always,
// None never, ReadWriteOnceWithFSType (the default) for a volume with a file system type
// and the ReadWriteOnce access mode (an inline volume is mounted ReadWriteOnce).
func appliesFSGroup(cd *storagev1.CSIDriver, spec volumeSpec) bool {
	policy := storagev1.ReadWriteOnceWithFSTypeFSGroupPolicy
	if cd != nil && cd.Spec.FSGroupPolicy != nil {
		policy = *cd.Spec.FSGroupPolicy
	}
	switch policy {
	case storagev1.FileFSGroupPolicy:
		return true
	case storagev1.NoneFSGroupPolicy:
		return false
	}
	return spec.fsType != "" && (spec.source == nil || slices.Contains(spec.accessModes, corev1.ReadWriteOnce))
}

// podInfo is the volume context with the pod's identity added, for a driver whose
// CSIDriver sets podInfoOnMount.
func podInfo(attrs map[string]string, pod *corev1.Pod, ephemeral bool) map[string]string {
	out := map[string]string{
		"csi.storage.k8s.io/pod.name":            pod.Name,
		"csi.storage.k8s.io/pod.namespace":       pod.Namespace,
		"csi.storage.k8s.io/pod.uid":             string(pod.UID),
		"csi.storage.k8s.io/serviceAccount.name": pod.Spec.ServiceAccountName,
		"csi.storage.k8s.io/ephemeral":           strconv.FormatBool(ephemeral),
	}
	for k, v := range attrs {
		out[k] = v
	}
	return out
}

// call makes one call to a driver's Node service, bounded by callTimeout.
func call[T any](ctx context.Context, drv Driver, method string, f func(context.Context, csipb.NodeClient) (T, error)) (T, error) {
	var zero T
	conn, err := dial(drv.Endpoint)
	if err != nil {
		return zero, fmt.Errorf("CSI driver %s: %w", drv.Name, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	res, err := f(ctx, csipb.NewNodeClient(conn))
	if err != nil {
		return zero, fmt.Errorf("CSI driver %s: %s: %w", drv.Name, method, err)
	}
	return res, nil
}

// final reports whether a driver's error says the call did nothing (the kubelet's list):
// else the volume may be half set up, and its records stay for the teardown.
func final(err error) bool {
	st, ok := grpcstatus.FromError(err)
	if !ok {
		return false
	}
	switch st.Code() {
	case codes.Canceled, codes.DeadlineExceeded, codes.Unavailable, codes.ResourceExhausted, codes.Aborted:
		return false
	}
	return true
}

func readVolData(dir string) (volData, error) {
	var rec volData
	b, err := os.ReadFile(filepath.Join(dir, volDataFile))
	if err != nil {
		return rec, err
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		return rec, fmt.Errorf("%s: %w", filepath.Join(dir, volDataFile), err)
	}
	if rec.DriverName == "" || rec.VolumeHandle == "" {
		return rec, fmt.Errorf("%s names no driverName or volumeHandle", filepath.Join(dir, volDataFile))
	}
	return rec, nil
}

func writeVolData(dir string, rec volData) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, "."+volDataFile+".tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, volDataFile))
}

// removeMountDir removes a publication's or a staging's directory: its mount point, which
// must not be mounted any more (a driver that left it mounted is an error, nothing is
// removed under it), its record, then the directory.
func removeMountDir(dir string) error {
	for _, sub := range []string{mountDir, globalMount} {
		p := filepath.Join(dir, sub)
		mounted, err := isMountPoint(p)
		if err != nil {
			return err
		}
		if mounted {
			return fmt.Errorf("%s is still mounted after the driver's unpublish or unstage", p)
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%w (left as it is)", err)
		}
	}
	for _, f := range []string{volDataFile, "." + volDataFile + ".tmp"} {
		if err := os.Remove(filepath.Join(dir, f)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// isMountPoint reports whether path is a mount point; false when it does not exist.
func isMountPoint(path string) (bool, error) {
	if _, err := os.Lstat(path); errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	return mountinfo.Mounted(path)
}

// nodeCapabilities asks a driver for its Node service's capabilities (the kubelet asks
// before each operation too) and returns the test for one of them.
func nodeCapabilities(ctx context.Context, drv Driver) (func(csipb.NodeServiceCapability_RPC_Type) bool, error) {
	caps, err := call(ctx, drv, "NodeGetCapabilities", func(ctx context.Context, c csipb.NodeClient) (*csipb.NodeGetCapabilitiesResponse, error) {
		return c.NodeGetCapabilities(ctx, &csipb.NodeGetCapabilitiesRequest{})
	})
	if err != nil {
		return nil, err
	}
	return func(t csipb.NodeServiceCapability_RPC_Type) bool {
		return slices.ContainsFunc(caps.GetCapabilities(), func(c *csipb.NodeServiceCapability) bool { return c.GetRpc().GetType() == t })
	}, nil
}
