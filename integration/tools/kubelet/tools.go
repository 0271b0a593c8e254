//go:build tools

// Package kubelet pins the kubelet the harness builds for the side-by-side benchmark
// (`make bench-pods`). It is its own module, apart from ../kube, so that building the
// kubelet changes nothing of the control plane's build or cache.
package kubelet

import (
	_ "k8s.io/kubernetes/cmd/kubelet"
)
