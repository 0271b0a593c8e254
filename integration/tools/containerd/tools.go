//go:build tools

// Package tools pins the containerd 2.x the harness runs when a stack asks for it
// (integration/harness/runtime.go, runtime version "2"): the daemon, its runc shim and ctr
// (the harness imports its test images with it), built from containerd's own module; runc
// is integration/tools/runc's.
package tools

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/v2/cmd/ctr"
)
