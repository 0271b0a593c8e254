package volumes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	volumesv1 "github.com/unitlet/unitlet/proto/unitlet/volumes/v1"
	"github.com/unitlet/unitlet/services/volumes/atomicwriter"
	"github.com/unitlet/unitlet/services/volumes/csi"
	"github.com/unitlet/unitlet/services/volumes/emptydir"
	"github.com/unitlet/unitlet/services/volumes/hostpath"
	"github.com/unitlet/unitlet/services/volumes/ownership"
	"github.com/unitlet/unitlet/services/volumes/subpath"
	"github.com/unitlet/unitlet/shared/usage"
)

// The kubelet's plugin names; a volume lives in <pods>/<uid>/volumes/<escaped name>/<volume>,
// the name escaped with "~" for "/" (kubernetes.io~configmap).
const (
	pluginEmptyDir    = "kubernetes.io/empty-dir"
	pluginHostPath    = "kubernetes.io/host-path"
	pluginConfigMap   = "kubernetes.io/configmap"
	pluginSecret      = "kubernetes.io/secret"
	pluginDownwardAPI = "kubernetes.io/downward-api"
	pluginProjected   = "kubernetes.io/projected"
	// pluginImage is an image volume: the runtime mounts the image (CRI image mounts);
	// podsync pulls it and adds its mounts, this service has nothing on disk for it.
	pluginImage = "kubernetes.io/image"
)

// ErrPrepare is a volume that cannot be made ready now: a missing object, a failed type
// check, a subPath escaping its volume. The pod waits; the message names the volume.
type ErrPrepare struct {
	Volume string
	Err    error
}

func (e *ErrPrepare) Error() string {
	prefix := fmt.Sprintf("volume %q", e.Volume)
	if msg := e.Err.Error(); strings.HasPrefix(msg, prefix) {
		return msg
	}
	return fmt.Sprintf("%s: %v", prefix, e.Err)
}
func (e *ErrPrepare) Unwrap() error { return e.Err }

// Payloads builds the files of the volume kinds whose content comes from API objects and
// the pod (configMap, secret, downwardAPI, projected).
type Payloads interface {
	Payload(ctx context.Context, pod *corev1.Pod, v *corev1.Volume) (map[string]atomicwriter.FileProjection, error)
}

// Manager prepares, keeps current and releases pods' volumes.
type Manager struct {
	podsDir  string
	payloads Payloads
	// claims reads persistent volume claims and volumes; nil: standalone.
	claims Claims
	// csi mounts CSI persistent volumes; nil: none are mounted.
	csi CSIVolumes
	// recorder, when set, takes the pods' volume events (VolumeConditionAbnormal).
	recorder record.EventRecorder
	// memory is the node's allocatable memory: the size of a memory emptyDir that sets no
	// smaller bound.
	memory *resource.Quantity
	clk    clock.Clock
	// backoff spaces the tries of a volume whose operation failed.
	backoff *operationBackoff
	log     *slog.Logger
	// released, when set, is told of each pod whose volumes were released (its tokens are
	// forgotten).
	released func(types.UID)
	// releasing, a test hook, runs as a release begins tearing a pod's volumes down.
	releasing func(types.UID)
	// measuring, a test hook, runs before each volume's walk, with its path.
	measuring func(path string)

	mu   sync.Mutex
	pods map[types.UID]*podVolumes
	// busy are the set-ups and teardowns under way, by what they do, with their start.
	busy map[string]time.Time
	// fresh tells MeasureEvery that volumes were set up that are not measured yet.
	fresh chan struct{}
}

// stuckAfter is how long a volume's set-up or teardown may take before the health check
// calls it stuck: mounts and file systems do not honour contexts, so only the clock tells.
const stuckAfter = 3 * time.Minute

// during records an operation under way until the returned func is called.
func (m *Manager) during(what string) func() {
	m.mu.Lock()
	m.busy[what] = m.clk.Now()
	m.mu.Unlock()
	return func() {
		m.mu.Lock()
		delete(m.busy, what)
		m.mu.Unlock()
	}
}

