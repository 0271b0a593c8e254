package volumes

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	schedulinghelpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/storage/ephemeral"

	"github.com/unitlet/unitlet/services/volumes/csi"
	"github.com/unitlet/unitlet/services/volumes/hostpath"
	"github.com/unitlet/unitlet/services/volumes/ownership"
	"github.com/unitlet/unitlet/shared/kubeapi"
)

// The plugin a local persistent volume is mounted by; its pod directory is
// <pods>/<uid>/volumes/kubernetes.io~local-volume/<pv name>, the kubelet's layout.
const pluginLocal = "kubernetes.io/local-volume"

// The finalizer that keeps a claim in use from going, and the PV annotation whose group the
// kubelet adds to every container's supplemental groups.
const (
	pvcProtectionFinalizer = "kubernetes.io/pvc-protection"
	pvGIDAnnotation        = "pv.beta.kubernetes.io/gid"
)

// Claims reads a pod's persistent volume claims, their volumes and this node from the API
// server (the Node authorizer allows a node the claims and volumes of pods bound to it).
type Claims interface {
	Claim(ctx context.Context, namespace, name string) (*corev1.PersistentVolumeClaim, error)
	Volume(ctx context.Context, name string) (*corev1.PersistentVolume, error)
	// NodeLabels are this node's labels as the API has them.
	NodeLabels(ctx context.Context) (map[string]string, error)
	// PatchClaimStatus patches a claim's status (a strategic merge patch): the Node
	// authorizer and NodeRestriction allow a node its pods' claims' capacity, conditions and
	// resize status.
	PatchClaimStatus(ctx context.Context, namespace, name string, patch []byte) (*corev1.PersistentVolumeClaim, error)
}

// apiClaims is Claims from the API server.
type apiClaims struct {
	client kubeapi.Interface
	node   string
}

func (a apiClaims) Claim(ctx context.Context, ns, name string) (*corev1.PersistentVolumeClaim, error) {
	return a.client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
}

func (a apiClaims) PatchClaimStatus(ctx context.Context, ns, name string, patch []byte) (*corev1.PersistentVolumeClaim, error) {
	return a.client.CoreV1().PersistentVolumeClaims(ns).Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
}

func (a apiClaims) Volume(ctx context.Context, name string) (*corev1.PersistentVolume, error) {
	return a.client.CoreV1().PersistentVolumes().Get(ctx, name, metav1.GetOptions{})
}

