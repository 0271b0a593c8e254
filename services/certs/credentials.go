package certs

import (
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/client-go/rest"
)

// otherCredentials says why the kubeconfig's credentials are not the client store's
// certificate at link, or "" when they are.
func otherCredentials(rc *rest.Config, link string) string {
	tc := rc.TLSClientConfig
	switch {
	case len(tc.CertData) > 0:
		return "the kubeconfig carries its client certificate inline"
	case tc.CertFile == "":
		return "the kubeconfig authenticates without a client certificate (a token or a plugin)"
	case filepath.Clean(tc.CertFile) == filepath.Clean(link):
		return ""
	}
	a, aerr := os.Lstat(tc.CertFile)
	b, berr := os.Lstat(link)
	if aerr == nil && berr == nil && os.SameFile(a, b) {
		return ""
	}
	return fmt.Sprintf("the kubeconfig's client certificate is %s, not %s", tc.CertFile, link)
}