// Healthy fails while a set-up or teardown has been under way for longer than stuckAfter
// (a hung mount or NFS-like file system), naming the oldest: the watchdog then has
// systemd restart the service, which finds the volumes on disk again.
func (m *Manager) Healthy() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clk.Now()
	oldest, since := "", now
	for what, start := range m.busy {
		if start.Before(since) {
			oldest, since = what, start
		}
	}
	if oldest != "" && now.Sub(since) > stuckAfter {
		return fmt.Errorf("%s has been under way for %s (a stuck mount or file system?)", oldest, now.Sub(since).Round(time.Second))
	}
	return nil
}

// podVolumes is one pod's volumes; its fields are guarded by Manager.mu.
type podVolumes struct {
	pod *corev1.Pod
	// prepared is when the last prepare began.
	prepared time.Time
	volumes  map[string]*volume
	// op orders the pod's prepares, resyncs and release; never taken while holding
	// Manager.mu.
	op sync.Mutex
}

type volume struct {
	name, plugin, path string
	memory             bool
	// readOnly: a claim the pod mounts read-only; claim is the claim's name, source a
	// local volume's directory (persistentVolumeClaim volumes).
	readOnly      bool
	claim, source string
	used, inodes  int64
	measured      time.Time
	// measureErr is the last walk's error, "" after a walk that succeeded.
	measureErr string
	// size and condition are what a CSI volume's driver reports (NodeGetVolumeStats); nil
	// when it reports none.
	size      *volumesv1.VolumeSize
	condition *csi.VolumeCondition
	// block: a claim of volumeMode Block, path the pod's link to its device (never
	// measured: a device has no file system here).
	block bool
}

// NewManager manages volumes under podsDir (<root-dir>/pods, the kubelet's layout).
func NewManager(o ManagerOptions) *Manager {
	return &Manager{podsDir: o.PodsDir, payloads: o.Payloads, claims: o.Claims, csi: o.CSI, recorder: o.Recorder, memory: o.Memory, released: o.Released, clk: o.Clock, backoff: newOperationBackoff(o.Clock), log: o.Log, pods: map[types.UID]*podVolumes{}, busy: map[string]time.Time{}, fresh: make(chan struct{}, 1)}
}

// ManagerOptions are what a Manager is built from.
type ManagerOptions struct {
	// PodsDir holds the pods' directories, <uid>/volumes/<plugin>/<name> each.
	PodsDir  string
	Payloads Payloads
	// Claims reads persistent volume claims and volumes; nil when the node runs
	// standalone (such volumes are then refused).
	Claims Claims
	// CSI mounts CSI persistent volumes; nil refuses them.
	CSI CSIVolumes
	// Recorder, when set, takes the pods' volume events.
	Recorder record.EventRecorder
	// Memory is the node's allocatable memory: the size of a memory emptyDir that sets no
	// smaller bound.
	Memory *resource.Quantity
	// Released, when set, is told of each pod whose volumes were released.
	Released func(types.UID)
	Clock    clock.Clock
	Log      *slog.Logger
}

func escapePlugin(plugin string) string { return strings.ReplaceAll(plugin, "/", "~") }

func (m *Manager) volumeDir(uid types.UID, plugin, name string) string {
	return filepath.Join(m.podsDir, string(uid), "volumes", escapePlugin(plugin), name)
}

// lockPod returns the pod's entry (made when there is none) with its operation lock
// held: Prepare and Release of one pod never overlap, also for a pod this process has
// not prepared (its volumes on disk from before a restart). An entry released while the
// caller waited for its lock is not handed out.
func (m *Manager) lockPod(uid types.UID) *podVolumes {
	for {
		m.mu.Lock()
		pv := m.pods[uid]
		if pv == nil {
			pv = &podVolumes{volumes: map[string]*volume{}}
			m.pods[uid] = pv
		}
		m.mu.Unlock()
		pv.op.Lock()
		m.mu.Lock()
		current := m.pods[uid] == pv
		m.mu.Unlock()
		if current {
			return pv
		}
		pv.op.Unlock() // released while we waited: take the pod's new entry
	}
}

