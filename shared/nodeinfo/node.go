package nodeinfo

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"net/netip"
	"runtime"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/cpuset"
	"k8s.io/utils/ptr"
)

// Identity is who the node is, as the config service settles it.
type Identity struct {
	// Name is the Node object's name.
	Name string
	// Hostname is the kubernetes.io/hostname label and the Hostname address; Name when empty.
	Hostname string
	// IPs are the node's InternalIP addresses, primary first.
	IPs []string
	// Labels are added to the default labels, and win over them.
	Labels map[string]string
	// Taints are the taints the node registers with (registerWithTaints included).
	Taints []corev1.Taint
}

// AttachDetachAnnotation tells the attach/detach controller that it, not the node agent,
// attaches volumes to this node.
const AttachDetachAnnotation = "volumes.kubernetes.io/controller-managed-attach-detach"

// Label keys the kubelet has set since before the kubernetes.io/os and arch labels went GA.
const (
	betaLabelOS   = "beta.kubernetes.io/os"
	betaLabelArch = "beta.kubernetes.io/arch"
)

// Node builds the Node that registers this machine: name, labels (the defaults
// kubernetes.io/hostname, kubernetes.io/os, kubernetes.io/arch and their beta forms, then
// id.Labels over them), taints, addresses, status.capacity (cpu, memory, pods,
// ephemeral-storage, hugepages-<size>) and status.allocatable = capacity - systemReserved -
// kubeReserved - hard eviction thresholds (memory.available for memory, nodefs.available
// for ephemeral-storage), with huge pages also taken from memory, never below zero.
// kc is used as given: defaulting (evictionHard, maxPods) is the config service's job.
func Node(kc *kubeletconfigv1beta1.KubeletConfiguration, id Identity, m Machine) (*corev1.Node, error) {
	if kc == nil {
		return nil, errors.New("build node: no kubelet configuration")
	}
	if id.Name == "" {
		return nil, errors.New("build node: identity name: required")
	}
	if errs := validation.IsDNS1123Subdomain(id.Name); len(errs) > 0 {
		return nil, fmt.Errorf("build node: identity name %q: %s", id.Name, strings.Join(errs, "; "))
	}
	hostname := id.Hostname
	if hostname == "" {
		hostname = id.Name
	}

	labels := map[string]string{
		corev1.LabelHostname:   hostname,
		corev1.LabelOSStable:   runtime.GOOS,
		corev1.LabelArchStable: runtime.GOARCH,
		betaLabelOS:            runtime.GOOS,
		betaLabelArch:          runtime.GOARCH,
	}
	for k, v := range id.Labels {
		labels[k] = v
	}
	if errs := metav1validation.ValidateLabels(labels, field.NewPath("metadata", "labels")); len(errs) > 0 {
		return nil, fmt.Errorf("build node %s: identity labels: %w", id.Name, errs.ToAggregate())
	}

	addresses, err := nodeAddresses(id.IPs, hostname)
	if err != nil {
		return nil, fmt.Errorf("build node %s: %w", id.Name, err)
	}

	capacity, err := machineCapacity(kc, m)
	if err != nil {
		return nil, fmt.Errorf("build node %s: %w", id.Name, err)
	}
	allocatable, err := Allocatable(kc, capacity)
	if err != nil {
		return nil, fmt.Errorf("build node %s: %w", id.Name, err)
	}

	node := &corev1.Node{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Node"},
		ObjectMeta: metav1.ObjectMeta{Name: id.Name, Labels: labels},
		Spec:       corev1.NodeSpec{ProviderID: kc.ProviderID},
		Status: corev1.NodeStatus{
			Capacity:    capacity,
			Allocatable: allocatable,
			Addresses:   addresses,
			NodeInfo: corev1.NodeSystemInfo{
				OperatingSystem: runtime.GOOS,
				Architecture:    runtime.GOARCH,
			},
		},
	}
	if m.SwapBytes > 0 {
		// The swap capacity, as the kubelet reports it (NodeSwap, GA); none without swap
		// (the API refuses a capacity of 0).
		node.Status.NodeInfo.Swap = &corev1.NodeSwapStatus{Capacity: ptr.To(m.SwapBytes)}
	}
	if len(id.Taints) > 0 {
		node.Spec.Taints = append([]corev1.Taint(nil), id.Taints...)
	}
	if kc.EnableControllerAttachDetach == nil || *kc.EnableControllerAttachDetach {
		node.Annotations = map[string]string{AttachDetachAnnotation: "true"}
	}
	return node, nil
}

