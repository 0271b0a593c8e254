package harness

import (
	"fmt"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// writeKubeconfig writes a kubeconfig for the stack's API server with a client certificate
// or, when token is set, a bearer token.
func writeKubeconfig(path, server, caFile, user, certFile, keyFile, token string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["unitlet-harness"] = &clientcmdapi.Cluster{Server: server, CertificateAuthority: caFile}
	auth := &clientcmdapi.AuthInfo{ClientCertificate: certFile, ClientKey: keyFile, Token: token}
	cfg.AuthInfos[user] = auth
	cfg.Contexts["unitlet-harness"] = &clientcmdapi.Context{Cluster: "unitlet-harness", AuthInfo: user}
	cfg.CurrentContext = "unitlet-harness"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("write kubeconfig %s: %w", path, err)
	}
	return nil
}