// Prepare makes every volume of pod ready and returns its containers' mounts. It is safe to
// call again: content is rewritten only when it changed, and a subPath already
// bind-mounted for a container stays as it is.
func (m *Manager) Prepare(ctx context.Context, pod *corev1.Pod) ([]*volumesv1.ContainerMounts, error) {
	return m.prepare(ctx, pod, "", false)
}

// Resync is Prepare for the reconcile loop: only for a pod whose volumes this process
// prepared or has on disk, checked under the pod's lock. A pod released while the round
// went on (podsync's release comes between the round's list and its turn) is not set up
// again: its volumes, a CSI volume's stage and publish among them, stay released.
func (m *Manager) Resync(ctx context.Context, pod *corev1.Pod) error {
	_, err := m.prepare(ctx, pod, "", true)
	return err
}

// PrepareContainer is Prepare for one container about to be started: it returns that
// container's mounts only, with each of its subPaths resolved again, as the kubelet does
// at every container start. A subPath that now escapes its volume is refused, and the
// container does not start.
func (m *Manager) PrepareContainer(ctx context.Context, pod *corev1.Pod, container string) ([]*volumesv1.ContainerMounts, error) {
	if container == "" {
		return nil, errors.New("container: required")
	}
	return m.prepare(ctx, pod, container, false)
}

func (m *Manager) prepare(ctx context.Context, pod *corev1.Pod, container string, resync bool) ([]*volumesv1.ContainerMounts, error) {
	if err := validName("pod uid", string(pod.UID)); err != nil {
		return nil, err
	}
	for _, v := range pod.Spec.Volumes {
		if err := validName("volume name", v.Name); err != nil {
			return nil, err
		}
	}
	pv := m.lockPod(pod.UID)
	defer pv.op.Unlock()
	m.mu.Lock()
	if resync && pv.pod == nil {
		if _, onDisk := m.SetUpAt(pod.UID); !onDisk {
			delete(m.pods, pod.UID) // the entry lockPod made for this call only
			m.mu.Unlock()
			return nil, nil
		}
	}
	pv.prepared = m.clk.Now()
	m.mu.Unlock()
	vols := map[string]*volume{}
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		if set := m.claimSetUp(pv, v); set != nil {
			// A claim resolved and mounted once stays so for the pod's life, as with the
			// kubelet: no API reads each period.
			vols[v.Name] = set
			continue
		}
		if err := m.backoff.wait(pod.UID, v.Name); err != nil {
			return nil, &ErrPrepare{Volume: v.Name, Err: err}
		}
		done := m.during(fmt.Sprintf("setting up volume %s of pod %s/%s", v.Name, pod.Namespace, pod.Name))
		vol, err := m.setUp(ctx, pod, v)
		done()
		m.backoff.done(pod.UID, v.Name, err)
		if err != nil {
			return nil, &ErrPrepare{Volume: v.Name, Err: err}
		}
		vols[v.Name] = vol
	}
	m.mu.Lock()
	pv.pod = pod
	fresh := false
	for name, v := range vols {
		// The same volume set up again (the reconcile loop prepares every pod each
		// period) stays the object it was: a walk of it under way, which holds it,
		// records its usage there.
		if old := pv.volumes[name]; old != nil && old.plugin == v.plugin && old.path == v.path {
			old.memory, old.readOnly, old.claim, old.source, old.block = v.memory, v.readOnly, v.claim, v.source, v.block
			continue
		}
		pv.volumes[name] = v
		fresh = true
	}
	m.mu.Unlock()
	if fresh {
		select {
		case m.fresh <- struct{}{}:
		default: // a measurement of new volumes is already due
		}
	}
	return m.mounts(pod, vols, container)
}

