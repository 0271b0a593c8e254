//go:build unix

package lifecycle

import (
	"net"
	"syscall"
)

// Dialer returns the dialer for probe and hook connections. Its sockets linger for one
// second on close, so that probing often leaves no pile of TIME_WAIT sockets behind.
func Dialer() *net.Dialer {
	return &net.Dialer{
		Control: func(_, _ string, c syscall.RawConn) error {
			var serr error
			err := c.Control(func(fd uintptr) {
				serr = syscall.SetsockoptLinger(int(fd), syscall.SOL_SOCKET, syscall.SO_LINGER, &syscall.Linger{Onoff: 1, Linger: 1})
			})
			if err != nil {
				return err
			}
			return serr
		},
	}
}