// nodeAddresses gives one InternalIP per IP, then the Hostname address, as the kubelet does
// when no cloud provider reports addresses.
func nodeAddresses(ips []string, hostname string) ([]corev1.NodeAddress, error) {
	out := make([]corev1.NodeAddress, 0, len(ips)+1)
	for i, s := range ips {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("identity ips[%d] %q: not an IP address", i, s)
		}
		out = append(out, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: a.String()})
	}
	return append(out, corev1.NodeAddress{Type: corev1.NodeHostName, Address: hostname}), nil
}

// machineCapacity is status.capacity: the machine plus the pod limit, where podsPerCore, when
// set, lowers maxPods to podsPerCore times the whole cores.
func machineCapacity(kc *kubeletconfigv1beta1.KubeletConfiguration, m Machine) (corev1.ResourceList, error) {
	if kc.MaxPods < 0 {
		return nil, fmt.Errorf("maxPods %d: must not be negative", kc.MaxPods)
	}
	if kc.PodsPerCore < 0 {
		return nil, fmt.Errorf("podsPerCore %d: must not be negative", kc.PodsPerCore)
	}
	pods := int64(kc.MaxPods)
	if kc.PodsPerCore > 0 {
		pods = min(pods, m.CPUMilli/1000*int64(kc.PodsPerCore))
	}
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:              *resource.NewMilliQuantity(m.CPUMilli, resource.DecimalSI),
		corev1.ResourceMemory:           *resource.NewQuantity(m.MemoryBytes, resource.BinarySI),
		corev1.ResourcePods:             *resource.NewQuantity(pods, resource.DecimalSI),
		corev1.ResourceEphemeralStorage: *resource.NewQuantity(m.EphemeralStorageBytes, resource.BinarySI),
	}
	for size, bytes := range m.HugePages {
		q, err := resource.ParseQuantity(size)
		if err != nil || q.Sign() <= 0 {
			return nil, fmt.Errorf("machine huge page size %q: not a positive quantity", size)
		}
		name := corev1.ResourceName(corev1.ResourceHugePagesPrefix + q.String())
		capacity[name] = *resource.NewQuantity(bytes, resource.BinarySI)
	}
	return capacity, nil
}

// Allocatable is capacity less what the configuration keeps from pods: systemReserved,
// kubeReserved and the hard eviction thresholds for memory.available and nodefs.available
// (percentages taken of the capacity). Each resource is floored at zero; then every
// hugepages-<size> capacity is also taken from memory, floored at zero again.
func Allocatable(kc *kubeletconfigv1beta1.KubeletConfiguration, capacity corev1.ResourceList) (corev1.ResourceList, error) {
	systemReserved, kubeReserved, err := Reserved(kc)
	if err != nil {
		return nil, err
	}
	thresholds, err := parseEvictionHard(kc.EvictionHard)
	if err != nil {
		return nil, err
	}
	eviction := evictionReservation(thresholds, capacity)

	out := make(corev1.ResourceList, len(capacity))
	for name, c := range capacity {
		v := c.DeepCopy()
		for _, r := range []corev1.ResourceList{systemReserved, kubeReserved, eviction} {
			if q, ok := r[name]; ok {
				v.Sub(q)
			}
		}
		if v.Sign() < 0 {
			v.Set(0)
		}
		out[name] = v
	}
	for name, c := range capacity {
		if !strings.HasPrefix(string(name), corev1.ResourceHugePagesPrefix) {
			continue
		}
		mem := out[corev1.ResourceMemory]
		mem.Sub(c)
		if mem.Sign() < 0 {
			mem.Set(0)
		}
		out[corev1.ResourceMemory] = mem
	}
	return out, nil
}

