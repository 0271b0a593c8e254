package criconfig

import corev1 "k8s.io/api/core/v1"

// Annotations the kubelet's pod sources put on pods.
const (
	// annotationConfigSource names where a pod came from: "api", "file" or "http".
	annotationConfigSource = "kubernetes.io/config.source"
	// annotationConfigMirror marks a mirror pod, the API's copy of a static pod.
	annotationConfigMirror = "kubernetes.io/config.mirror"
	sourceAPIServer        = "api"
)

// SystemCriticalPriority is the lowest priority of a critical pod (system-cluster-critical
// and system-node-critical are at or above it).
const SystemCriticalPriority = 2 * 1000000000

// IsStaticPod tells a pod from a file or URL source: one whose source annotation is set to
// anything but the API server.
func IsStaticPod(pod *corev1.Pod) bool {
	source, ok := pod.Annotations[annotationConfigSource]
	return ok && source != sourceAPIServer
}

// IsMirrorPod tells the API's copy of a static pod.
func IsMirrorPod(pod *corev1.Pod) bool {
	_, ok := pod.Annotations[annotationConfigMirror]
	return ok
}

// IsCriticalPod is the kubelet's notion: static, mirror, or of system-critical priority.
func IsCriticalPod(pod *corev1.Pod) bool {
	if IsStaticPod(pod) || IsMirrorPod(pod) {
		return true
	}
	return pod.Spec.Priority != nil && *pod.Spec.Priority >= SystemCriticalPriority
}
