package pki

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/unitlet/unitlet/shared/checkpoint"
)

// WriteKubeconfig writes, atomically and 0600, a kubeconfig for server (trusting caData)
// whose client certificate and key are both certPath: the store's current link, so a
// rotation needs no new kubeconfig.
func WriteKubeconfig(path, server string, caData []byte, certPath string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["default-cluster"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caData}
	cfg.AuthInfos["default-auth"] = &clientcmdapi.AuthInfo{ClientCertificate: certPath, ClientKey: certPath}
	cfg.Contexts["default-context"] = &clientcmdapi.Context{Cluster: "default-cluster", AuthInfo: "default-auth", Namespace: "default"}
	cfg.CurrentContext = "default-context"
	b, err := clientcmd.Write(*cfg)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	checkpoint.RemoveStaleTemps(filepath.Dir(path))
	return checkpoint.WriteFileAtomic(path, b, 0o600)
}

// ErrNoKubeconfig means the kubeconfig file does not exist.
var ErrNoKubeconfig = errors.New("kubeconfig does not exist")

// CheckKubeconfig reports whether the kubeconfig at path is usable at now: it loads, names
// a server, and its client certificate (data or file) parses, matches its key and has not
// expired. Credentials other than a client certificate (a token) are taken as valid. It
// returns the client certificate's expiry when there is one.
func CheckKubeconfig(path string, now time.Time) (notAfter time.Time, err error) {
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return time.Time{}, fmt.Errorf("%w: %s", ErrNoKubeconfig, path)
	}
	rc, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return time.Time{}, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	tc := rc.TLSClientConfig
	certPEM, keyPEM := tc.CertData, tc.KeyData
	if len(certPEM) == 0 && tc.CertFile != "" {
		if certPEM, err = os.ReadFile(tc.CertFile); err != nil {
			return time.Time{}, fmt.Errorf("kubeconfig %s: client certificate: %w", path, err)
		}
	}
	if len(keyPEM) == 0 && tc.KeyFile != "" {
		if keyPEM, err = os.ReadFile(tc.KeyFile); err != nil {
			return time.Time{}, fmt.Errorf("kubeconfig %s: client key: %w", path, err)
		}
	}
	if len(certPEM) == 0 {
		return time.Time{}, nil
	}
	certs, err := ParseCertificates(certPEM)
	if err != nil {
		return time.Time{}, fmt.Errorf("kubeconfig %s: client certificate: %w", path, err)
	}
	if _, err := tlsPair(certPEM, keyPEM); err != nil {
		return time.Time{}, fmt.Errorf("kubeconfig %s: client certificate and key: %w", path, err)
	}
	leaf := certs[0]
	if now.After(leaf.NotAfter) {
		return leaf.NotAfter, fmt.Errorf("kubeconfig %s: client certificate expired at %s", path, leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	return leaf.NotAfter, nil
}
