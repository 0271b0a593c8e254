package volumes

import (
	"log/slog"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/unitlet/unitlet/services/volumes/token"
	"github.com/unitlet/unitlet/shared/kubeapi"
)

// newTokens returns the cache of service-account tokens and the function that forgets a
// released pod's, or nils on a standalone node (client nil).
func newTokens(client kubeapi.Interface, clk clock.Clock, log *slog.Logger) (*token.Manager, func(types.UID)) {
	if client == nil {
		return nil, nil
	}
	tokens := token.NewManager(client, clk, token.WithLogger(log.With("component", "tokens")))
	return tokens, tokens.Forget
}