func hasContainer(pod *corev1.Pod, name string) bool {
	for _, c := range containers(pod) {
		if c.Name == name {
			return true
		}
	}
	return false
}

// containers are the pod's init, app and ephemeral containers. An ephemeral container
// with a subPath (which the API server forbids, and podsync refuses to start) is left out
// rather than have its subPath bind-mounted.
func containers(pod *corev1.Pod) []corev1.Container {
	out := append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...)
	for _, ec := range pod.Spec.EphemeralContainers {
		if !slices.ContainsFunc(ec.VolumeMounts, func(vm corev1.VolumeMount) bool { return vm.SubPath != "" || vm.SubPathExpr != "" }) {
			out = append(out, corev1.Container(ec.EphemeralContainerCommon))
		}
	}
	return out
}

// subPathTarget is where the i-th volumeMount of a container, with a subPath into volume,
// is bind-mounted: <pods>/<uid>/volume-subpaths/<volume>/<container>/<i>, the kubelet's
// layout, in the pod's directory that no container mounts.
func (m *Manager) subPathTarget(uid types.UID, volume, container string, i int) string {
	return filepath.Join(m.podsDir, string(uid), "volume-subpaths", volume, container, strconv.Itoa(i))
}

// setUp makes one volume ready.
func (m *Manager) setUp(ctx context.Context, pod *corev1.Pod, v *corev1.Volume) (*volume, error) {
	switch {
	case v.PersistentVolumeClaim != nil, v.Ephemeral != nil:
		return m.setUpClaim(ctx, pod, v)
	case v.HostPath != nil:
		if err := hostpath.Check(v.HostPath.Path, v.HostPath.Type); err != nil {
			return nil, err
		}
		return &volume{name: v.Name, plugin: pluginHostPath, path: v.HostPath.Path}, nil
	case v.CSI != nil:
		return m.setUpInlineCSI(ctx, pod, v)
	case v.Image != nil:
		return &volume{name: v.Name, plugin: pluginImage}, nil
	case v.EmptyDir != nil:
		dir := m.volumeDir(pod.UID, pluginEmptyDir, v.Name)
		size := v.EmptyDir.SizeLimit
		if v.EmptyDir.Medium == corev1.StorageMediumMemory {
			size = emptydir.MemorySize(m.memory, pod, v.EmptyDir.SizeLimit)
		}
		if medium := v.EmptyDir.Medium; medium == corev1.StorageMediumHugePages || strings.HasPrefix(string(medium), string(corev1.StorageMediumHugePagesPrefix)) {
			pageSize, err := emptydir.HugePageSize(medium, pod)
			if err == nil {
				err = emptydir.SetupHugePages(dir, pageSize)
			}
			if err != nil {
				return nil, err
			}
		} else if err := emptydir.Setup(dir, v.EmptyDir.Medium, size); err != nil {
			return nil, err
		}
		if sc := pod.Spec.SecurityContext; sc != nil {
			if err := emptydir.ApplyFSGroup(dir, sc.FSGroup); err != nil {
				return nil, err
			}
		}
		return &volume{name: v.Name, plugin: pluginEmptyDir, path: dir, memory: v.EmptyDir.Medium == corev1.StorageMediumMemory}, nil
	}
	plugin := ""
	// Secrets and projected volumes (service-account tokens) live in memory, never on disk,
	// as the kubelet keeps them.
	memory := false
	switch {
	case v.ConfigMap != nil:
		plugin = pluginConfigMap
	case v.Secret != nil:
		plugin, memory = pluginSecret, true
	case v.DownwardAPI != nil:
		plugin = pluginDownwardAPI
	case v.Projected != nil:
		plugin, memory = pluginProjected, true
	default:
		return nil, fmt.Errorf("unsupported volume type %s: unitlet-volumes serves emptyDir, hostPath, configMap, secret, downwardAPI, projected, persistentVolumeClaim, ephemeral, csi and image volumes", sourceKind(v.VolumeSource))
	}
	payload, err := m.payloads.Payload(ctx, pod, v)
	if err != nil {
		return nil, err
	}
	dir := m.volumeDir(pod.UID, plugin, v.Name)
	medium := corev1.StorageMediumDefault
	if memory {
		medium = corev1.StorageMediumMemory
	}
	// Small: these hold a few files; 64 MiB bounds a runaway object.
	if err := emptydir.Setup(dir, medium, resource.NewQuantity(64<<20, resource.BinarySI)); err != nil {
		return nil, err
	}
	// Not world-writable: only the writer changes the files.
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	w, err := atomicwriter.New(dir, pod.Namespace+"/"+pod.Name+"/"+v.Name)
	if err != nil {
		return nil, err
	}
	if err := w.Write(payload, nil); err != nil {
		return nil, err
	}
	// As the kubelet after every set-up of these kinds: the whole volume, its root and
	// ..data link included, to the fsGroup (read-only bits: containers cannot write it).
	if sc := pod.Spec.SecurityContext; sc != nil && sc.FSGroup != nil {
		if err := ownership.Set(dir, *sc.FSGroup, true); err != nil {
			return nil, err
		}
	}
	return &volume{name: v.Name, plugin: plugin, path: dir, memory: memory}, nil
}

