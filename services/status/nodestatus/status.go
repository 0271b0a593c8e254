package nodestatus

import (
	"cmp"
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilversion "k8s.io/apimachinery/pkg/util/version"
	nodeutil "k8s.io/component-helpers/node/util"
	"k8s.io/utils/ptr"

	podsyncv1 "github.com/unitlet/unitlet/proto/unitlet/podsync/v1"
)

// statusUpdateRetries is how many times one sync tries to write the status before it waits
// for the next tick (the kubelet's nodeStatusUpdateRetry).
const statusUpdateRetries = 5

// maxNamesPerImage is how many names of one image go into node.status.images (the
// kubelet's MaxNamesPerImageInNodeStatus).
const maxNamesPerImage = 5

// observation is everything a status computation reads from outside the Node object,
// gathered once per sync so that retries neither ask podsync again nor count its failures
// twice.
type observation struct {
	built    *corev1.Node
	buildErr error
	ready    readiness
	pressure map[corev1.NodeConditionType]corev1.NodeCondition
	images   []corev1.ContainerImage
	health   *runtimeInfo
	// volumesInUse is unitlet-volumes' answer; nil keeps the Node's as it is.
	volumesInUse *[]corev1.UniqueVolumeName
}

// runtimeInfo is the runtime's name, version, handlers and features from podsync's last
// answer (features nil from a podsync that predates them).
type runtimeInfo struct {
	runtimeName, runtimeVersion string
	handlers                    []*podsyncv1.RuntimeHandler
	features                    *podsyncv1.RuntimeFeatures
}

// observe asks the sources: Build, podsync, the services, the eviction service, the
// runtime's images.
func (c *Controller) observe(ctx context.Context) *observation {
	o := &observation{}
	o.built, o.buildErr = c.build()
	if o.buildErr == nil && o.built == nil {
		o.buildErr = fmt.Errorf("build returned no node")
	}
	o.ready = c.checkReadiness(ctx)
	if h := c.loop.lastHealth; h != nil && h.GetRuntimeName() != "" {
		o.health = &runtimeInfo{runtimeName: h.GetRuntimeName(), runtimeVersion: h.GetRuntimeVersion(), handlers: h.GetRuntimeHandlers(), features: h.GetFeatures()}
	}
	o.pressure = c.pressureConditions(ctx)
	o.images = c.nodeImages(ctx)
	if c.volumesInUse != nil {
		if names, err := c.volumesInUse(ctx); err != nil {
			// Kept as it is: dropping a volume from the list would let the attach/detach
			// controller detach it under a mount.
			c.log.Warn("list the volumes in use; the Node's volumesInUse kept as it is", "err", err)
		} else {
			o.volumesInUse = &names
		}
	}
	if c.loop.system == nil {
		c.loop.system = c.host.read()
	}
	return o
}

// nodeImages lists the runtime's images biggest first, at most maxImages of them (-1: all),
// each with at most maxNamesPerImage names, as the kubelet reports them. An error gives no
// images, as the kubelet's does.
func (c *Controller) nodeImages(ctx context.Context) []corev1.ContainerImage {
	if c.images == nil {
		return nil
	}
	list, err := c.images.Images(ctx)
	if err != nil {
		c.log.Warn("list images for node status", "err", err)
		return nil
	}
	list = slices.Clone(list)
	slices.SortStableFunc(list, func(a, b corev1.ContainerImage) int { return cmp.Compare(b.SizeBytes, a.SizeBytes) })
	if c.maxImages > -1 && int(c.maxImages) < len(list) {
		list = list[:c.maxImages]
	}
	var out []corev1.ContainerImage
	for _, img := range list {
		names := slices.Clone(img.Names)
		if len(names) > maxNamesPerImage {
			names = names[:maxNamesPerImage]
		}
		out = append(out, corev1.ContainerImage{Names: names, SizeBytes: img.SizeBytes})
	}
	return out
}

