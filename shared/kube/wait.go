package kube

import (
	"context"
	"errors"
	"log/slog"
	"time"

	sddaemon "github.com/coreos/go-systemd/v22/daemon"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"

	configv1 "github.com/unitlet/unitlet/proto/unitlet/config/v1"
	"github.com/unitlet/unitlet/shared/kubeapi"
	"github.com/unitlet/unitlet/shared/pki"
)

// certReloadEvery is how often clients look for a rotated client certificate.
const certReloadEvery = 5 * time.Second

// FollowRotatedCertificates makes client-go look for a rotated client certificate every
// certReloadEvery instead of every five minutes. client-go reloads a client certificate
// given as files (the kubeconfig TLS bootstrap writes points at kubelet-client-current.pem)
// and closes every connection made with the old one; unitlet-certs swings the link at 70 to
// 90% of a lifetime that may be as short as ten minutes. The period is client-go's global:
// each service calls this once at start, before it builds its clients.
func FollowRotatedCertificates() {
	transport.CertCallbackRefreshDuration = certReloadEvery
}

// WaitForKubeconfig returns once the node's kubeconfig is usable, or at once when there is
// nothing to wait for: no bootstrap kubeconfig is configured (a missing kubeconfig then
// means a standalone node) or the kubeconfig is already usable. While unitlet-config is
// bootstrapping it checks every second, tells systemd (STATUS=, and more time to start)
// and logs once what it waits for.
func WaitForKubeconfig(ctx context.Context, paths *configv1.Paths, log *slog.Logger) error {
	kubeconfig, bootstrap := paths.GetKubeconfig(), paths.GetBootstrapKubeconfig()
	if kubeconfig == "" || bootstrap == "" {
		return nil
	}
	_, err := pki.CheckKubeconfig(kubeconfig, time.Now())
	if err == nil {
		return nil
	}
	log.Info("waiting for unitlet-config to bootstrap the node's credentials", "kubeconfig", kubeconfig, "reason", err)
	status := "STATUS=waiting for unitlet-config's TLS bootstrap to write " + kubeconfig
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for i := 0; ; i++ {
		if i%10 == 0 {
			// Waiting for credentials is not a failure to start: keep systemd from timing out.
			_, _ = sddaemon.SdNotify(false, status+"\nEXTEND_TIMEOUT_USEC=30000000")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		if _, err = pki.CheckKubeconfig(kubeconfig, time.Now()); err == nil {
			log.Info("the node's credentials are ready", "kubeconfig", kubeconfig, "waited", time.Duration(i+1)*time.Second)
			_, _ = sddaemon.SdNotify(false, "STATUS=")
			return nil
		}
		if !errors.Is(err, pki.ErrNoKubeconfig) && i%60 == 59 {
			log.Info("still waiting for the node's credentials", "kubeconfig", kubeconfig, "reason", err)
		}
	}
}

// ForNode is how a service gets its API client: it waits for the node's kubeconfig while
// unitlet-config bootstraps (WaitForKubeconfig), makes client-go follow rotated client
// certificates, and returns a client for component with the configuration's QPS. On a
// standalone node (no kubeconfig) it logs standalone, what the service then does
// without the API server, and returns no client and no error. Any other error is the
// configuration's, or ctx's.
func ForNode(ctx context.Context, paths *configv1.Paths, kc *kubeletconfigv1beta1.KubeletConfiguration, component, standalone string, log *slog.Logger) (kubeapi.Interface, *rest.Config, error) {
	if err := WaitForKubeconfig(ctx, paths, log); err != nil {
		return nil, nil, err
	}
	FollowRotatedCertificates()
	client, rc, err := Client(paths.GetKubeconfig(), component, kc)
	if errors.Is(err, ErrStandalone) {
		log.Info(standalone, "reason", err)
		return nil, nil, nil
	}
	return client, rc, err
}