// mounts resolves each container's volumeMounts to host paths (only container's, when
// set): a subPath is bind-mounted through the descriptor of its safe resolution, and the
// mount point is what the runtime gets.
func (m *Manager) mounts(pod *corev1.Pod, vols map[string]*volume, container string) ([]*volumesv1.ContainerMounts, error) {
	var out []*volumesv1.ContainerMounts
	for _, c := range containers(pod) {
		if container != "" && c.Name != container {
			continue
		}
		cm := &volumesv1.ContainerMounts{Container: c.Name}
		for i, vm := range c.VolumeMounts {
			vol := vols[vm.Name]
			if vol == nil {
				return nil, &ErrPrepare{Volume: vm.Name, Err: fmt.Errorf("container %s mounts it, but the pod has no such volume", c.Name)}
			}
			if vol.plugin == pluginImage {
				continue // podsync mounts the image through the runtime
			}
			host := vol.path
			if vm.SubPathExpr != "" {
				// Expanded from the container's environment, which podsync has: it asks
				// for the container's mounts at each start with the subPath it expands to.
				if container == "" {
					continue
				}
				return nil, &ErrPrepare{Volume: vm.Name, Err: fmt.Errorf("container %s: its subPathExpr %q reached unitlet-volumes unexpanded: podsync expands it before the container's start (upgrade unitlet-podsync)", c.Name, vm.SubPathExpr)}
			}
			if vm.SubPath != "" {
				target := m.subPathTarget(pod.UID, vm.Name, c.Name, i)
				done := m.during(fmt.Sprintf("mounting subPath %q of volume %s for container %s of pod %s/%s", vm.SubPath, vm.Name, c.Name, pod.Namespace, pod.Name))
				err := subpath.Bind(vol.path, vm.SubPath, target, container == "")
				done()
				if err != nil {
					return nil, &ErrPrepare{Volume: vm.Name, Err: fmt.Errorf("failed to prepare subPath for volumeMount %q of container %q: %w", vm.Name, c.Name, err)}
				}
				host = target
			}
			readOnly := vm.ReadOnly || vol.readOnly
			switch vol.plugin {
			case pluginConfigMap, pluginSecret, pluginDownwardAPI, pluginProjected:
				// The kubelet mounts these read-only: only the writer updates them.
				readOnly = true
			}
			cm.Mounts = append(cm.Mounts, &volumesv1.Mount{
				Volume: vm.Name, HostPath: host, ContainerPath: vm.MountPath, ReadOnly: readOnly, Propagation: propagation(vm.MountPropagation),
			})
		}
		for _, d := range c.VolumeDevices {
			vol := vols[d.Name]
			switch {
			case vol == nil:
				return nil, &ErrPrepare{Volume: d.Name, Err: fmt.Errorf("container %s lists it in volumeDevices, but the pod has no such volume", c.Name)}
			case !vol.block:
				return nil, &ErrPrepare{Volume: d.Name, Err: fmt.Errorf("container %s lists it in volumeDevices, but it is not a persistentVolumeClaim of volumeMode Block", c.Name)}
			}
			// As the kubelet: read-only when the pod's claim is.
			cm.Devices = append(cm.Devices, &volumesv1.Device{Volume: d.Name, HostPath: vol.path, ContainerPath: d.DevicePath, ReadOnly: vol.readOnly})
		}
		if len(cm.Mounts) > 0 || len(cm.Devices) > 0 {
			out = append(out, cm)
		}
	}
	return out, nil
}