// apply computes the node's status from original and o. It returns the new node, the
// events its condition transitions call for, and whether anything but heartbeat times
// changed.
func (c *Controller) apply(original *corev1.Node, o *observation) (*corev1.Node, []string, bool) {
	node := original.DeepCopy()
	now := metav1.NewTime(c.clock.Now())

	labelsChanged := false
	for key, want := range map[string]string{corev1.LabelOSStable: runtime.GOOS, corev1.LabelArchStable: runtime.GOARCH} {
		if node.Labels[key] != want {
			if node.Labels == nil {
				node.Labels = map[string]string{}
			}
			node.Labels[key] = want
			labelsChanged = true
		}
	}

	if o.buildErr != nil {
		c.log.Warn("build node for status: keeping capacity and addresses as they are", "err", o.buildErr)
	} else {
		node.Status.Addresses = slices.Clone(o.built.Status.Addresses)
		node.Status.Capacity = mergeResources(node.Status.Capacity, o.built.Status.Capacity)
		node.Status.Allocatable = mergeResources(node.Status.Allocatable, o.built.Status.Allocatable)
		node.Status.NodeInfo.OperatingSystem = o.built.Status.NodeInfo.OperatingSystem
		node.Status.NodeInfo.Architecture = o.built.Status.NodeInfo.Architecture
		node.Status.NodeInfo.Swap = o.built.Status.NodeInfo.Swap.DeepCopy()
	}
	if node.Status.NodeInfo.OperatingSystem == "" {
		node.Status.NodeInfo.OperatingSystem = runtime.GOOS
	}
	if node.Status.NodeInfo.Architecture == "" {
		node.Status.NodeInfo.Architecture = runtime.GOARCH
	}

	info := &node.Status.NodeInfo
	if s := c.loop.system; s != nil {
		info.MachineID = s.machineID
		info.SystemUUID = s.systemUUID
		info.BootID = s.bootID
		info.KernelVersion = s.kernelVersion
		info.OSImage = s.osImage
	}
	if o.health != nil {
		info.ContainerRuntimeVersion = o.health.runtimeName + "://" + runtimeVersion(o.health.runtimeVersion)
		setRuntimeFeatures(node, o.health)
	}
	info.KubeletVersion = KubeletVersion()
	node.Status.DeclaredFeatures = DeclaredFeatures(info.KubeletVersion)
	node.Status.DaemonEndpoints.KubeletEndpoint.Port = c.port
	node.Status.Images = o.images
	if o.volumesInUse != nil {
		node.Status.VolumesInUse = *o.volumesInUse
	}

	var events []string
	for _, k := range pressureKinds {
		want := k.condition(o.pressure)
		var existed, changed bool
		node.Status.Conditions, existed, changed = setCondition(node.Status.Conditions, want, now)
		if !existed || changed {
			events = append(events, k.event(want.Status))
		}
	}

	ready := o.ready
	if missing := missingCapacity(node.Status.Capacity); len(missing) > 0 {
		ready.errs = append(ready.errs, fmt.Errorf("missing node capacity for resources: %s", strings.Join(missing, ", ")))
	}
	idx := slices.IndexFunc(node.Status.Conditions, func(cond corev1.NodeCondition) bool { return cond.Type == corev1.NodeReady })
	want, hold := readyCondition(ready, idx >= 0)
	if hold {
		node.Status.Conditions[idx].LastHeartbeatTime = now
	} else {
		var existed, changed bool
		node.Status.Conditions, existed, changed = setCondition(node.Status.Conditions, want, now)
		if existed && changed {
			if want.Status == corev1.ConditionTrue {
				events = append(events, "NodeReady")
			} else {
				events = append(events, "NodeNotReady")
			}
		}
	}

	return node, events, labelsChanged || statusChanged(&original.Status, &node.Status)
}

// mergeResources sets built's resources over existing: a resource someone else added (an
// extended resource) stays, a huge page size the machine no longer has goes.
func mergeResources(existing, built corev1.ResourceList) corev1.ResourceList {
	out := existing.DeepCopy()
	if out == nil {
		out = corev1.ResourceList{}
	}
	for name := range out {
		if _, ok := built[name]; !ok && strings.HasPrefix(string(name), corev1.ResourceHugePagesPrefix) {
			delete(out, name)
		}
	}
	for name, q := range built {
		out[name] = q.DeepCopy()
	}
	return out
}

// missingCapacity names the resources without which the kubelet never says Ready.
func missingCapacity(capacity corev1.ResourceList) []string {
	var out []string
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourcePods, corev1.ResourceEphemeralStorage} {
		if _, ok := capacity[name]; !ok {
			out = append(out, string(name))
		}
	}
	return out
}

