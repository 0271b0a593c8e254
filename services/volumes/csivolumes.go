package volumes

import (
	"context"
	"errors"
	"slices"

	"golang.org/x/sync/singleflight"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/unitlet/unitlet/services/volumes/csi"
	"github.com/unitlet/unitlet/shared/kubeapi"
)

// CSIVolumes stages and publishes CSI persistent volumes for pods (csi.Mounter).
type CSIVolumes interface {
	SetUp(ctx context.Context, p csi.Publication) (string, error)
	SetUpInline(ctx context.Context, p csi.InlinePublication) (string, error)
	SetUpBlock(ctx context.Context, p csi.Publication) (string, error)
	TearDown(ctx context.Context, dir string) error
	TearDownBlock(ctx context.Context, link string) error
	UnstageOrphans(ctx context.Context) error
	InUse() ([]string, error)
	Stats(ctx context.Context, target string) (csi.VolumeStats, error)
	Expand(ctx context.Context, target string, pv *corev1.PersistentVolume, newSize int64) (int64, error)
	NeedsRepublish(target string) bool
}

// setUpInlineCSI publishes a pod's inline csi volume through its driver.
func (m *Manager) setUpInlineCSI(ctx context.Context, pod *corev1.Pod, v *corev1.Volume) (*volume, error) {
	if m.csi == nil {
		return nil, errors.New("csi volumes need the API server (the driver's CSIDriver object): this node runs standalone")
	}
	path, err := m.csi.SetUpInline(ctx, csi.InlinePublication{Pod: pod, Volume: v, Dir: m.volumeDir(pod.UID, csi.PluginName, v.Name)})
	if err != nil {
		return nil, operationFailed(err)
	}
	return &volume{name: v.Name, plugin: csi.PluginName, path: path, readOnly: ptr.Deref(v.CSI.ReadOnly, false)}, nil
}

// apiCSIObjects reads CSIDrivers, VolumeAttachments, the secrets a CSI PV names and the
// node's volumesInUse from the API server (the Node authorizer allows a node those of its
// pods' volumes).
type apiCSIObjects struct {
	client kubeapi.Interface
	node   string
	// reads shares overlapping reads of one object: the volumes of pods started together
	// name the same CSIDriver and the same Node, and would otherwise spend the client's
	// rate limit on the same GET (as objects does for configMaps and secrets).
	reads *singleflight.Group
}

func (a apiCSIObjects) VolumesInUse(ctx context.Context) ([]corev1.UniqueVolumeName, error) {
	v, err, _ := a.reads.Do("node/"+a.node, func() (any, error) {
		ctx, cancel := sharedReadContext(ctx)
		defer cancel()
		return a.client.CoreV1().Nodes().Get(ctx, a.node, metav1.GetOptions{})
	})
	if err != nil {
		return nil, err
	}
	return slices.Clone(v.(*corev1.Node).Status.VolumesInUse), nil
}

func (a apiCSIObjects) CSIDriver(ctx context.Context, name string) (*storagev1.CSIDriver, error) {
	v, err, _ := a.reads.Do("csidriver/"+name, func() (any, error) {
		ctx, cancel := sharedReadContext(ctx)
		defer cancel()
		return a.client.StorageV1().CSIDrivers().Get(ctx, name, metav1.GetOptions{})
	})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return v.(*storagev1.CSIDriver).DeepCopy(), nil
}

func (a apiCSIObjects) VolumeAttachment(ctx context.Context, name string) (*storagev1.VolumeAttachment, error) {
	return a.client.StorageV1().VolumeAttachments().Get(ctx, name, metav1.GetOptions{})
}

func (a apiCSIObjects) Secret(ctx context.Context, namespace, name string) (map[string]string, error) {
	s, err := a.client.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(s.Data)+len(s.StringData))
	for k, v := range s.Data {
		out[k] = string(v)
	}
	return out, nil
}

// VolumesInUse are the attached volumes the node's pods use (CSIVolumes.InUse); false when
// they cannot be told (no CSI, or its records cannot be read).
func (m *Manager) VolumesInUse() ([]string, bool) {
	if m.csi == nil {
		return nil, true
	}
	names, err := m.csi.InUse()
	if err != nil {
		m.log.Warn("list the CSI volumes in use", "err", err)
		return nil, false
	}
	return names, true
}
