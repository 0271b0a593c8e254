// Package bus dials unitlet services over their Unix sockets. Calls wait for the service to
// be ready instead of failing fast (a socket-activated service that is restarting answers a
// moment later), unary calls get a deadline when the caller set none, and a broken connection
// is re-established with backoff.
package bus

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/unitlet/unitlet/shared/peercred"
)

// Services are the unitlet services, in the order operators read about them.
var Services = []string{"config", "certs", "podsync", "volumes", "eviction", "status"}

// DefaultTimeout bounds a unary call whose context has no deadline.
const DefaultTimeout = 10 * time.Second

// Dial returns a connection to service's socket in socketDir. It does not connect until the
// first call; calls wait for the service to be ready until their deadline.
func Dial(socketDir, service string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	return DialPath(SocketPath(socketDir, service), opts...)
}

// SocketPath is where the bus socket of service lives in socketDir: <service>.sock.
func SocketPath(socketDir, service string) string {
	return filepath.Join(socketDir, service+".sock")
}

// DialPath is Dial for a socket path.
func DialPath(path string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	all := append([]grpc.DialOption{
		grpc.WithTransportCredentials(peercred.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.WaitForReady(true)),
		grpc.WithChainUnaryInterceptor(defaultDeadline(DefaultTimeout)),
		WithConnectTimeout(2 * time.Second),
	}, opts...)
	conn, err := grpc.NewClient("unix://"+path, all...)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", path, err)
	}
	return conn, nil
}

// WithConnectTimeout is a dial option: how long a connection waits for the service to greet
// it before gRPC closes it and tries again with backoff (the bus's default: 2 s). While a
// service restarts under socket activation its socket takes connections and nobody greets
// them; a call that must tell that waiting from a refusal needs a connect timeout longer
// than its own deadline.
func WithConnectTimeout(d time.Duration) grpc.DialOption {
	return grpc.WithConnectParams(grpc.ConnectParams{
		Backoff: backoff.Config{
			BaseDelay:  50 * time.Millisecond,
			Multiplier: 1.6,
			Jitter:     0.2,
			MaxDelay:   2 * time.Second,
		},
		MinConnectTimeout: d,
	})
}

func defaultDeadline(d time.Duration) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if _, ok := ctx.Deadline(); !ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, d)
			defer cancel()
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}
