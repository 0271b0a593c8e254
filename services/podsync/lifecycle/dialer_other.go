//go:build !unix

package lifecycle

import "net"

// Dialer returns the dialer for probe and hook connections.
func Dialer() *net.Dialer { return &net.Dialer{} }
