// Package admission decides, as the kubelet's predicate admit handler does, whether a pod
// may run on this node next to the pods already admitted, and gives the status written for
// a pod it turns away.
package admission

import (
	"fmt"
	"runtime"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	schedulingcorev1 "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"

	"github.com/unitlet/unitlet/services/podsync/criconfig"
)

// Reasons a pod is rejected with, the kubelet's words. A shortage of a resource is
// ReasonOutOfPrefix followed by the resource name, e.g. OutOfcpu, OutOfhugepages-2Mi.
const (
	ReasonInvalidNodeInfo                      = "InvalidNodeInfo"
	ReasonPodOSSelectorNodeLabelDoesNotMatch   = "PodOSSelectorNodeLabelDoesNotMatch"
	ReasonPodOSNotSupported                    = "PodOSNotSupported"
	ReasonSupplementalGroupsPolicyNotSupported = "SupplementalGroupsPolicyNotSupported"
	ReasonNodeName                             = "NodeName"
	ReasonNodeAffinity                         = "NodeAffinity"
	ReasonNodePorts                            = "NodePorts"
	ReasonTaintToleration                      = "TaintToleration"

	ReasonOutOfPrefix           = "OutOf"
	ReasonOutOfCPU              = "OutOfcpu"
	ReasonOutOfMemory           = "OutOfmemory"
	ReasonOutOfEphemeralStorage = "OutOfephemeral-storage"
	ReasonOutOfPods             = "OutOfpods"
)

// Descriptions of the scheduler predicates the kubelet reuses, quoted in messages as
// "Predicate <name> failed: <description>".
const (
	descNodeName     = "node(s) didn't match the requested node name"
	descNodeAffinity = "node(s) didn't match Pod's node affinity/selector"
	descNodePorts    = "node(s) didn't have free ports for the requested pod ports"
	descTaints       = "node(s) had taints that the pod didn't tolerate"
)

// Result is an admission verdict. Reason and Message are empty when Admit is true.
type Result struct {
	Admit   bool
	Reason  string
	Message string
	// Shortfall is set when a critical pod (static, mirror, or system priority) was
	// admitted although the node lacks resources for it: the kubelet does not reject such
	// a pod but preempts other pods to make room, and the caller must do the same.
	Shortfall []Insufficient
}

// Insufficient is a resource the node has too little of for a pod, in the units the
// scheduler counts (millicores for cpu, bytes or counts for the rest).
type Insufficient struct {
	Resource  corev1.ResourceName
	Requested int64
	Used      int64
	Capacity  int64
}

// Message is the kubelet's wording of the shortage.
func (i Insufficient) Message() string {
	return fmt.Sprintf("Node didn't have enough resource: %s, requested: %d, used: %d, capacity: %d",
		i.Resource, i.Requested, i.Used, i.Capacity)
}

// Reason is the rejection reason for the shortage: OutOf<resource>.
func (i Insufficient) Reason() string {
	return ReasonOutOfPrefix + string(i.Resource)
}

// Missing is how much of the resource must be freed for the pod to fit.
func (i Insufficient) Missing() int64 {
	return i.Requested - (i.Capacity - i.Used)
}

// failure is one failed check: a shortage or a named predicate.
type failure struct {
	short     *Insufficient
	predicate string
	desc      string
}

func (f failure) result() Result {
	if f.short != nil {
		return Result{Reason: f.short.Reason(), Message: f.short.Message()}
	}
	return Result{Reason: f.predicate, Message: fmt.Sprintf("Predicate %s failed: %s", f.predicate, f.desc)}
}