// statusChanged compares two statuses ignoring the conditions' heartbeat times.
func statusChanged(a, b *corev1.NodeStatus) bool {
	if conditionsChanged(a.Conditions, b.Conditions) {
		return true
	}
	ac, bc := a.DeepCopy(), b.DeepCopy()
	ac.Conditions, bc.Conditions = nil, nil
	return !apiequality.Semantic.DeepEqual(ac, bc)
}

// syncNodeStatus is one tick of the status loop: observe once, then up to
// statusUpdateRetries tries to write; after the second failed try and each one after, the
// heartbeat connections are closed (the kubelet's onRepeatedHeartbeatFailure).
func (c *Controller) syncNodeStatus(ctx context.Context) error {
	o := c.loop.pending
	c.loop.pending = nil
	if o == nil {
		o = c.observe(ctx)
	}
	var err error
	for i := range statusUpdateRetries {
		if err = c.tryUpdateNodeStatus(ctx, o); err == nil {
			return nil
		}
		if apierrors.IsNotFound(err) || ctx.Err() != nil {
			return err
		}
		if i > 0 && c.onHeartbeatFailure != nil {
			c.onHeartbeatFailure()
		}
		c.log.Warn("update node status, will retry", "try", i+1, "err", err)
	}
	return fmt.Errorf("update node status: %d tries failed, last: %w", statusUpdateRetries, err)
}

// tryUpdateNodeStatus reads the node, computes its status and patches it when it changed or
// the report period passed. The node is read from the API server each time (the kubelet
// reads an informer's cache): the node lifecycle controller sets Ready to Unknown when the
// lease lapses, and a stale copy would hide that until the report period.
func (c *Controller) tryUpdateNodeStatus(ctx context.Context, o *observation) error {
	original, err := c.heartbeat.CoreV1().Nodes().Get(ctx, c.nodeName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("get node %s: %w", c.nodeName, err)
	}
	if !c.isRegistered() {
		c.setRegistered(original, nil)
	}
	node, events, changed := c.apply(original, o)
	c.setConditions(node.Status.Conditions)
	if !changed && c.clock.Since(c.loop.lastReport) < c.reportFrequency {
		return nil
	}
	updated, _, err := nodeutil.PatchNodeStatus(c.heartbeat.CoreV1(), types.NodeName(c.nodeName), original, node)
	c.metrics.statusUpdates.WithLabelValues(result(err)).Inc()
	if err != nil {
		return fmt.Errorf("patch node %s status: %w", c.nodeName, err)
	}
	c.wrote(updated, events)
	return nil
}

// wrote records a successful write of the node and the events it carried.
func (c *Controller) wrote(node *corev1.Node, events []string) {
	now := c.clock.Now()
	c.loop.lastReport = now
	c.mu.Lock()
	c.lastStatusUpdate = now
	if node != nil && node.UID != "" {
		c.nodeUID = node.UID
	}
	c.mu.Unlock()
	for _, e := range events {
		c.event(corev1.EventTypeNormal, e)
	}
}

func (c *Controller) setConditions(conds []corev1.NodeCondition) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.conditions = slices.Clone(conds)
}

