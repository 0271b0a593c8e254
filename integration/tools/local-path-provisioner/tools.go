//go:build tools

// Package tools pins the local-path-provisioner the harness runs
// (integration/harness/localpath.go): dynamic provisioning of node-local persistent
// volumes, whose helper pods run on the stack's unitlet node.
package tools

import _ "github.com/rancher/local-path-provisioner"
