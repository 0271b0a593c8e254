package volumes

import (
	"context"
	"errors"
	"log/slog"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"github.com/unitlet/unitlet/services/volumes/token"
	"github.com/unitlet/unitlet/shared/daemon"
	"github.com/unitlet/unitlet/shared/kube"
	"github.com/unitlet/unitlet/shared/nodeconfig"
)

// apiClient waits for the node's kubeconfig while unitlet-config bootstraps and returns a
// client for the API server, or nil on a standalone node (no kubeconfig).
func apiClient(ctx context.Context, nc *nodeconfig.Config, log *slog.Logger) (kubernetes.Interface, error) {
	if err := kube.WaitForKubeconfig(ctx, nc.Paths, log); err != nil {
		return nil, err
	}
	kube.FollowRotatedCertificates()
	client, _, err := kube.Client(nc.Paths.GetKubeconfig(), "unitlet-volumes", nc.KubeletConfiguration)
	if errors.Is(err, kube.ErrStandalone) {
		log.Info("running standalone: configMap, secret and token volumes cannot be served", "reason", err)
		return nil, nil
	}
	if err != nil {
		return nil, daemon.ConfigError(err)
	}
	return client, nil
}

// newTokens returns the cache of service-account tokens and the function that forgets a
// released pod's, or nils on a standalone node (client nil).
func newTokens(client kubernetes.Interface, clk clock.Clock, log *slog.Logger) (*token.Manager, func(types.UID)) {
	if client == nil {
		return nil, nil
	}
	tokens := token.NewManager(client, clk, token.WithLogger(log.With("component", "tokens")))
	return tokens, tokens.Forget
}
