package daemon

import (
	"context"
	"os"
	"runtime"

	"google.golang.org/protobuf/types/known/timestamppb"

	daemonv1 "github.com/unitlet/unitlet/proto/unitlet/daemon/v1"
	"github.com/unitlet/unitlet/shared/version"
)

// infoServer answers unitlet.daemon.v1: which service and build serves the socket.
type infoServer struct {
	daemonv1.UnimplementedDaemonServiceServer
	d *Daemon
}

func (s infoServer) GetInfo(context.Context, *daemonv1.GetInfoRequest) (*daemonv1.GetInfoResponse, error) {
	return &daemonv1.GetInfoResponse{
		Service:         s.d.opts.Service,
		Version:         version.Version,
		GitCommit:       version.Commit(),
		GoVersion:       runtime.Version(),
		Pid:             int32(os.Getpid()),
		StartTime:       timestamppb.New(s.d.started),
		SocketActivated: s.d.activated,
	}, nil
}