func (a apiClaims) NodeLabels(ctx context.Context) (map[string]string, error) {
	n, err := a.client.CoreV1().Nodes().Get(ctx, a.node, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return n.Labels, nil
}

// boundVolume resolves a pod's claim to its bound persistent volume, with the kubelet's
// checks and messages: a claim that is not bound yet, or being deleted without the
// protection finalizer, or a volume bound to another claim, is an error (the pod waits and
// a FailedMount event names it).
func (m *Manager) boundVolume(ctx context.Context, pod *corev1.Pod, src *corev1.PersistentVolumeClaimVolumeSource) (*corev1.PersistentVolumeClaim, *corev1.PersistentVolume, error) {
	if m.claims == nil {
		return nil, nil, errors.New("persistentVolumeClaim volumes need the API server: this node runs standalone (set its kubeconfig)")
	}
	wrap := func(err error) error {
		return fmt.Errorf("error processing PVC %s/%s: %w", pod.Namespace, src.ClaimName, err)
	}
	pvc, err := m.claims.Claim(ctx, pod.Namespace, src.ClaimName)
	if err != nil {
		return nil, nil, wrap(fmt.Errorf("failed to fetch PVC from API server: %w", err))
	}
	if pvc.DeletionTimestamp != nil && !slices.Contains(pvc.Finalizers, pvcProtectionFinalizer) {
		return nil, nil, wrap(errors.New("PVC is being deleted"))
	}
	switch pvc.Status.Phase {
	case corev1.ClaimBound:
	case corev1.ClaimLost:
		return nil, nil, wrap(fmt.Errorf("PVC is not bound: it is Lost, its PersistentVolume %s is gone; recreate the claim", pvc.Spec.VolumeName))
	default:
		return nil, nil, wrap(errors.New("PVC is not bound"))
	}
	if pvc.Spec.VolumeName == "" {
		return nil, nil, wrap(errors.New("PVC has empty pvc.Spec.VolumeName"))
	}
	pv, err := m.claims.Volume(ctx, pvc.Spec.VolumeName)
	if err != nil {
		return nil, nil, wrap(fmt.Errorf("failed to fetch PV %s from API server: %w", pvc.Spec.VolumeName, err))
	}
	if pv.Spec.ClaimRef == nil {
		return nil, nil, wrap(fmt.Errorf("found PV object %s but it has a nil pv.Spec.ClaimRef indicating it is not yet bound to the claim", pv.Name))
	}
	if ref := pv.Spec.ClaimRef; ref.Namespace != pvc.Namespace || ref.Name != pvc.Name {
		return nil, nil, wrap(fmt.Errorf("found PV object %s but it is bound to claim %s/%s, not to this one", pv.Name, ref.Namespace, ref.Name))
	}
	if pv.Spec.ClaimRef.UID != pvc.UID {
		return nil, nil, wrap(fmt.Errorf("found PV object %s but its pv.Spec.ClaimRef.UID %s does not point to claim.UID %s", pv.Name, pv.Spec.ClaimRef.UID, pvc.UID))
	}
	return pvc, pv, nil
}

// setUpClaim makes a pod's persistentVolumeClaim or generic ephemeral volume ready: the
// bound volume's source, if it is one unitlet-volumes mounts (hostPath, a local
// directory), else an error naming the source.
func (m *Manager) setUpClaim(ctx context.Context, pod *corev1.Pod, v *corev1.Volume) (*volume, error) {
	src := v.PersistentVolumeClaim
	if v.Ephemeral != nil {
		// A generic ephemeral volume: the claim the ephemeral-volume controller made for
		// the pod, which must be the pod's own.
		src = &corev1.PersistentVolumeClaimVolumeSource{ClaimName: ephemeral.VolumeClaimName(pod, v)}
	}
	pvc, pv, err := m.boundVolume(ctx, pod, src)
	if err != nil {
		return nil, err
	}
	if v.Ephemeral != nil {
		if err := ephemeral.VolumeIsForPod(pod, pvc); err != nil {
			return nil, err
		}
	}
	block := pv.Spec.VolumeMode != nil && *pv.Spec.VolumeMode == corev1.PersistentVolumeBlock
	if err := checkVolumeMode(pod, v.Name, block); err != nil {
		return nil, err
	}
	if err := m.claimOnce(pod, pvc); err != nil {
		return nil, err
	}
	if _, ok := pv.Annotations[pvGIDAnnotation]; ok {
		return nil, fmt.Errorf("PersistentVolume %s has the annotation %s: unitlet does not add a volume's group to the containers' supplemental groups yet; set it in the pod's securityContext.supplementalGroups and remove the annotation", pv.Name, pvGIDAnnotation)
	}
	if pv.Spec.NodeAffinity != nil {
		// As the kubelet checks before any PV's mount: the scheduler may have placed the
		// pod by a PV since changed, or the pod named its node itself.
		labels, err := m.claims.NodeLabels(ctx)
		if err != nil {
			return nil, fmt.Errorf("read this node's labels for PersistentVolume %s's node affinity: %w", pv.Name, err)
		}
		if err := nodeAffinityMatches(pv, labels); err != nil {
			return nil, fmt.Errorf("MountVolume.NodeAffinity check failed for PersistentVolume %s: %w", pv.Name, err)
		}
	}
	readOnly := src.ReadOnly
	if block {
		return m.setUpBlockClaim(ctx, pod, v, pvc, pv, readOnly)
	}
	switch {
	case pv.Spec.HostPath != nil:
		if err := hostpath.Check(pv.Spec.HostPath.Path, pv.Spec.HostPath.Type); err != nil {
			return nil, err
		}
		return &volume{name: v.Name, plugin: pluginHostPath, path: pv.Spec.HostPath.Path, readOnly: readOnly, claim: pvc.Name}, nil
	case pv.Spec.Local != nil:
		dir, err := m.mountLocal(ctx, pod, pv, readOnly)
		if err != nil {
			return nil, operationFailed(err)
		}
		return &volume{name: v.Name, plugin: pluginLocal, path: dir, readOnly: readOnly, claim: pvc.Name, source: pv.Spec.Local.Path}, nil
	case pv.Spec.CSI != nil && m.csi != nil:
		path, err := m.csi.SetUp(ctx, csi.Publication{Pod: pod, PV: pv, Dir: m.volumeDir(pod.UID, csi.PluginName, pv.Name), ReadOnly: readOnly})
		if err != nil {
			return nil, operationFailed(err)
		}
		return &volume{name: v.Name, plugin: csi.PluginName, path: path, readOnly: readOnly, claim: pvc.Name}, nil
	}
	return nil, fmt.Errorf("PersistentVolume %s has a %s source: unitlet-volumes mounts hostPath, local and csi persistent volumes", pv.Name, sourceKind(pv.Spec.PersistentVolumeSource))
}

// claimSetUp is the volume record of a claim volume this process already set up for the
// pod (nil for other volumes, or none yet, or a CSI volume whose driver requires
// republishing): its local mount is checked to be there still.
func (m *Manager) claimSetUp(pv *podVolumes, v *corev1.Volume) *volume {
	if v.PersistentVolumeClaim == nil && v.Ephemeral == nil {
		return nil
	}
	m.mu.Lock()
	old := pv.volumes[v.Name]
	m.mu.Unlock()
	if old == nil || old.claim == "" {
		return nil
	}
	switch {
	case old.block:
		if _, err := os.Stat(old.path); err != nil {
			return nil // the link, or the device it leads to, is gone
		}
	case old.plugin == pluginLocal || old.plugin == csi.PluginName:
		if mounted, err := isMountPoint(old.path); err != nil || !mounted {
			return nil
		}
	}
	if old.plugin == csi.PluginName && m.csi != nil && m.csi.NeedsRepublish(old.path) {
		return nil // its driver asks for it to be published again at each resync
	}
	return old
}

// checkVolumeMode checks that the pod's containers use a volume as its PV's volumeMode
// says, with the kubelet's messages: a Block volume in volumeDevices only, a Filesystem one
// in volumeMounts only.
func checkVolumeMode(pod *corev1.Pod, name string, block bool) error {
	for _, c := range containers(pod) {
		for _, d := range c.VolumeDevices {
			if d.Name == name && !block {
				return fmt.Errorf("volume %s has volumeMode Filesystem, but is specified in volumeDevices", name)
			}
		}
		for _, vm := range c.VolumeMounts {
			if vm.Name == name && block {
				return fmt.Errorf("volume %s has volumeMode Block, but is specified in volumeMounts", name)
			}
		}
	}
	return nil
}

// setUpBlockClaim makes a claim's volume of volumeMode Block ready: a local PV's block
// device, or a CSI PV published as a device for the pod. Either way the pod's
// <pods>/<uid>/volumeDevices/<plugin>/<pv> links to the device, the kubelet's layout, and
// the runtime gets that link.
func (m *Manager) setUpBlockClaim(ctx context.Context, pod *corev1.Pod, v *corev1.Volume, pvc *corev1.PersistentVolumeClaim, pv *corev1.PersistentVolume, readOnly bool) (*volume, error) {
	switch {
	case pv.Spec.Local != nil:
		link, err := m.mapLocalBlock(pod, pv)
		if err != nil {
			return nil, operationFailed(err)
		}
		return &volume{name: v.Name, plugin: pluginLocal, path: link, readOnly: readOnly, claim: pvc.Name, source: pv.Spec.Local.Path, block: true}, nil
	case pv.Spec.CSI != nil && m.csi != nil:
		link, err := m.csi.SetUpBlock(ctx, csi.Publication{Pod: pod, PV: pv, Dir: m.deviceLink(pod.UID, csi.PluginName, pv.Name), ReadOnly: readOnly})
		if err != nil {
			return nil, operationFailed(err)
		}
		return &volume{name: v.Name, plugin: csi.PluginName, path: link, readOnly: readOnly, claim: pvc.Name, block: true}, nil
	}
	return nil, fmt.Errorf("PersistentVolume %s has volumeMode Block and a %s source: unitlet-volumes maps local and csi block volumes", pv.Name, sourceKind(pv.Spec.PersistentVolumeSource))
}

// deviceLink is a pod's link to its block volume name of plugin:
// <pods>/<uid>/volumeDevices/<plugin>/<name>, the kubelet's layout.
func (m *Manager) deviceLink(uid types.UID, plugin, name string) string {
	return filepath.Join(m.podsDir, string(uid), "volumeDevices", escapePlugin(plugin), name)
}

// mapLocalBlock links the pod to a local PV's block device. The kubelet also holds the
// device open through a loop device while pods use it; unitlet does not (the device's
// users are the containers that have it).
func (m *Manager) mapLocalBlock(pod *corev1.Pod, pv *corev1.PersistentVolume) (string, error) {
	src := pv.Spec.Local.Path
	if !filepath.IsAbs(src) || slices.Contains(strings.Split(src, "/"), "..") {
		return "", fmt.Errorf("invalid path: %s: an absolute path without \"..\" is required", src)
	}
	fi, err := os.Stat(src)
	if err != nil {
		return "", fmt.Errorf("local PersistentVolume %s: %w", pv.Name, err)
	}
	if fi.Mode()&os.ModeDevice == 0 || fi.Mode()&os.ModeCharDevice != 0 {
		return "", fmt.Errorf("local PersistentVolume %s has volumeMode Block, but %s is not a block device", pv.Name, src)
	}
	link := m.deviceLink(pod.UID, pluginLocal, pv.Name)
	if err := csi.LinkDevice(link, src); err != nil {
		return "", fmt.Errorf("link the pod to local PersistentVolume %s's device %s: %w", pv.Name, src, err)
	}
	return link, nil
}

// claimOnce refuses a ReadWriteOncePod claim that another pod on the node has prepared and
// not released: one pod at a time, whatever the scheduler thought.
func (m *Manager) claimOnce(pod *corev1.Pod, pvc *corev1.PersistentVolumeClaim) error {
	if !slices.Contains(pvc.Spec.AccessModes, corev1.ReadWriteOncePod) {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var holders []string
	for uid, pv := range m.pods {
		if uid == pod.UID || pv.pod == nil || pv.pod.Namespace != pod.Namespace {
			continue
		}
		for _, v := range pv.volumes {
			if v.claim == pvc.Name {
				holders = append(holders, pv.pod.Namespace+"/"+pv.pod.Name)
			}
		}
	}
	if len(holders) > 0 {
		sort.Strings(holders)
		return fmt.Errorf("PersistentVolumeClaim %s/%s has the ReadWriteOncePod access mode and pod %s on this node uses it", pvc.Namespace, pvc.Name, strings.Join(holders, ", "))
	}
	return nil
}

// mountLocal bind-mounts a local persistent volume's directory at the pod's volume
// directory, as the kubelet's local plugin does: read-only when the pod's claim says so,
// the volume's group set to
// the pod's fsGroup on the first mount of a writable one. A block device path is refused.
func (m *Manager) mountLocal(ctx context.Context, pod *corev1.Pod, pv *corev1.PersistentVolume, readOnly bool) (string, error) {
	if len(pv.Spec.MountOptions) > 0 {
		return "", fmt.Errorf("PersistentVolume %s sets mountOptions %v: unitlet-volumes does not apply mount options to local volumes yet; remove them", pv.Name, pv.Spec.MountOptions)
	}
	src := pv.Spec.Local.Path
	if !filepath.IsAbs(src) || slices.Contains(strings.Split(src, "/"), "..") {
		return "", fmt.Errorf("invalid path: %s: an absolute path without \"..\" is required", src)
	}
	fi, err := os.Stat(src)
	if err != nil {
		return "", fmt.Errorf("local PersistentVolume %s: %w", pv.Name, err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("local PersistentVolume %s: %s is not a directory: unitlet-volumes mounts local directories with volumeMode Filesystem, and hands block devices to pods with volumeMode Block (it does not format and mount a device)", pv.Name, src)
	}
	dir := m.volumeDir(pod.UID, pluginLocal, pv.Name)
	if mounted, err := isMountPoint(dir); err != nil {
		return "", err
	} else if mounted {
		return dir, nil
	}
	first := len(m.localMountsOf(src)) == 0
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return "", err
	}
	if err := unix.Mount(src, dir, "", unix.MS_BIND, ""); err != nil {
		_ = os.Remove(dir)
		return "", fmt.Errorf("bind-mount local PersistentVolume %s (%s) at %s: %w", pv.Name, src, dir, err)
	}
	if readOnly {
		if err := unix.Mount("", dir, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
			_ = unix.Unmount(dir, 0)
			_ = os.Remove(dir)
			return "", fmt.Errorf("make local PersistentVolume %s read-only at %s: %w", pv.Name, dir, err)
		}
		return dir, nil
	}
	if sc := pod.Spec.SecurityContext; first && sc != nil && sc.FSGroup != nil {
		onMismatch := sc.FSGroupChangePolicy != nil && *sc.FSGroupChangePolicy == corev1.FSGroupChangeOnRootMismatch
		if !onMismatch || !ownership.RootMatches(dir, *sc.FSGroup, false) {
			if err := ownership.Set(dir, *sc.FSGroup, false); err != nil {
				return "", err
			}
		}
	}
	return dir, nil
}

// localMountsOf are the pods' volume directories where the local directory src is
// mounted now, as this process prepared them.
func (m *Manager) localMountsOf(src string) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for _, pv := range m.pods {
		for _, v := range pv.volumes {
			if v.plugin == pluginLocal && v.source == src {
				out = append(out, v.path)
			}
		}
	}
	return out
}

// isMountPoint reports whether dir is a mount point (false when it does not exist), a bind
// mount from the same file system included.
func isMountPoint(dir string) (bool, error) {
	if _, err := os.Lstat(dir); errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	mounted, err := mountinfo.Mounted(dir)
	if err != nil {
		return false, fmt.Errorf("is %s a mount point: %w", dir, err)
	}
	return mounted, nil
}

// tearDownLocal unmounts a local persistent volume from a pod's volume directory and
// removes the directory, which must then be empty: the volume's data is never removed.
func tearDownLocal(dir string) error {
	for {
		mounted, err := isMountPoint(dir)
		if err != nil {
			return fmt.Errorf("tear down local volume %s: %w", dir, err)
		}
		if !mounted {
			break
		}
		if err := unix.Unmount(dir, 0); err != nil {
			return fmt.Errorf("tear down local volume %s: unmount: %w", dir, err)
		}
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("tear down local volume %s: %w (left as it is: a local volume's files are never removed)", dir, err)
	}
	return nil
}

// tearDownCSI unpublishes a pod's CSI volume (and unstages it when no other pod uses it).
func (m *Manager) tearDownCSI(ctx context.Context, dir string) error {
	if m.csi == nil {
		return fmt.Errorf("tear down CSI volume %s: this unitlet-volumes mounts no CSI volumes", dir)
	}
	return m.csi.TearDown(ctx, dir)
}

// tearDownCSIBlock unpublishes a pod's CSI block volume (and unstages it when no other pod
// uses it).
func (m *Manager) tearDownCSIBlock(ctx context.Context, link string) error {
	if m.csi == nil {
		return fmt.Errorf("tear down CSI block volume %s: this unitlet-volumes mounts no CSI volumes", link)
	}
	return m.csi.TearDownBlock(ctx, link)
}

// UnstageOrphans unstages the CSI volumes staged on the node that no pod has published
// (a restart came between a pod's unpublish and its volume's unstage).
func (m *Manager) UnstageOrphans(ctx context.Context) error {
	if m.csi == nil {
		return nil
	}
	return m.csi.UnstageOrphans(ctx)
}

// sourceKind names the source that is set in a volume or persistent volume source (its
// field name in the API), "unknown" when none is.
func sourceKind(s any) string {
	rv := reflect.ValueOf(s)
	for i := 0; i < rv.NumField(); i++ {
		if f := rv.Field(i); f.Kind() == reflect.Pointer && !f.IsNil() {
			name, _, _ := strings.Cut(rv.Type().Field(i).Tag.Get("json"), ",")
			return name
		}
	}
	return "unknown"
}

// nodeAffinityMatches checks the PV's required node affinity against the node's labels, as
// the kubelet does (component-helpers' CheckNodeAffinity, whose package would link
// client-go's whole scheme into this service).
func nodeAffinityMatches(pv *corev1.PersistentVolume, labels map[string]string) error {
	if pv.Spec.NodeAffinity == nil || pv.Spec.NodeAffinity.Required == nil {
		return nil
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Labels: labels}}
	ok, err := schedulinghelpers.MatchNodeSelectorTerms(node, pv.Spec.NodeAffinity.Required)
	if err != nil {
		return err
	}
	if !ok {
		return errors.New("no matching NodeSelectorTerms")
	}
	return nil
}
