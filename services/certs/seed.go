package certs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/unitlet/unitlet/shared/daemon"
	"github.com/unitlet/unitlet/shared/pki"
)

// seedClientStore puts a kubeconfig's inline client certificate and key into the client
// store when the store has no current certificate, as the kubelet's certificate manager
// starts from the certificate it was given: `kubeadm init` writes kubelet.conf with the
// node's certificate inline, and its kubelet-finalize phase points kubelet.conf at
// kubelet-client-current.pem only if that file exists. Without it the node's client
// certificate would never be rotated (kubeadm certs renew leaves kubelet.conf to the node
// agent) and would expire with the node cut off. It returns the file it wrote, or "" when
// there was nothing to do (no inline pair, or a current certificate already there).
func seedClientStore(store pki.Store, tc rest.TLSClientConfig, now time.Time) (string, error) {
	if len(tc.CertData) == 0 || len(tc.KeyData) == 0 {
		return "", nil
	}
	switch _, err := os.Stat(store.CurrentPath()); {
	case err == nil:
		return "", nil
	case !errors.Is(err, fs.ErrNotExist):
		return "", err
	}
	path, err := store.Update(tc.CertData, tc.KeyData, now)
	if err != nil {
		return "", fmt.Errorf("seed the client certificate store %s from the kubeconfig's inline certificate: %w", store.Dir, err)
	}
	return path, nil
}

// credentialsCheckEvery is how often followCredentials reads the kubeconfig again.
const credentialsCheckEvery = 10 * time.Second

// credentialsChanged is the reason of the restart that followCredentials asks for.
const credentialsChanged = "the kubeconfig's client credentials changed"

// followCredentials reads the kubeconfig every interval and ends when whether
// its credentials are the store's (otherCredentials) differs from started: kubeadm's
// kubelet-finalize rewrites kubelet.conf to name the store's current certificate and
// restarts kubelet.service, which restarts unitlet-config alone; unitlet-certs, which
// started with the inline certificate and so did not rotate it, ends (a daemon.RestartError:
// systemd starts it again) to rotate from then on. A kubeconfig that cannot be read is logged and read again later.
func followCredentials(kubeconfig, link, started string, every time.Duration, log *slog.Logger) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		t := time.NewTicker(every)
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
			if now := otherCredentials(rc, link); now != started {
				log.Info("the kubeconfig's client credentials changed: restarting to apply them", "kubeconfig", kubeconfig,
					"before", describeCredentials(started), "now", describeCredentials(now))
				return &daemon.RestartError{Reason: credentialsChanged}
			}
		}
	}
}

// describeCredentials is otherCredentials' answer for a log line.
func describeCredentials(other string) string {
	if other == "" {
		return "the client store's current certificate (rotated)"
	}
	return other + " (not rotated)"
}
