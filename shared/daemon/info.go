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
	cs := s.d.ConfigState()
	return &daemonv1.GetInfoResponse{
		Service:                 s.d.opts.Service,
		Version:                 version.Version,
		GitCommit:               version.Commit(),
		GoVersion:               runtime.Version(),
		Pid:                     int32(os.Getpid()),
		StartTime:               timestamppb.New(s.d.started),
		SocketActivated:         s.d.activated,
		ConfigGeneration:        cs.Generation,
		PendingConfigGeneration: cs.Pending,
		PendingConfigFields:     cs.PendingFields,
	}, nil
}

// ConfigState is the node configuration a service runs, as GetInfo reports it.
type ConfigState struct {
	// Generation is the generation in effect in the process.
	Generation uint64
	// Pending is a newer generation that needs a restart to take effect, and
	// PendingFields the fields it changes that need it; 0 and nil when there is none.
	Pending       uint64
	PendingFields []string
}

// SetConfigState records the configuration the process runs, for GetInfo.
func (d *Daemon) SetConfigState(cs ConfigState) {
	d.mu.Lock()
	d.config = cs
	d.mu.Unlock()
}

// RecordConfig is SetConfigState by parts, for nodeconfig.Follower.
func (d *Daemon) RecordConfig(generation, pending uint64, pendingFields []string) {
	d.SetConfigState(ConfigState{Generation: generation, Pending: pending, PendingFields: pendingFields})
}

// ConfigState is what SetConfigState recorded.
func (d *Daemon) ConfigState() ConfigState {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.config
}
