package kube

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
)

const kubeconfig = `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`

func TestRESTConfigTakesTheKubeletsClientSettings(t *testing.T) {
	file := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(file, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	kc := &kubeletconfigv1beta1.KubeletConfiguration{KubeAPIQPS: ptr.To[int32](7), KubeAPIBurst: 9, ContentType: "application/json"}
	rc, err := RESTConfig(file, "unitlet-test", kc)
	if err != nil {
		t.Fatal(err)
	}
	if rc.QPS != 7 || rc.Burst != 9 || rc.ContentType != "application/json" || rc.UserAgent == "" {
		t.Errorf("QPS %v, burst %d, content type %q, user agent %q: want the configuration's", rc.QPS, rc.Burst, rc.ContentType, rc.UserAgent)
	}
	if _, err := RESTConfig("", "unitlet-test", kc); !errors.Is(err, ErrStandalone) {
		t.Errorf("no kubeconfig: %v, want ErrStandalone", err)
	}
	var missing MissingFileError
	if _, err := RESTConfig(filepath.Join(t.TempDir(), "nope"), "unitlet-test", kc); !errors.As(err, &missing) {
		t.Errorf("a missing kubeconfig: %v, want MissingFileError", err)
	}
}
