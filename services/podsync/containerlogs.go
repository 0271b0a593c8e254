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

// applyLogPolicy applies a new generation's container log settings, which podsync takes
// live (nodeconfig.Live); invalid ones keep the policy in force.
func applyLogPolicy(m *containerlogs.Manager, log *slog.Logger) func(*nodeconfig.Config) error {
	return func(nc *nodeconfig.Config) error {
		p, err := containerlogs.PolicyOf(nc.KubeletConfiguration)
		if err != nil {
			return err
		}
		if p != m.Policy() {
			log.Info("container log rotation policy changed", "generation", nc.Generation, "maxSize", p.MaxSize, "maxFiles", p.MaxFiles, "workers", p.Workers, "interval", p.Interval)
			m.SetPolicy(p)
		}
		return nil
	}
}
