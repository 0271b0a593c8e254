package certs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"k8s.io/client-go/rest"

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
