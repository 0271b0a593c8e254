//go:build tools

// Package tools pins the runc the containerd 2.x stack runs (integration/harness, runtime
// version "2"), built from runc's own module with seccomp: Debian 12's runc 1.1 has no
// idmapped mounts, so containerd 2.x reports no user namespace support with it.
package tools

import (
	_ "github.com/opencontainers/runc"
)
