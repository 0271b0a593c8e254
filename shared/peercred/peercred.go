// Package peercred identifies the process at the other end of a Unix socket from the kernel's
// records of the connection (SO_PEERCRED, SO_PEERGROUPS), for gRPC: transport credentials
// that attach the caller's uid, gid, supplementary groups and pid to every call, and an
// authorizer where each RPC names the callers it admits.
package peercred

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// AuthInfo is the peer's credentials as the kernel recorded them when it connected. PID is
// for messages only: a process can exit and its PID be reused while the connection lives,
// so nothing is decided by it.
type AuthInfo struct {
	credentials.CommonAuthInfo
	UID    uint32
	GID    uint32
	Groups []uint32 // supplementary groups
	PID    int32
}

// AuthType implements credentials.AuthInfo.
func (AuthInfo) AuthType() string { return "peercred" }

// FromContext returns the credentials of the caller of the RPC served under ctx.
func FromContext(ctx context.Context) (AuthInfo, bool) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return AuthInfo{}, false
	}
	info, ok := p.AuthInfo.(AuthInfo)
	return info, ok
}

// NewCredentials returns transport credentials for Unix sockets: the server learns who
// called, the client learns who serves. Nothing is encrypted: the connection never leaves the
// host's kernel (so gRPC is told it is private), and the socket's file mode and the authorizer
// are the protection.
func NewCredentials() credentials.TransportCredentials { return creds{} }

type creds struct{}

func (creds) ClientHandshake(_ context.Context, _ string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	info, err := Of(conn)
	if err != nil {
		return nil, nil, err
	}
	return conn, info, nil
}

func (creds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	info, err := Of(conn)
	if err != nil {
		return nil, nil, err
	}
	return conn, info, nil
}

func (creds) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "peercred"}
}

func (c creds) Clone() credentials.TransportCredentials { return c }

func (creds) OverrideServerName(string) error { return nil }

// Of reads the peer credentials of a Unix socket connection.
func Of(conn net.Conn) (AuthInfo, error) {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return AuthInfo{}, fmt.Errorf("peer credentials: %T is not a socket", conn)
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return AuthInfo{}, fmt.Errorf("peer credentials: %w", err)
	}
	var cred *unix.Ucred
	var groups []uint32
	var credErr, groupsErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
		groups, groupsErr = peerGroups(int(fd))
	}); err != nil {
		return AuthInfo{}, fmt.Errorf("peer credentials: %w", err)
	}
	if credErr != nil {
		return AuthInfo{}, fmt.Errorf("peer credentials: SO_PEERCRED: %w", credErr)
	}
	if groupsErr != nil {
		return AuthInfo{}, fmt.Errorf("peer credentials: SO_PEERGROUPS (Linux 4.13 or later): %w", groupsErr)
	}
	if cred == nil {
		return AuthInfo{}, errors.New("peer credentials: none recorded")
	}
	return AuthInfo{
		CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity},
		UID:            cred.Uid,
		GID:            cred.Gid,
		Groups:         groups,
		PID:            cred.Pid,
	}, nil
}

// peerGroups reads SO_PEERGROUPS: the supplementary groups the peer had when it connected
// (or listened), kept with the socket. A buffer too small fails with ERANGE and the length
// needed, which the second try uses.
func peerGroups(fd int) ([]uint32, error) {
	buf := make([]uint32, 32)
	for try := 0; ; try++ {
		size := uint32(len(buf) * 4)
		_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_PEERGROUPS,
			uintptr(unsafe.Pointer(unsafe.SliceData(buf))), uintptr(unsafe.Pointer(&size)), 0)
		switch {
		case errno == 0:
			return buf[:size/4], nil
		case errno == unix.ERANGE && try == 0:
			buf = make([]uint32, size/4+1)
		default:
			return nil, errno
		}
	}
}