// Admit decides whether pod may run on node next to active, the pods already admitted and
// not yet terminated (pod itself, matched by UID, is left out of them). maxPods caps the
// number of pods; when it is 0 or less, node.status.allocatable[pods] is the cap. sysctls
// is the node's sysctl allowlist (nil: the safe sysctls of the running kernel); rt is the
// container runtime, named when a pod asks for what it lacks.
//
// The checks and their order are the kubelet's: the pod's sysctls (SysctlForbidden),
// then the predicates: the pod's kubernetes.io/os label and
// spec.os against this node's OS, spec.securityContext.supplementalGroupsPolicy=Strict
// against node.status.features; then pod count and resource requests against allocatable
// less the active pods' requests, nodeSelector and required node affinity,
// spec.nodeName, host ports, and untolerated NoExecute taints. Only the first failure is
// reported. Mirror pods are always admitted (the kubelet admits the static pod, never its
// mirror); static pods skip the taint check; critical pods are not rejected for resources
// (see Result.Shortfall).
func Admit(pod *corev1.Pod, node *corev1.Node, active []*corev1.Pod, maxPods int, sysctls *Sysctls, rt Runtime) Result {
	if criconfig.IsMirrorPod(pod) {
		return Result{Admit: true}
	}
	if r := sysctls.check(pod); r != nil {
		return *r
	}
	if node == nil {
		return Result{Reason: ReasonInvalidNodeInfo, Message: "Kubelet cannot get node info."}
	}

	// Checks that preempting other pods could not fix come first.
	if os, ok := pod.Labels[corev1.LabelOSStable]; ok && os != runtime.GOOS {
		// The kubelet compares with its own OS whatever the node's label says: it
		// corrects a missing or wrong label on its next status update.
		return Result{
			Reason:  ReasonPodOSSelectorNodeLabelDoesNotMatch,
			Message: "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label",
		}
	}
	if pod.Spec.OS != nil && string(pod.Spec.OS.Name) != runtime.GOOS {
		return Result{
			Reason:  ReasonPodOSNotSupported,
			Message: "Failed to admit pod as the OS field doesn't match node OS",
		}
	}
	if needsStrictSupplementalGroups(pod) && !nodeSupportsStrictSupplementalGroups(node) {
		return Result{
			Reason:  ReasonSupplementalGroupsPolicyNotSupported,
			Message: fmt.Sprintf("SupplementalGroupsPolicy=%s is not supported in this node", corev1.SupplementalGroupsPolicyStrict),
		}
	}

	if r := rt.Host.refuses(pod); r != nil {
		return *r
	}
	if f, why := unsupported(pod, rt); f != "" {
		return Result{Reason: ReasonUnsupportedPodSpec, Message: fmt.Sprintf("Failed to admit pod: %s: %s by this node (unitlet)", f, why)}
	}

	others := make([]*corev1.Pod, 0, len(active))
	for _, p := range active {
		if p != nil && p.UID != pod.UID {
			others = append(others, p)
		}
	}

	failures := generalChecks(pod, node, others, maxPods)
	if len(failures) == 0 {
		return Result{Admit: true}
	}
	if criconfig.IsCriticalPod(pod) {
		var shortfall []Insufficient
		var rest []failure
		for _, f := range failures {
			if f.short != nil {
				shortfall = append(shortfall, *f.short)
			} else {
				rest = append(rest, f)
			}
		}
		if len(rest) == 0 {
			return Result{Admit: true, Shortfall: shortfall}
		}
		failures = rest
	}
	return failures[0].result()
}

// generalChecks runs the scheduler predicates the kubelet reuses, in its order, and
// returns every failure.
func generalChecks(pod *corev1.Pod, node *corev1.Node, others []*corev1.Pod, maxPods int) []failure {
	var failures []failure
	for _, s := range fitResources(pod, node, others, maxPods) {
		failures = append(failures, failure{short: &s})
	}
	if ok, _ := nodeaffinity.GetRequiredNodeAffinity(pod).Match(node); !ok {
		failures = append(failures, failure{predicate: ReasonNodeAffinity, desc: descNodeAffinity})
	}
	if pod.Spec.NodeName != "" && pod.Spec.NodeName != node.Name {
		failures = append(failures, failure{predicate: ReasonNodeName, desc: descNodeName})
	}
	if portsConflict(pod, others) {
		failures = append(failures, failure{predicate: ReasonNodePorts, desc: descNodePorts})
	}
	if !criconfig.IsStaticPod(pod) {
		_, untolerated := schedulingcorev1.FindMatchingUntoleratedTaint(logr.Discard(), node.Spec.Taints, pod.Spec.Tolerations,
			func(t *corev1.Taint) bool { return t.Effect == corev1.TaintEffectNoExecute },
			false) // TaintTolerationComparisonOperators is alpha and off in the kubelet
		if untolerated {
			failures = append(failures, failure{predicate: ReasonTaintToleration, desc: descTaints})
		}
	}
	return failures
}

func needsStrictSupplementalGroups(pod *corev1.Pod) bool {
	sc := pod.Spec.SecurityContext
	return sc != nil && sc.SupplementalGroupsPolicy != nil && *sc.SupplementalGroupsPolicy == corev1.SupplementalGroupsPolicyStrict
}

func nodeSupportsStrictSupplementalGroups(node *corev1.Node) bool {
	f := node.Status.Features
	return f != nil && f.SupplementalGroupsPolicy != nil && *f.SupplementalGroupsPolicy
}

// Reject is the status the kubelet writes for a pod it turned away: phase Failed, the
// reason, the message prefixed "Pod was rejected: ", and the pod's QoS class.
func Reject(pod *corev1.Pod, r Result) corev1.PodStatus {
	return corev1.PodStatus{
		Phase:    corev1.PodFailed,
		Reason:   r.Reason,
		Message:  "Pod was rejected: " + r.Message,
		QOSClass: criconfig.QOSClass(pod),
	}
}
