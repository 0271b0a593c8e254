package podsync

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	resourcehelper "k8s.io/component-helpers/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"

	"github.com/unitlet/unitlet/services/podsync/cgroups"
	"github.com/unitlet/unitlet/services/podsync/criconfig"
	"github.com/unitlet/unitlet/shared/daemon"
	"github.com/unitlet/unitlet/shared/nodeinfo"
)

// The QoS cgroups under the node-allocatable one, as the kubelet names them.
const (
	kubepodsCgroup   = "kubepods"
	burstableCgroup  = "burstable"
	bestEffortCgroup = "besteffort"
	podCgroupPrefix  = "pod"
	// cfsPeriod is the CFS period of pod cgroups (a cpuCFSQuotaPeriod other than 100ms is refused).
	cfsPeriod = 100000
	// cgroupCleanupPeriod is how often cgroups of pods that are gone are removed and the
	// QoS cgroups' CPU shares follow the pods.
	cgroupCleanupPeriod = 10 * time.Second
)

// nodeCgroups keeps the node's pod cgroups as the kubelet's container manager does: the
// node-allocatable cgroup (kubepods) limited to what pods may use, the burstable and
// besteffort QoS cgroups under it, a cgroup per pod with the pod's limits, and the
// system-reserved and kube-reserved cgroups' limits when enforceNodeAllocatable names them.
// A gone pod's cgroup is removed; what is left running in it of a pod this process ran is
// killed first, as the kubelet kills every process before it destroys a pod cgroup.
type nodeCgroups struct {
	m             cgroups.Manager
	perQOS        bool
	root          cgroups.Name // cgroupRoot
	kubepods      cgroups.Name
	pidsLimit     int64
	hugePageSizes []int64
	log           *slog.Logger

	mu   sync.Mutex
	pods map[types.UID]*corev1.Pod // pods whose cgroup this process made or adopted
}

// runtimeConfigClient is the CRI call the cgroup driver is read from.
type runtimeConfigClient interface {
	RuntimeConfig(ctx context.Context, in *runtimeapi.RuntimeConfigRequest, opts ...grpc.CallOption) (*runtimeapi.RuntimeConfigResponse, error)
}

