// Package kube builds the client-go clients the services use to talk to the API server
// with the node's credentials.
package kube

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/unitlet/unitlet/shared/kubeapi"
	"github.com/unitlet/unitlet/shared/version"
)

// ErrStandalone means the node has no kubeconfig: it runs standalone, without an API
// server (static pods only, no API writes), as the kubelet does without --kubeconfig.
var ErrStandalone = errors.New("no kubeconfig: standalone node")

// MissingFileError is a kubeconfig that is named but not there (yet). It is temporary: a
// service that meets it exits 1 and systemd tries again, as the file may be put in place.
type MissingFileError struct{ Path string }

func (e MissingFileError) Error() string {
	return fmt.Sprintf("kubeconfig %s does not exist: a node with a --kubeconfig is never standalone; put the credentials there or have TLS bootstrap write them (--bootstrap-kubeconfig)", e.Path)
}

// Temporary reports that the file may yet appear.
func (MissingFileError) Temporary() bool { return true }

// RESTConfig reads kubeconfig and sets the user agent (<component>/<version>), the
// kubelet's client rate limits from kc (kubeAPIQPS, kubeAPIBurst) and its content type
// (contentType: protobuf unless set). An unset kubeconfig
// gives ErrStandalone; one that is set but missing is an error, never a standalone node.
func RESTConfig(kubeconfig, component string, kc *kubeletconfigv1beta1.KubeletConfiguration) (*rest.Config, error) {
	if kubeconfig == "" {
		return nil, ErrStandalone
	}
	if _, err := os.Stat(kubeconfig); errors.Is(err, fs.ErrNotExist) {
		return nil, MissingFileError{Path: kubeconfig}
	}
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
	}
	rc.UserAgent = component + "/" + version.Version
	rc.QPS, rc.Burst = 50, 100
	if kc != nil {
		if kc.KubeAPIQPS != nil {
			rc.QPS = float32(*kc.KubeAPIQPS)
		}
		if kc.KubeAPIBurst != 0 {
			rc.Burst = int(kc.KubeAPIBurst)
		}
		if kc.ContentType != "" {
			rc.ContentType = kc.ContentType
		}
	}
	return rc, nil
}

// Client is RESTConfig's client.
func Client(kubeconfig, component string, kc *kubeletconfigv1beta1.KubeletConfiguration) (kubeapi.Interface, *rest.Config, error) {
	rc, err := RESTConfig(kubeconfig, component, kc)
	if err != nil {
		return nil, nil, err
	}
	c, err := kubeapi.NewForConfig(rc)
	if err != nil {
		return nil, nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
	}
	return c, rc, nil
}
