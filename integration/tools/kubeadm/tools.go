//go:build tools

// Package kubeadm pins the kubeadm the harness builds for the tests of a node that kubeadm
// joins (the unitlet-kubeadm package). Its own module, apart from ../kube, so that its
// dependencies (kubeadm's alone) change nothing of the control plane's build or cache.
package kubeadm

import (
	_ "k8s.io/kubernetes/cmd/kubeadm"
)