// Run registers the node (retrying with backoff until it works, as the kubelet's
// registerWithAPIServer) unless registerNode is false, then computes and writes the
// node's status every nodeStatusUpdateFrequency after the previous sync ended (as the
// kubelet's sliding period). A node deleted from the API is registered
// again (the kubelet would need a restart). It returns nil when ctx is done.
func (c *Controller) Run(ctx context.Context) error {
	if c.recorder != nil {
		c.recorder.Eventf(c.nodeRef, corev1.EventTypeNormal, "Starting", "Starting kubelet.")
	}
	for {
		c.beat(loopStatus)
		if c.registerNode && !c.isRegistered() {
			if !c.register(ctx) {
				return nil
			}
		}
		if err := c.syncNodeStatus(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if apierrors.IsNotFound(err) && c.registerNode {
				c.log.Warn("node is gone from the API server, registering it again", "node", c.nodeName)
				c.setRegistered(nil, fmt.Errorf("node %s was deleted from the API server", c.nodeName))
				continue
			}
			c.log.Error("update node status", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-c.wake:
		case <-c.clock.After(c.updateFrequency):
		}
	}
}

// registerBackoff is the first and the longest wait between two registration attempts
// (the kubelet's).
const (
	registerFirstWait = 100 * time.Millisecond
	registerMaxWait   = 7 * time.Second
)

// register tries until the node is registered; false means ctx ended first.
func (c *Controller) register(ctx context.Context) bool {
	wait := registerFirstWait
	for {
		c.beat(loopStatus) // registration is the status loop's first round
		node, err := c.tryRegister(ctx)
		c.setRegistered(node, err)
		if err == nil {
			c.log.Info("registered node", "node", c.nodeName)
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		c.log.Warn("register node, will retry", "node", c.nodeName, "in", wait, "err", err)
		select {
		case <-ctx.Done():
			return false
		case <-c.clock.After(wait):
		}
		wait = min(2*wait, registerMaxWait)
	}
}

// tryRegister creates the Node with its status computed, or, when it exists, reconciles
// it. The observation made for the creation is kept for the status loop's first sync, so
// that podsync is asked once, not twice in a row.
func (c *Controller) tryRegister(ctx context.Context) (*corev1.Node, error) {
	o := c.observe(ctx)
	c.loop.pending = o
	if o.buildErr != nil {
		return nil, fmt.Errorf("build node: %w", o.buildErr)
	}
	if o.built.Name != c.nodeName {
		return nil, fmt.Errorf("build node: name %q is not the node name %q", o.built.Name, c.nodeName)
	}
	initial, events, _ := c.apply(o.built, o)
	created, err := c.client.CoreV1().Nodes().Create(ctx, initial, metav1.CreateOptions{})
	if err == nil {
		c.wrote(created, events)
		c.metrics.statusUpdates.WithLabelValues(resultSuccess).Inc()
		return created, nil
	}
	if !apierrors.IsAlreadyExists(err) && !apierrors.IsForbidden(err) {
		return nil, fmt.Errorf("create node %s: %w", c.nodeName, err)
	}
	// It exists (or creating is forbidden but it may exist): reconcile what we own.
	existing, getErr := c.client.CoreV1().Nodes().Get(ctx, c.nodeName, metav1.GetOptions{})
	if getErr != nil {
		return nil, fmt.Errorf("create node %s: %w; get existing node: %w", c.nodeName, err, getErr)
	}
	c.log.Info("node was registered before, reconciling it", "node", c.nodeName)
	reconciled := existing.DeepCopy()
	if !reconcileNode(o.built, reconciled) {
		return existing, nil
	}
	updated, _, err := nodeutil.PatchNodeStatus(c.client.CoreV1(), types.NodeName(c.nodeName), existing, reconciled)
	if err != nil {
		return nil, fmt.Errorf("reconcile existing node %s: %w", c.nodeName, err)
	}
	return updated, nil
}

// defaultLabels are the labels the kubelet keeps equal to what it would register with on
// a node that already exists. Other labels (a user's, or registration labels from the
// config, which the kubelet also applies only at creation) are left as they are, and so
// are taints: registerWithTaints applies only when the node is created.
var defaultLabels = []string{
	corev1.LabelHostname,
	corev1.LabelTopologyZone,
	corev1.LabelTopologyRegion,
	corev1.LabelFailureDomainBetaZone,
	corev1.LabelFailureDomainBetaRegion,
	corev1.LabelInstanceTypeStable,
	corev1.LabelInstanceType,
	corev1.LabelOSStable,
	corev1.LabelArchStable,
	corev1.LabelWindowsBuild,
	"beta.kubernetes.io/os",
	"beta.kubernetes.io/arch",
}

// attachDetachAnnotation says whether the attach/detach controller attaches this node's
// volumes (shared/nodeinfo sets it from enableControllerAttachDetach).
const attachDetachAnnotation = "volumes.kubernetes.io/controller-managed-attach-detach"

// reconcileNode brings an existing node in line with the one we would register, as the
// kubelet does: the attach/detach annotation as built, the default labels, capacity and
// allocatable where the node has none, and huge page sizes. It reports whether anything
// changed.
func reconcileNode(built, existing *corev1.Node) bool {
	changed := false

	want, wantSet := built.Annotations[attachDetachAnnotation]
	if have, haveSet := existing.Annotations[attachDetachAnnotation]; have != want || haveSet != wantSet {
		if wantSet {
			if existing.Annotations == nil {
				existing.Annotations = map[string]string{}
			}
			existing.Annotations[attachDetachAnnotation] = want
		} else {
			delete(existing.Annotations, attachDetachAnnotation)
		}
		changed = true
	}

	if existing.Labels == nil {
		existing.Labels = map[string]string{}
	}
	for _, key := range defaultLabels {
		v, ok := built.Labels[key]
		if !ok {
			continue
		}
		if existing.Labels[key] != v {
			existing.Labels[key] = v
			changed = true
		}
		if existing.Labels[key] == "" {
			delete(existing.Labels, key)
		}
	}

	if existing.Status.Capacity == nil {
		existing.Status.Capacity = built.Status.Capacity.DeepCopy()
		changed = changed || existing.Status.Capacity != nil
	}
	if existing.Status.Allocatable == nil {
		existing.Status.Allocatable = built.Status.Allocatable.DeepCopy()
		changed = changed || existing.Status.Allocatable != nil
	}
	if existing.Status.Capacity == nil {
		existing.Status.Capacity = corev1.ResourceList{}
	}
	if existing.Status.Allocatable == nil {
		existing.Status.Allocatable = corev1.ResourceList{}
	}
	for name, q := range built.Status.Capacity {
		if !strings.HasPrefix(string(name), corev1.ResourceHugePagesPrefix) {
			continue
		}
		if have, ok := existing.Status.Capacity[name]; !ok || have.Cmp(q) != 0 {
			existing.Status.Capacity[name] = q.DeepCopy()
			changed = true
		}
		a := built.Status.Allocatable[name]
		if have, ok := existing.Status.Allocatable[name]; !ok || have.Cmp(a) != 0 {
			existing.Status.Allocatable[name] = a.DeepCopy()
			changed = true
		}
	}
	for name := range existing.Status.Capacity {
		if _, ok := built.Status.Capacity[name]; !ok && strings.HasPrefix(string(name), corev1.ResourceHugePagesPrefix) {
			delete(existing.Status.Capacity, name)
			delete(existing.Status.Allocatable, name)
			changed = true
		}
	}
	return changed
}

// runtimeVersion is CRI Version's runtimeVersion as the kubelet writes it into nodeInfo: read
// as a semantic version, else as a generic one (numbers only), and printed without a "v"
// ("v2.4.2" is 2.4.2; Debian's "1.6.20~ds1" is 1.6.20); "Unknown" when it is neither.
func runtimeVersion(v string) string {
	parsed, err := utilversion.ParseSemantic(v)
	if err != nil {
		if parsed, err = utilversion.ParseGeneric(v); err != nil {
			return "Unknown"
		}
	}
	return parsed.String()
}

// setRuntimeFeatures writes the runtime's handlers and features into the Node's status as
// the kubelet does (status.runtimeHandlers, each with its recursive read-only and user
// namespace support; status.features.supplementalGroupsPolicy), when podsync told them.
// Admission, the scheduler and users read them: supplementalGroupsPolicy Strict is
// admitted only where the Node says the runtime honours it.
func setRuntimeFeatures(node *corev1.Node, h *runtimeInfo) {
	if h.features == nil {
		return // a podsync that predates them: the Node keeps what it has
	}
	node.Status.Features = &corev1.NodeFeatures{SupplementalGroupsPolicy: ptr.To(h.features.GetSupplementalGroupsPolicy())}
	node.Status.RuntimeHandlers = make([]corev1.NodeRuntimeHandler, 0, len(h.handlers))
	for _, rh := range h.handlers {
		node.Status.RuntimeHandlers = append(node.Status.RuntimeHandlers, corev1.NodeRuntimeHandler{
			Name: rh.GetName(),
			Features: &corev1.NodeRuntimeHandlerFeatures{
				RecursiveReadOnlyMounts: ptr.To(rh.GetRecursiveReadOnlyMounts()),
				UserNamespaces:          ptr.To(rh.GetUserNamespaces()),
			},
		})
	}
}