// Reserved is systemReserved and kubeReserved as the kubelet applies them: with
// reservedSystemCPUs set, its CPU count is the system's CPU reservation and kubeReserved
// reserves no CPU.
func Reserved(kc *kubeletconfigv1beta1.KubeletConfiguration) (system, kube corev1.ResourceList, err error) {
	system, err = parseReserved("systemReserved", kc.SystemReserved)
	if err != nil {
		return nil, nil, err
	}
	kube, err = parseReserved("kubeReserved", kc.KubeReserved)
	if err != nil {
		return nil, nil, err
	}
	if kc.ReservedSystemCPUs != "" {
		cpus, err := cpuset.Parse(kc.ReservedSystemCPUs)
		if err != nil {
			return nil, nil, fmt.Errorf("reservedSystemCPUs %q: %w", kc.ReservedSystemCPUs, err)
		}
		if cpus.Size() > 0 {
			delete(kube, corev1.ResourceCPU)
			system[corev1.ResourceCPU] = *resource.NewQuantity(int64(cpus.Size()), resource.DecimalSI)
		}
	}
	return system, kube, nil
}

// PodsCgroupLimits is what the node-allocatable cgroup (kubepods) is limited to: the
// machine's capacity with its process IDs, less systemReserved and kubeReserved when
// enforceNodeAllocatable has "pods" (floored at zero), else the whole capacity. Unlike
// status.allocatable, the hard eviction thresholds stay inside: pods may use them, so that
// eviction acts before the cgroup's limit does (the kubelet's rule).
func PodsCgroupLimits(kc *kubeletconfigv1beta1.KubeletConfiguration, m Machine) (corev1.ResourceList, error) {
	capacity, err := machineCapacity(kc, m)
	if err != nil {
		return nil, err
	}
	delete(capacity, corev1.ResourcePods)
	delete(capacity, corev1.ResourceEphemeralStorage)
	if m.MaxPIDs > 0 {
		capacity[resourcePIDs] = *resource.NewQuantity(m.MaxPIDs, resource.DecimalSI)
	}
	if !slices.Contains(kc.EnforceNodeAllocatable, "pods") {
		return capacity, nil
	}
	system, kube, err := Reserved(kc)
	if err != nil {
		return nil, err
	}
	for name, c := range capacity {
		v := c.DeepCopy()
		for _, r := range []corev1.ResourceList{system, kube} {
			if q, ok := r[name]; ok {
				v.Sub(q)
			}
		}
		if v.Sign() < 0 {
			v.Set(0)
		}
		capacity[name] = v
	}
	return capacity, nil
}

// resourcePIDs is the reservable process-ID resource; it limits the pods' cgroup but is not
// part of the Node's capacity.
const resourcePIDs corev1.ResourceName = "pid"

// parseReserved reads a systemReserved/kubeReserved map; like the kubelet it accepts cpu,
// memory, ephemeral-storage and pid, and no negative quantity.
func parseReserved(fieldName string, m map[string]string) (corev1.ResourceList, error) {
	out := make(corev1.ResourceList, len(m))
	for _, k := range sortedKeys(m) {
		switch corev1.ResourceName(k) {
		case corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage, resourcePIDs:
		default:
			return nil, fmt.Errorf("%s[%s]: cannot reserve this resource (only cpu, memory, ephemeral-storage, pid)", fieldName, k)
		}
		q, err := resource.ParseQuantity(m[k])
		if err != nil {
			return nil, fmt.Errorf("%s[%s] %q: %w", fieldName, k, m[k], err)
		}
		if q.Sign() < 0 {
			return nil, fmt.Errorf("%s[%s] %q: must not be negative", fieldName, k, m[k])
		}
		out[corev1.ResourceName(k)] = q
	}
	return out, nil
}

