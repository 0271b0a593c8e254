package podsync

import (
	"context"
	"log/slog"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/unitlet/unitlet/services/podsync/containerlogs"
	"github.com/unitlet/unitlet/services/podsync/podworker"
	"github.com/unitlet/unitlet/shared/nodeconfig"
)

// loggedRuntime is the runtime the pod workers drive, with the container log manager told
// of each start (the /var/log/containers link) and each removal (the log files and the
// link go first, as with the kubelet).
type loggedRuntime struct {
	podworker.Runtime
	logs *containerlogs.Manager
	log  *slog.Logger
}

func (r loggedRuntime) StartContainer(ctx context.Context, in *runtimeapi.StartContainerRequest, opts ...grpc.CallOption) (*runtimeapi.StartContainerResponse, error) {
	resp, err := r.Runtime.StartContainer(ctx, in, opts...)
	if err != nil {
		return nil, err
	}
	// As the kubelet, a link that cannot be made is logged; the container runs.
	if err := r.logs.Started(ctx, in.GetContainerId()); err != nil {
		r.log.Warn("link a container's log for log shippers", "container", in.GetContainerId(), "err", err)
	}
	return resp, nil
}

func (r loggedRuntime) RemoveContainer(ctx context.Context, in *runtimeapi.RemoveContainerRequest, opts ...grpc.CallOption) (*runtimeapi.RemoveContainerResponse, error) {
	if err := r.logs.Removing(ctx, in.GetContainerId()); err != nil {
		return nil, err
	}
	return r.Runtime.RemoveContainer(ctx, in, opts...)
}

// followLogPolicy applies each new generation of the configuration's containerLog* fields
// to the log manager. Invalid ones keep the policy in force, with a log line naming the
// field (unitlet-config refuses them before they get here).
func followLogPolicy(ctx context.Context, socketDir string, after uint64, m *containerlogs.Manager, log *slog.Logger) error {
	return nodeconfig.Follow(ctx, socketDir, after, func(nc *nodeconfig.Config) {
		p, err := containerlogs.PolicyOf(nc.KubeletConfiguration)
		if err != nil {
			log.Error("the new node configuration's container log settings are invalid; the policy in force stays", "generation", nc.Generation, "err", err)
			return
		}
		if p != m.Policy() {
			log.Info("container log rotation policy changed", "generation", nc.Generation, "maxSize", p.MaxSize, "maxFiles", p.MaxFiles, "workers", p.Workers, "interval", p.Interval)
			m.SetPolicy(p)
		}
	}, log)
}
