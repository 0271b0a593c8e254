package status

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"

	daemonv1 "github.com/unitlet/unitlet/proto/unitlet/daemon/v1"
	"github.com/unitlet/unitlet/services/status/nodemetrics"
	"github.com/unitlet/unitlet/shared/bus"
	"github.com/unitlet/unitlet/shared/peercred"
)

// olderDaemon is a service of a release before GetMetrics.
type olderDaemon struct {
	daemonv1.UnimplementedDaemonServiceServer
}

func (olderDaemon) GetInfo(context.Context, *daemonv1.GetInfoRequest) (*daemonv1.GetInfoResponse, error) {
	return &daemonv1.GetInfoResponse{Service: "certs"}, nil
}

func TestBusMetricsOfAnOlderOrStoppedService(t *testing.T) {
	dir := t.TempDir()
	l, err := net.Listen("unix", bus.SocketPath(dir, "certs"))
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.Creds(peercred.NewCredentials()))
	daemonv1.RegisterDaemonServiceServer(srv, olderDaemon{})
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := busMetrics(dir, "certs", "", nil).Gather(ctx); !errors.Is(err, nodemetrics.ErrUnsupported) {
		t.Errorf("an older service: %v, want ErrUnsupported", err)
	}
	// No process behind the socket: the call fails at once, not at the scrape's deadline.
	srv.Stop()
	start := time.Now()
	if _, err := busMetrics(dir, "certs", "", nil).Gather(ctx); err == nil || errors.Is(err, nodemetrics.ErrUnsupported) {
		t.Errorf("a stopped service: %v, want an error", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("a stopped service took %s to fail", took)
	}
}
