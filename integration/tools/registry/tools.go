//go:build tools

// Package tools pins the image registry the harness runs (integration/harness/registry.go):
// the distribution project's registry, the reference implementation of the OCI
// distribution API, with TLS and htpasswd authentication as a private registry has.
package tools

import _ "github.com/distribution/distribution/v3/cmd/registry"
