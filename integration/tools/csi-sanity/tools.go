//go:build tools

// Package tools pins csi-sanity, the CSI spec's conformance suite from csi-test (the
// library the kubelet's own CSI tests use), which integration/csidriver's TestCSISanity
// runs against the harness's CSI test driver. Built on its own (GOWORK=off) so that its
// test framework's dependencies never reach the workspace's.
package tools

import _ "github.com/kubernetes-csi/csi-test/v5/cmd/csi-sanity"
