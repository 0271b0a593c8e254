// Package nodeshutdown is graceful node shutdown, as the kubelet's shutdown manager does
// it: a logind delay inhibitor held while the node runs, and on logind's
// PrepareForShutdown the pods ended in priority order, each group within its budget,
// before the inhibitor is let go and the machine goes on shutting down.
package nodeshutdown

import (
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	v1beta1 "k8s.io/kubelet/config/v1beta1"
)

// The priorities the kubelet splits shutdownGracePeriod at: pods below
// SystemCriticalPriority get shutdownGracePeriod less shutdownGracePeriodCriticalPods,
// critical pods the rest.
const (
	// DefaultPriority is a pod's priority when it has none (the scheduling API's
	// DefaultPriorityWhenNoDefaultClassExists).
	DefaultPriority int32 = 0
	// SystemCriticalPriority is the lowest priority of system-cluster-critical and
	// system-node-critical pods.
	SystemCriticalPriority int32 = 2000000000
)

// Group is a priority group: the pods from Priority up to the next group's priority, and
// how long they are given to end.
type Group struct {
	Priority int32
	Budget   time.Duration
}

// Groups is the priority groups of a configuration, lowest priority first, or none when
// graceful shutdown is off. shutdownGracePeriodByPodPriority is used when set; otherwise
// shutdownGracePeriod and shutdownGracePeriodCriticalPods make two groups, the kubelet's
// split: everything below SystemCriticalPriority, then the critical pods. unitlet-config
// has already refused the combinations the kubelet refuses.
func Groups(kc *v1beta1.KubeletConfiguration) []Group {
	var out []Group
	if len(kc.ShutdownGracePeriodByPodPriority) > 0 {
		for _, p := range kc.ShutdownGracePeriodByPodPriority {
			out = append(out, Group{Priority: p.Priority, Budget: time.Duration(p.ShutdownGracePeriodSeconds) * time.Second})
		}
	} else {
		period, critical := kc.ShutdownGracePeriod.Duration, kc.ShutdownGracePeriodCriticalPods.Duration
		if period <= 0 || critical > period {
			return nil
		}
		out = []Group{
			{Priority: DefaultPriority, Budget: (period - critical).Truncate(time.Second)},
			{Priority: SystemCriticalPriority, Budget: critical.Truncate(time.Second)},
		}
	}
	slices.SortStableFunc(out, func(a, b Group) int {
		switch {
		case a.Priority < b.Priority:
			return -1
		case a.Priority > b.Priority:
			return 1
		}
		return 0
	})
	return out
}

// Total is the time all groups may take together: what logind's InhibitDelayMaxSec must
// allow.
func Total(groups []Group) time.Duration {
	var sum time.Duration
	for _, g := range groups {
		sum += g.Budget
	}
	return sum
}

// podGroup is the index of the group a pod belongs to: the group with the highest priority
// not above the pod's; a pod below every group goes to the first, as the kubelet places it.
func podGroup(groups []Group, pod *corev1.Pod) int {
	var prio int32
	if pod.Spec.Priority != nil {
		prio = *pod.Spec.Priority
	}
	i := 0
	for j, g := range groups {
		if g.Priority <= prio {
			i = j
		}
	}
	return i
}

// byGroup sorts pods into their groups, in the groups' order.
func byGroup(groups []Group, pods []*corev1.Pod) [][]*corev1.Pod {
	out := make([][]*corev1.Pod, len(groups))
	for _, p := range pods {
		i := podGroup(groups, p)
		out[i] = append(out[i], p)
	}
	return out
}

// podGrace is the grace period a pod is stopped with: its group's budget, or its own
// terminationGracePeriodSeconds when that is shorter.
func podGrace(g Group, pod *corev1.Pod) int64 {
	grace := int64(g.Budget / time.Second)
	if t := pod.Spec.TerminationGracePeriodSeconds; t != nil && *t <= grace {
		grace = *t
	}
	return grace
}
