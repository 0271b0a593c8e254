package admission

import (
	corev1 "k8s.io/api/core/v1"
)

// podQOS is the pod's QoS class: status.qosClass where already set, else computed from
// cpu and memory requests and limits (pod-level resources where the pod has them, else
// those of its app and init containers).
func podQOS(pod *corev1.Pod) corev1.PodQOSClass {
	if pod.Status.QOSClass != "" {
		return pod.Status.QOSClass
	}
	requests := corev1.ResourceList{}
	limits := corev1.ResourceList{}
	guaranteed := true
	if pod.Spec.Resources != nil {
		sumPositive(requests, pod.Spec.Resources.Requests)
		if len(pod.Spec.Resources.Limits) > 0 {
			if sumPositive(limits, pod.Spec.Resources.Limits) != 2 {
				guaranteed = false
			}
		}
	} else {
		containers := append(append([]corev1.Container(nil), pod.Spec.Containers...), pod.Spec.InitContainers...)
		for _, c := range containers {
			sumPositive(requests, c.Resources.Requests)
			if sumPositive(limits, c.Resources.Limits) != 2 {
				guaranteed = false
			}
		}
	}
	if len(requests) == 0 && len(limits) == 0 {
		return corev1.PodQOSBestEffort
	}
	if guaranteed {
		for name, req := range requests {
			if lim, ok := limits[name]; !ok || lim.Cmp(req) != 0 {
				guaranteed = false
				break
			}
		}
	}
	if guaranteed && len(requests) == len(limits) {
		return corev1.PodQOSGuaranteed
	}
	return corev1.PodQOSBurstable
}

// sumPositive adds the positive cpu and memory quantities of list into into, and returns
// how many of the two list had.
func sumPositive(into, list corev1.ResourceList) int {
	n := 0
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		q, ok := list[name]
		if !ok || q.Sign() <= 0 {
			continue
		}
		n++
		sum := q.DeepCopy()
		if prev, ok := into[name]; ok {
			sum.Add(prev)
		}
		into[name] = sum
	}
	return n
}