func propagation(p *corev1.MountPropagationMode) volumesv1.MountPropagation {
	if p == nil {
		return volumesv1.MountPropagation_MOUNT_PROPAGATION_PRIVATE
	}
	switch *p {
	case corev1.MountPropagationHostToContainer:
		return volumesv1.MountPropagation_MOUNT_PROPAGATION_HOST_TO_CONTAINER
	case corev1.MountPropagationBidirectional:
		return volumesv1.MountPropagation_MOUNT_PROPAGATION_BIDIRECTIONAL
	}
	return volumesv1.MountPropagation_MOUNT_PROPAGATION_PRIVATE
}

// Release tears down a pod's volumes: tmpfs unmounted, directories removed. Host paths are
// never touched.
func (m *Manager) Release(ctx context.Context, uid types.UID) error {
	_, err := m.release(ctx, uid, time.Time{})
	return err
}

// release is Release; with since set, only when the pod's volumes were not prepared at or
// after since (checked under the pod's lock, so a Prepare that just finished is kept). It
// reports whether it released.
func (m *Manager) release(ctx context.Context, uid types.UID, since time.Time) (bool, error) {
	if err := validName("pod uid", string(uid)); err != nil {
		return false, err
	}
	pv := m.lockPod(uid)
	defer pv.op.Unlock()
	m.mu.Lock()
	recent := !since.IsZero() && !pv.prepared.Before(since)
	m.mu.Unlock()
	if recent {
		return false, nil
	}
	if m.releasing != nil {
		m.releasing(uid)
	}
	done := m.during("releasing the volumes of pod " + string(uid))
	err := m.tearDownDir(ctx, uid)
	done()
	if err != nil {
		m.mu.Lock()
		if pv.pod == nil {
			delete(m.pods, uid) // an entry made for this release only
		}
		m.mu.Unlock()
		return false, err
	}
	m.mu.Lock()
	delete(m.pods, uid)
	m.mu.Unlock()
	m.backoff.forget(uid)
	if m.released != nil {
		m.released(uid)
	}
	return true, nil
}

