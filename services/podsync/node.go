package podsync

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/unitlet/unitlet/shared/daemon"
	"github.com/unitlet/unitlet/shared/kube"
	"github.com/unitlet/unitlet/shared/nodeconfig"
	"github.com/unitlet/unitlet/shared/nodeinfo"
)

// localNode is the node as admission sees it: built from the configuration and the
// machine's resources.
func localNode(nc *nodeconfig.Config) (*corev1.Node, error) {
	machine, err := nodeinfo.ReadMachine(nc.Paths.GetRootDir())
	if err != nil {
		return nil, fmt.Errorf("read the machine's resources: %w", err)
	}
	node, err := nodeinfo.Node(nc.KubeletConfiguration, nc.Identity(), machine)
	if err != nil {
		return nil, daemon.ConfigError(err)
	}
	return node, nil
}

// apiClient waits for the node's kubeconfig while unitlet-config bootstraps and returns a
// client for the API server, or nil on a standalone node (no kubeconfig): static pods only.
func apiClient(ctx context.Context, nc *nodeconfig.Config, log *slog.Logger) (kubernetes.Interface, error) {
	if err := kube.WaitForKubeconfig(ctx, nc.Paths, log); err != nil {
		return nil, err
	}
	kube.FollowRotatedCertificates()
	client, _, err := kube.Client(nc.Paths.GetKubeconfig(), "unitlet-podsync", nc.KubeletConfiguration)
	if errors.Is(err, kube.ErrStandalone) {
		log.Info("running standalone, static pods only", "reason", err)
		return nil, nil
	}
	if err != nil {
		return nil, daemon.ConfigError(err)
	}
	return client, nil
}