// Eviction signals the kubelet accepts in evictionHard.
const (
	signalMemoryAvailable            = "memory.available"
	signalAllocatableMemoryAvailable = "allocatableMemory.available"
	signalNodeFsAvailable            = "nodefs.available"
	signalNodeFsInodesFree           = "nodefs.inodesFree"
	signalImageFsAvailable           = "imagefs.available"
	signalImageFsInodesFree          = "imagefs.inodesFree"
	signalContainerFsAvailable       = "containerfs.available"
	signalContainerFsInodesFree      = "containerfs.inodesFree"
	signalPIDAvailable               = "pid.available"
)

// knownSignal reports whether the kubelet accepts signal in evictionHard.
func knownSignal(signal string) bool {
	switch signal {
	case signalMemoryAvailable, signalAllocatableMemoryAvailable,
		signalNodeFsAvailable, signalNodeFsInodesFree,
		signalImageFsAvailable, signalImageFsInodesFree,
		signalContainerFsAvailable, signalContainerFsInodesFree,
		signalPIDAvailable:
		return true
	}
	return false
}

// threshold is one parsed eviction threshold: the signal falls below either quantity or
// percentage (a fraction in [0,1]) of capacity. Exactly one of the two is set.
type threshold struct {
	signal     string
	quantity   *resource.Quantity
	percentage float32
}

// parseEvictionHard parses an evictionHard map as the kubelet does: "N%" is a fraction of
// capacity ("0%" and "100%" switch the threshold off), anything else a positive quantity;
// an unknown signal is an error. The result is sorted by signal.
func parseEvictionHard(m map[string]string) ([]threshold, error) {
	var out []threshold
	for _, signal := range sortedKeys(m) {
		val := m[signal]
		if !knownSignal(signal) {
			return nil, fmt.Errorf("evictionHard[%s]: unsupported eviction signal", signal)
		}
		if pct, ok := strings.CutSuffix(val, "%"); ok {
			if val == "0%" || val == "100%" {
				continue
			}
			f, err := strconv.ParseFloat(pct, 32)
			if err != nil {
				return nil, fmt.Errorf("evictionHard[%s] %q: %w", signal, val, err)
			}
			frac := float32(f) / 100
			if frac < 0 || frac > 1 || math.IsNaN(float64(frac)) {
				return nil, fmt.Errorf("evictionHard[%s] %q: percentage must be between 0%% and 100%%", signal, val)
			}
			out = append(out, threshold{signal: signal, percentage: frac})
			continue
		}
		q, err := resource.ParseQuantity(val)
		if err != nil {
			return nil, fmt.Errorf("evictionHard[%s] %q: %w", signal, val, err)
		}
		if q.Sign() <= 0 {
			return nil, fmt.Errorf("evictionHard[%s] %q: must be positive", signal, val)
		}
		out = append(out, threshold{signal: signal, quantity: &q})
	}
	return out, nil
}

// value is the threshold as a quantity against capacity, truncated the kubelet's way.
func (t threshold) value(capacity resource.Quantity) resource.Quantity {
	if t.quantity != nil {
		return t.quantity.DeepCopy()
	}
	return *resource.NewQuantity(int64(float64(capacity.Value())*float64(t.percentage)), resource.BinarySI)
}

// evictionReservation is what the hard thresholds keep from pods: memory.available from
// memory, nodefs.available from ephemeral-storage.
func evictionReservation(thresholds []threshold, capacity corev1.ResourceList) corev1.ResourceList {
	out := corev1.ResourceList{}
	for _, t := range thresholds {
		var name corev1.ResourceName
		switch t.signal {
		case signalMemoryAvailable:
			name = corev1.ResourceMemory
		case signalNodeFsAvailable:
			name = corev1.ResourceEphemeralStorage
		default:
			continue
		}
		out[name] = t.value(capacity[name])
	}
	return out
}

func sortedKeys(m map[string]string) []string {
	return slices.Sorted(maps.Keys(m))
}
