package nodeinfo

import corev1 "k8s.io/api/core/v1"

// Pressure is one of the node's pressure conditions with the kubelet's reasons and
// messages for each status: what unitlet-eviction reports and unitlet-status writes.
type Pressure struct {
	Type                      corev1.NodeConditionType
	OKReason, OKMessage       string
	UnderReason, UnderMessage string
}

// Pressures are MemoryPressure, DiskPressure and PIDPressure, in that order.
var Pressures = []Pressure{{
	Type:     corev1.NodeMemoryPressure,
	OKReason: "KubeletHasSufficientMemory", OKMessage: "kubelet has sufficient memory available",
	UnderReason: "KubeletHasInsufficientMemory", UnderMessage: "kubelet has insufficient memory available",
}, {
	Type:     corev1.NodeDiskPressure,
	OKReason: "KubeletHasNoDiskPressure", OKMessage: "kubelet has no disk pressure",
	UnderReason: "KubeletHasDiskPressure", UnderMessage: "kubelet has disk pressure",
}, {
	Type:     corev1.NodePIDPressure,
	OKReason: "KubeletHasSufficientPID", OKMessage: "kubelet has sufficient PID available",
	UnderReason: "KubeletHasInsufficientPID", UnderMessage: "kubelet has insufficient PID available",
}}
