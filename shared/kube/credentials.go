package kube

import (
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/unitlet/unitlet/shared/restart"
)

// CredentialsCheckEvery is how often FollowCredentials reads the kubeconfig again.
const CredentialsCheckEvery = 10 * time.Second

// CredentialsChanged is the reason of the restart FollowCredentials asks for.
const CredentialsChanged = "the kubeconfig's client credentials changed"

// CredentialsSource says where rc's client credentials come from: the certificate and
// key files it names, a digest of an inline certificate and key, a bearer token (file or
// digest), an exec plugin, or none. A client follows a rotated file by itself
// (FollowRotatedCertificates); a change of source it cannot follow.
func CredentialsSource(rc *rest.Config) string {
	tc := rc.TLSClientConfig
	switch {
	case len(tc.CertData) > 0 || len(tc.KeyData) > 0:
		return fmt.Sprintf("inline certificate (sha256 %x)", sha256.Sum256(append(append([]byte{}, tc.CertData...), tc.KeyData...)))
	case tc.CertFile != "":
		return fmt.Sprintf("certificate file %s, key file %s", filepath.Clean(tc.CertFile), filepath.Clean(tc.KeyFile))
	case rc.BearerTokenFile != "":
		return "token file " + filepath.Clean(rc.BearerTokenFile)
	case rc.BearerToken != "":
		return fmt.Sprintf("inline token (sha256 %x)", sha256.Sum256([]byte(rc.BearerToken)))
	case rc.ExecProvider != nil:
		return "exec plugin " + rc.ExecProvider.Command
	}
	return "no client credentials"
}

// FollowCredentials is a service loop for a service whose API client was made from
// kubeconfig with credentials started (CredentialsSource): it reads the kubeconfig every
// interval and, when the credentials come from elsewhere, ends the service with a
// *restart.Error, so that systemd starts it again with a client made from them. This
// is how the services follow kubeadm's kubelet-finalize, which rewrites kubelet.conf from
// the certificate inline to the rotated file and restarts kubelet.service (unitlet-config
// alone). A kubeconfig that cannot be read is logged and read again later: the service
// keeps the client it has.
func FollowCredentials(kubeconfig, started string, interval time.Duration, log *slog.Logger) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
			}
			rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
			if err != nil {
				log.Warn("read the kubeconfig again, will retry", "kubeconfig", kubeconfig, "err", err)
				continue
			}
			if now := CredentialsSource(rc); now != started {
				log.Info(CredentialsChanged+": restarting to use them", "kubeconfig", kubeconfig, "before", started, "now", now)
				return &restart.Error{Reason: CredentialsChanged}
			}
		}
	}
}

// FollowClientCredentials is FollowCredentials for a client made from kubeconfig as rc,
// checked every CredentialsCheckEvery. On a standalone node (rc nil) there is nothing to
// follow: the loop waits for ctx to end.
func FollowClientCredentials(kubeconfig string, rc *rest.Config, log *slog.Logger) func(ctx context.Context) error {
	if rc == nil {
		return func(ctx context.Context) error { <-ctx.Done(); return nil }
	}
	return FollowCredentials(kubeconfig, CredentialsSource(rc), CredentialsCheckEvery, log)
}