// cgroupDriver is the driver pods' cgroups use: the runtime's, where it reports one (CRI
// RuntimeConfig, containerd 2.0 and later), which must then be the configuration's; else
// the configuration's cgroupDriver.
func cgroupDriver(ctx context.Context, rt runtimeConfigClient, kc *kubeletconfigv1beta1.KubeletConfiguration, log *slog.Logger) (cgroups.Driver, error) {
	configured := cgroups.Driver(kc.CgroupDriver)
	if configured == "" {
		configured = cgroups.Cgroupfs
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := rt.RuntimeConfig(ctx, &runtimeapi.RuntimeConfigRequest{})
	if err != nil {
		log.Info("the runtime does not report its cgroup driver (CRI RuntimeConfig); using cgroupDriver from the configuration", "cgroupDriver", configured, "err", err)
		return configured, nil
	}
	var reported cgroups.Driver
	switch resp.GetLinux().GetCgroupDriver() {
	case runtimeapi.CgroupDriver_SYSTEMD:
		reported = cgroups.Systemd
	case runtimeapi.CgroupDriver_CGROUPFS:
		reported = cgroups.Cgroupfs
	}
	if reported != configured {
		return "", daemon.ConfigError(fmt.Errorf("cgroupDriver %q: the container runtime uses the %q cgroup driver; set cgroupDriver: %s in the configuration, or configure the runtime for %s (containerd: SystemdCgroup in the runc options)",
			configured, reported, reported, configured))
	}
	return configured, nil
}

// newNodeCgroups sets up the node's cgroups under mount with the runtime's driver
// (cgroupDriver): checks cgroupRoot, makes or adopts kubepods and the QoS cgroups with
// their limits, and enforces the reserved cgroups' limits.
func newNodeCgroups(ctx context.Context, rt runtimeConfigClient, kc *kubeletconfigv1beta1.KubeletConfiguration, machine nodeinfo.Machine, mount string, log *slog.Logger) (*nodeCgroups, error) {
	driver, err := cgroupDriver(ctx, rt, kc, log)
	if err != nil {
		return nil, err
	}
	log = log.With("component", "cgroups")
	m, err := cgroups.New(driver, mount)
	if err != nil {
		return nil, err
	}
	root, err := cgroups.ParseCgroupRoot(kc.CgroupRoot, driver)
	if err != nil {
		m.Close()
		return nil, daemon.ConfigError(err)
	}
	n := &nodeCgroups{
		m: m, perQOS: ptr.Deref(kc.CgroupsPerQOS, true), root: root, kubepods: root.Child(kubepodsCgroup),
		pidsLimit: ptr.Deref(kc.PodPidsLimit, -1), log: log, pods: map[types.UID]*corev1.Pod{},
	}
	for size := range machine.HugePages {
		if q, err := resource.ParseQuantity(size); err == nil {
			n.hugePageSizes = append(n.hugePageSizes, q.Value())
		}
	}
	slices.Sort(n.hugePageSizes)
	if len(root) > 0 && !m.Exists(root) {
		m.Close()
		return nil, daemon.ConfigError(fmt.Errorf("cgroupRoot %q: no such cgroup (%s); create it or correct cgroupRoot", kc.CgroupRoot, m.Path(root)))
	}
	if !n.perQOS {
		return n, nil
	}
	limits, err := nodeinfo.PodsCgroupLimits(kc, machine)
	if err != nil {
		m.Close()
		return nil, daemon.ConfigError(err)
	}
	if err := n.ensure(ctx, n.kubepods, cgroups.AllocatableResources(limits)); err != nil {
		m.Close()
		return nil, err
	}
	if err := n.updateQOS(ctx); err != nil {
		m.Close()
		return nil, err
	}
	if err := n.enforceReserved(ctx, kc); err != nil {
		m.Close()
		return nil, err
	}
	log.Info("node cgroups ready", "driver", driver, "cgroupV2", m.Unified(), "kubepods", m.Parent(n.kubepods), "limits", limits)
	return n, nil
}

// ensure makes or updates one cgroup; a read-only cgroup filesystem (a unit with
// ProtectControlGroups=yes and the cgroupfs driver) gets an error that says what to do.
func (n *nodeCgroups) ensure(ctx context.Context, name cgroups.Name, r cgroups.Resources) error {
	err := n.m.Ensure(ctx, name, r)
	if errors.Is(err, syscall.EROFS) {
		return daemon.ConfigError(fmt.Errorf("%w: the cgroup filesystem is read-only here; under systemd use cgroupDriver: systemd (and the runtime's systemd cgroup driver), or give unitlet-podsync a drop-in with ProtectControlGroups=no", err))
	}
	return err
}

// enforceReserved limits the system-reserved and kube-reserved cgroups to their
// reservations when enforceNodeAllocatable names them; the cgroups must exist.
func (n *nodeCgroups) enforceReserved(ctx context.Context, kc *kubeletconfigv1beta1.KubeletConfiguration) error {
	system, kube, err := nodeinfo.Reserved(kc)
	if err != nil {
		return daemon.ConfigError(err)
	}
	for _, e := range []struct {
		key, compressible, field, cgroup string
		reserved                         corev1.ResourceList
	}{
		{"system-reserved", "system-reserved-compressible", "systemReservedCgroup", kc.SystemReservedCgroup, system},
		{"kube-reserved", "kube-reserved-compressible", "kubeReservedCgroup", kc.KubeReservedCgroup, kube},
	} {
		full, cpuOnly := slices.Contains(kc.EnforceNodeAllocatable, e.key), slices.Contains(kc.EnforceNodeAllocatable, e.compressible)
		if !full && !cpuOnly {
			continue
		}
		name, err := cgroups.ParseCgroupRoot(e.cgroup, n.m.Driver())
		if err != nil {
			return daemon.ConfigError(fmt.Errorf("%s: %w", e.field, err))
		}
		if !n.m.Exists(name) {
			return daemon.ConfigError(fmt.Errorf("%s %q: no such cgroup (%s), needed by enforceNodeAllocatable %s; create it or correct the field", e.field, e.cgroup, n.m.Path(name), e.key))
		}
		r := cgroups.AllocatableResources(e.reserved)
		if cpuOnly {
			r = cgroups.Resources{CPUShares: r.CPUShares}
		}
		if err := n.ensure(ctx, name, r); err != nil {
			return fmt.Errorf("enforce %s on %s: %w", e.key, e.cgroup, err)
		}
		n.log.Info("reserved cgroup limited", "enforce", e.key, "cgroup", n.m.Parent(name), "reserved", e.reserved)
	}
	return nil
}

// podName is the pod's cgroup: kubepods/[burstable|besteffort/]pod<uid>.
func (n *nodeCgroups) podName(pod *corev1.Pod) cgroups.Name {
	return n.podNameFor(criconfig.QOSClass(pod), pod.UID)
}

func (n *nodeCgroups) podNameFor(qos corev1.PodQOSClass, uid types.UID) cgroups.Name {
	name := n.kubepods
	switch qos {
	case corev1.PodQOSBurstable:
		name = name.Child(burstableCgroup)
	case corev1.PodQOSBestEffort:
		name = name.Child(bestEffortCgroup)
	}
	return name.Child(podCgroupPrefix + string(uid))
}

// Parent is the pod's cgroup in the runtime's notation, its sandbox's cgroup parent.
func (n *nodeCgroups) Parent(pod *corev1.Pod) string {
	if !n.perQOS {
		return n.m.Parent(n.root)
	}
	return n.m.Parent(n.podName(pod))
}

// EnsurePod makes the pod's cgroup with the pod's limits, or adopts and updates the one
// there; a burstable pod's CPU request is added to its QoS cgroup's shares (again when a
// resize changes it).
func (n *nodeCgroups) EnsurePod(ctx context.Context, pod *corev1.Pod) error {
	if !n.perQOS {
		return nil
	}
	qos := criconfig.QOSClass(pod)
	r := cgroups.PodResources(pod, qos, true, cfsPeriod, n.pidsLimit, n.hugePageSizes)
	if err := n.ensure(ctx, n.podName(pod), r); err != nil {
		return err
	}
	cpu := func(p *corev1.Pod) int64 {
		req := resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{})
		return req.Cpu().MilliValue()
	}
	n.mu.Lock()
	old, known := n.pods[pod.UID]
	n.pods[pod.UID] = pod
	n.mu.Unlock()
	if qos == corev1.PodQOSBurstable && (!known || cpu(old) != cpu(pod)) {
		return n.updateQOS(ctx)
	}
	return nil
}