// tearDownDir removes <pods>/<uid>/volume-subpaths, <pods>/<uid>/volumeDevices and
// <pods>/<uid>/volumes, unmounting what is mounted there first: the subPaths' bind mounts
// before the volumes they show.
func (m *Manager) tearDownDir(ctx context.Context, uid types.UID) error {
	if err := subpath.UnbindAll(filepath.Join(m.podsDir, string(uid), "volume-subpaths")); err != nil {
		return fmt.Errorf("release the subPath mounts of pod %s: %w", uid, err)
	}
	// A block volume's link: a local device's is only removed; a CSI volume's is
	// unpublished (and unstaged after the last pod).
	unlink := func(link string) error {
		if err := os.Remove(link); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	err := m.tearDownEach(uid, "volumeDevices", func(plugin string) func(string) error {
		if plugin == escapePlugin(csi.PluginName) {
			return func(link string) error { return m.tearDownCSIBlock(ctx, link) }
		}
		return unlink
	})
	if err != nil {
		return err
	}
	return m.tearDownEach(uid, "volumes", func(plugin string) func(string) error {
		switch plugin {
		case escapePlugin(pluginLocal):
			return tearDownLocal
		case escapePlugin(csi.PluginName):
			return func(dir string) error { return m.tearDownCSI(ctx, dir) }
		}
		return emptydir.TearDown
	})
}

// tearDownEach tears down every entry of <pods>/<uid>/<sub>/<plugin>/ with the plugin's
// teardown, then removes the directories.
func (m *Manager) tearDownEach(uid types.UID, sub string, tearDownOf func(plugin string) func(string) error) error {
	base := filepath.Join(m.podsDir, string(uid), sub)
	plugins, err := os.ReadDir(base)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("release volumes of pod %s: %w", uid, err)
	}
	for _, p := range plugins {
		names, err := os.ReadDir(filepath.Join(base, p.Name()))
		if err != nil {
			return fmt.Errorf("release volumes of pod %s: %w", uid, err)
		}
		tearDown := tearDownOf(p.Name())
		for _, n := range names {
			if err := tearDown(filepath.Join(base, p.Name(), n.Name())); err != nil {
				return fmt.Errorf("release volume %s of pod %s: %w", n.Name(), uid, err)
			}
		}
		if err := os.Remove(filepath.Join(base, p.Name())); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return os.Remove(base)
}

// Prepared reports whether the pod's volumes were prepared by this process.
func (m *Manager) Prepared(uid types.UID) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	pv := m.pods[uid]
	return pv != nil && pv.pod != nil
}

