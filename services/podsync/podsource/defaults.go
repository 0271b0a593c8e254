package podsource

import (
	corev1 "k8s.io/api/core/v1"
	k8sv1 "k8s.io/kubernetes/pkg/apis/core/v1"
)

// applyAPIDefaults fills in what the API server's defaulting would for a v1 Pod, with the
// API's own defaulting functions: the kubelet's decoder applies the same ones to a static
// pod. Static pods never pass through the API server, so without this a manifest that
// leaves fields out would run differently from the same pod created through the API.
func applyAPIDefaults(pod *corev1.Pod) {
	k8sv1.SetObjectDefaults_Pod(pod)
}