// updateQOS sets the QoS cgroups' CPU shares as the kubelet does: besteffort the minimum,
// burstable the sum of its pods' CPU requests. (The kubelet's memory reservations on QoS
// cgroups, qosReserved behind the QOSReserved feature gate, are not made.)
func (n *nodeCgroups) updateQOS(ctx context.Context) error {
	n.mu.Lock()
	var milli int64
	for _, pod := range n.pods {
		if criconfig.QOSClass(pod) == corev1.PodQOSBurstable {
			req := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
			milli += req.Cpu().MilliValue()
		}
	}
	n.mu.Unlock()
	burstable := cgroups.MilliCPUToShares(milli)
	bestEffort := cgroups.MilliCPUToShares(0)
	if err := n.ensure(ctx, n.kubepods.Child(burstableCgroup), cgroups.Resources{CPUShares: &burstable}); err != nil {
		return err
	}
	return n.ensure(ctx, n.kubepods.Child(bestEffortCgroup), cgroups.Resources{CPUShares: &bestEffort})
}

// podCgroups lists the pod cgroups there are, by pod UID.
func (n *nodeCgroups) podCgroups() (map[types.UID]cgroups.Name, error) {
	out := map[types.UID]cgroups.Name{}
	for _, parent := range []cgroups.Name{n.kubepods, n.kubepods.Child(burstableCgroup), n.kubepods.Child(bestEffortCgroup)} {
		children, err := n.m.Children(parent)
		if err != nil {
			return nil, err
		}
		for _, c := range children {
			if uid, ok := strings.CutPrefix(c, podCgroupPrefix); ok && uid != "" {
				out[types.UID(uid)] = parent.Child(c)
			}
		}
	}
	return out, nil
}

