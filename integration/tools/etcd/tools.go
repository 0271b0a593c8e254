//go:build tools

// Package etcd pins the etcd server the harness builds.
package etcd

import _ "go.etcd.io/etcd/server/v3"