// OnDisk lists the pod UIDs that have volume directories: after a restart, the pods whose
// volumes exist though no prepare has been seen yet.
func (m *Manager) OnDisk() ([]types.UID, error) {
	entries, err := os.ReadDir(m.podsDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []types.UID
	for _, e := range entries {
		for _, d := range podVolumeDirs {
			if _, err := os.Stat(filepath.Join(m.podsDir, e.Name(), d)); err == nil {
				out = append(out, types.UID(e.Name()))
				break
			}
		}
	}
	return out, nil
}

// podVolumeDirs are the directories of a pod's volumes: its volumes, its block volumes'
// links and its subPath mounts.
var podVolumeDirs = []string{"volumes", "volumeDevices", "volume-subpaths"}

// SetUpAt is when the volumes of pod uid were set up on disk: the time of its first
// directory of podVolumeDirs; false when it has none.
func (m *Manager) SetUpAt(uid types.UID) (time.Time, bool) {
	for _, d := range podVolumeDirs {
		if fi, err := os.Stat(filepath.Join(m.podsDir, string(uid), d)); err == nil {
			return fi.ModTime(), true
		}
	}
	return time.Time{}, false
}

// CleanupOrphans releases the volumes on disk of pods that podsync confirms it does not
// have (known is its complete list, taken at since). Volumes of any pod podsync knows are
// never touched, nor those of a pod prepared after since (podsync may have admitted it
// after its list was taken).
func (m *Manager) CleanupOrphans(ctx context.Context, known map[types.UID]bool, since time.Time) []types.UID {
	uids, err := m.OnDisk()
	if err != nil {
		m.log.Warn("list volumes on disk", "err", err)
		return nil
	}
	var released []types.UID
	for _, uid := range uids {
		if known[uid] {
			continue
		}
		ok, err := m.release(ctx, uid, since)
		if err != nil {
			m.log.Warn("release orphaned volumes", "pod", uid, "err", err)
			continue
		}
		if ok {
			released = append(released, uid)
		}
	}
	return released
}

// Measure refreshes every prepared volume's usage. A failed walk keeps the last usage and
// is logged when its error first appears or changes.
func (m *Manager) Measure() { m.measure(nil) }

// measure is Measure for the volumes which, when set, picks (called under m.mu).
func (m *Manager) measure(which func(*volume) bool) {
	m.mu.Lock()
	var vols []*volume
	var uids []types.UID
	var pods []*corev1.Pod
	for uid, pv := range m.pods {
		for _, v := range pv.volumes {
			if v.plugin != pluginHostPath && v.plugin != pluginImage && !v.block && (which == nil || which(v)) {
				vols, uids, pods = append(vols, v), append(uids, uid), append(pods, pv.pod)
			}
		}
	}
	m.mu.Unlock()
	for i, v := range vols {
		if m.measuring != nil {
			m.measuring(v.path)
		}
		measure := usage.Measure
		if v.plugin == pluginLocal || v.plugin == csi.PluginName {
			// A persistent volume: its file system's usage, as the kubelet's local plugin
			// reports it, never a walk of what may be a whole disk.
			measure = fsUsage
		}
		var size *volumesv1.VolumeSize
		var cond *csi.VolumeCondition
		if v.plugin == csi.PluginName && m.csi != nil {
			// The driver's own figures and condition, as the kubelet reports a CSI volume's;
			// a driver that gives none has its file system measured.
			st, err := m.csi.Stats(context.Background(), v.path)
			if !errors.Is(err, csi.ErrNoVolumeStats) {
				size = &volumesv1.VolumeSize{CapacityBytes: st.CapacityBytes, AvailableBytes: st.AvailableBytes, Inodes: st.Inodes, InodesFree: st.InodesFree}
				cond = st.Condition
				measure = func(string) (int64, int64, error) { return st.UsedBytes, st.InodesUsed, err }
			}
		}
		b, n, err := measure(v.path)
		msg := ""
		if err != nil {
			msg = err.Error()
		}
		m.mu.Lock()
		if err == nil || errors.Is(err, usage.ErrTooDeep) {
			// ErrTooDeep comes with what was counted above the depth: a lower bound.
			v.used, v.inodes, v.measured = b, n, m.clk.Now()
			v.size = size
		}
		turnedAbnormal := err == nil && cond != nil && cond.Abnormal && (v.condition == nil || !v.condition.Abnormal || v.condition.Message != cond.Message)
		if err == nil {
			v.condition = cond
		}
		pod := pods[i]
		logErr, recovered := msg != "" && msg != v.measureErr, msg == "" && v.measureErr != ""
		v.measureErr = msg
		m.mu.Unlock()
		switch {
		case logErr:
			m.log.Warn("measure a volume's usage", "pod", uids[i], "volume", v.name, "err", err)
		case recovered:
			m.log.Info("measured a volume's usage again", "pod", uids[i], "volume", v.name)
		}
		if turnedAbnormal && m.recorder != nil && pod != nil {
			// As the kubelet's volume stats: a Warning on the pod naming the volume.
			m.recorder.Event(pod, corev1.EventTypeWarning, "VolumeConditionAbnormal", fmt.Sprintf("Volume %s: %s", v.name, cond.Message))
		}
	}
}

// List returns the prepared volumes with their last measured usage.
func (m *Manager) List() []*volumesv1.Volume {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*volumesv1.Volume
	for uid, pv := range m.pods {
		if pv.pod == nil {
			continue
		}
		for _, v := range pv.volumes {
			out = append(out, toProto(uid, pv.pod, v))
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].PodUid != out[j].PodUid {
			return out[i].PodUid < out[j].PodUid
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// validName refuses names that would leave the pod's directory when joined to a path.
func validName(what, name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\\\x00") {
		return fmt.Errorf("%s %q: must be a non-empty name without slashes", what, name)
	}
	return nil
}

// fsUsage is the bytes and inodes in use on the file system of path.
func fsUsage(path string) (int64, int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, 0, fmt.Errorf("statfs %s: %w", path, err)
	}
	return int64(st.Blocks-st.Bfree) * st.Bsize, int64(st.Files - st.Ffree), nil
}