// cleanup removes the cgroups of pods no worker runs (active: the workers' pods): a pod
// that is gone, terminated, or was never this process's (podsync restarted). As the
// kubelet's housekeeping does, every process still in the cgroup of such a pod is killed
// first (a process that escaped its container's stop: a daemon that double-forked, a
// process a container's tools put into the pod's cgroup): for a pod this process ran,
// once its worker has ended; for a pod found only in the cgroup tree (it ended while
// podsync was down), once orphaned says so — podsync's Service.RuntimeRemovable, which is
// false for every pod until all the pod sources have reported, as the kubelet kills an
// orphaned pod cgroup's processes only then (a pod found after a restart may just not
// have its worker yet). A cgroup with processes left is kept and tried again.
func (n *nodeCgroups) cleanup(ctx context.Context, active func() map[types.UID]bool, orphaned func() func(types.UID) bool) {
	// The cgroups first, then the pods: a pod whose worker starts in between is active, and
	// one whose cgroup is made after the listing is not in it.
	found, err := n.podCgroups()
	if err != nil {
		n.log.Warn("list pod cgroups", "err", err)
		return
	}
	running := active()
	removedBurstable := false
	for uid, name := range found {
		if running[uid] {
			continue
		}
		n.mu.Lock()
		_, ran := n.pods[uid]
		n.mu.Unlock()
		// Asked again just before the kill: a pod whose worker started since the listing
		// keeps its processes.
		if (ran && !active()[uid]) || (!ran && orphaned()(uid)) {
			killed, err := n.m.Kill(ctx, name)
			if len(killed) > 0 {
				n.log.Info("killed processes left in a gone pod's cgroup", "uid", uid, "cgroup", n.m.Parent(name), "pids", killed)
			}
			if err != nil {
				n.log.Warn("kill processes left in a gone pod's cgroup", "uid", uid, "cgroup", n.m.Parent(name), "err", err)
				continue
			}
		}
		err := n.removePod(ctx, name)
		if errors.Is(err, cgroups.ErrNotEmpty) {
			n.log.Debug("pod cgroup kept: processes left", "uid", uid, "cgroup", n.m.Parent(name), "err", err)
			continue
		}
		if err != nil {
			n.log.Warn("remove pod cgroup", "uid", uid, "cgroup", n.m.Parent(name), "err", err)
			continue
		}
		n.log.Info("pod cgroup removed", "uid", uid, "cgroup", n.m.Parent(name))
		n.mu.Lock()
		if p := n.pods[uid]; p != nil && criconfig.QOSClass(p) == corev1.PodQOSBurstable {
			removedBurstable = true
		}
		delete(n.pods, uid)
		n.mu.Unlock()
	}
	n.mu.Lock()
	for uid := range n.pods {
		if _, ok := found[uid]; !ok && !running[uid] {
			delete(n.pods, uid)
			removedBurstable = true
		}
	}
	n.mu.Unlock()
	if removedBurstable {
		if err := n.updateQOS(ctx); err != nil {
			n.log.Warn("update QoS cgroups", "err", err)
		}
	}
}

// removePod removes a pod's cgroup. With the cgroupfs driver, child cgroups left in it
// with no process in them or below them go first: the runtime's cgroups of the pod's
// containers, which runc does not always remove (a task whose shim was killed, or a start
// containerd abandoned across its restart; the fault suite left such a child under most
// pods, and the pod's cgroup was kept for good). The kubelet's removal of a pod cgroup
// takes the whole tree too. Each removal is Remove's own: one with a process, or with a
// child of its own, is refused, and the kernel refuses to remove a cgroup a process has
// joined meanwhile.
func (n *nodeCgroups) removePod(ctx context.Context, name cgroups.Name) error {
	err := n.m.Remove(ctx, name)
	var ne *cgroups.NotEmptyError
	if n.m.Driver() != cgroups.Cgroupfs || !errors.As(err, &ne) || len(ne.PIDs) > 0 || len(ne.Children) == 0 {
		return err
	}
	for _, child := range ne.Children {
		if err := n.m.Remove(ctx, name.Child(child)); err != nil {
			return err
		}
		n.log.Debug("removed a child cgroup left in a gone pod's cgroup", "cgroup", n.m.Parent(name.Child(child)))
	}
	return n.m.Remove(ctx, name)
}

// Sweep is the loop that removes, every cgroupCleanupPeriod until ctx ends, the cgroups of
// pods not among active's (the workers' pods: podworker.Manager.Active), killing what is
// left in them first (cleanup; orphaned: Service.RuntimeRemovable). It closes the cgroup
// manager when it ends; without QoS cgroups it only waits.
func (n *nodeCgroups) Sweep(active func() map[types.UID]bool, orphaned func() func(types.UID) bool) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		defer n.m.Close()
		if !n.perQOS {
			<-ctx.Done()
			return nil
		}
		t := time.NewTicker(cgroupCleanupPeriod)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
				n.cleanup(ctx, active, orphaned)
			}
		}
	}
}

// swapController reports whether the kernel controls swap in the pods' cgroup (the
// kubelet's check of its own): memory.swap.max there on cgroup v2,
// memory.memsw.limit_in_bytes on v1 (Path is under the memory hierarchy there).
func (n *nodeCgroups) swapController() bool {
	file := "memory.swap.max"
	if !n.m.Unified() {
		file = "memory.memsw.limit_in_bytes"
	}
	_, err := os.Stat(filepath.Join(n.m.Path(n.kubepods), file))
	return err == nil
}
