package peercred_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/unitlet/unitlet/shared/peercred"
)

const checkMethod = "/grpc.health.v1.Health/Check"

// serve runs a health server with authz on a real Unix socket and returns a client, and
// the peer the server saw on the last call.
func serve(t *testing.T, authz *peercred.Authorizer) (healthpb.HealthClient, func() peercred.AuthInfo) {
	t.Helper()
	path, seen := serveAt(t, authz)
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(peercred.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return healthpb.NewHealthClient(conn), seen
}

// serveAt runs a health server with authz on a real Unix socket and returns its path, and
// the peer the server saw on the last call.
func serveAt(t *testing.T, authz *peercred.Authorizer) (string, func() peercred.AuthInfo) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "s.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen peercred.AuthInfo
	record := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		mu.Lock()
		seen, _ = peercred.FromContext(ctx)
		mu.Unlock()
		return h(ctx, req)
	}
	srv := grpc.NewServer(grpc.Creds(peercred.NewCredentials()), grpc.ChainUnaryInterceptor(record, authz.UnaryInterceptor()))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(l)
	t.Cleanup(srv.Stop)
	return path, func() peercred.AuthInfo { mu.Lock(); defer mu.Unlock(); return seen }
}

func call(c healthpb.HealthClient) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := c.Check(ctx, &healthpb.HealthCheckRequest{})
	return err
}

func TestPeerCredentialsReachTheServer(t *testing.T) {
	c, seen := serve(t, peercred.NewAuthorizer(peercred.Anyone()))
	if err := call(c); err != nil {
		t.Fatal(err)
	}
	p := seen()
	if p.UID != uint32(os.Getuid()) || p.GID != uint32(os.Getgid()) || p.PID != int32(os.Getpid()) {
		t.Fatalf("server saw uid %d gid %d pid %d, want ours %d %d %d", p.UID, p.GID, p.PID, os.Getuid(), os.Getgid(), os.Getpid())
	}
}

func TestAuthorizerRules(t *testing.T) {
	me := uint32(os.Getuid())
	stranger := peercred.UIDs(12345)
	cases := []struct {
		name  string
		setup func() *peercred.Authorizer
		allow bool
	}{
		{"default allows us", func() *peercred.Authorizer { return peercred.NewAuthorizer(peercred.UIDs(me)) }, true},
		{"default denies", func() *peercred.Authorizer { return peercred.NewAuthorizer(stranger) }, false},
		{"anyof", func() *peercred.Authorizer {
			return peercred.NewAuthorizer(peercred.AnyOf(stranger, peercred.UIDs(me)))
		}, true},
		{"service prefix beats default", func() *peercred.Authorizer {
			a := peercred.NewAuthorizer(peercred.UIDs(me))
			a.Allow("/grpc.health.v1.Health/", stranger)
			return a
		}, false},
		{"method beats service prefix", func() *peercred.Authorizer {
			a := peercred.NewAuthorizer(stranger)
			a.Allow("/grpc.health.v1.Health/", stranger)
			a.Allow(checkMethod, peercred.Anyone())
			return a
		}, true},
		{"own group", func() *peercred.Authorizer {
			return peercred.NewAuthorizer(peercred.Group("ours", uint32(os.Getgid())))
		}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			client, _ := serve(t, c.setup())
			err := call(client)
			if c.allow {
				if err != nil {
					t.Fatalf("denied: %v", err)
				}
				return
			}
			if status.Code(err) != codes.PermissionDenied {
				t.Fatalf("want PermissionDenied, got %v", err)
			}
			msg := status.Convert(err).Message()
			if !strings.Contains(msg, "uid "+strconv.FormatUint(uint64(me), 10)) || !strings.Contains(msg, stranger.String()) {
				t.Fatalf("denial %q does not name the caller's uid and the rule %q", msg, stranger)
			}
		})
	}
}
