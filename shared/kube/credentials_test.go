package kube

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/unitlet/unitlet/shared/restart"
)

func TestCredentialsSource(t *testing.T) {
	for _, tc := range []struct {
		rc   rest.Config
		want string
	}{
		{rest.Config{TLSClientConfig: rest.TLSClientConfig{CertData: []byte("c"), KeyData: []byte("k")}}, "inline certificate (sha256 "},
		{rest.Config{TLSClientConfig: rest.TLSClientConfig{CertFile: "/var/lib/kubelet/pki/./kubelet-client-current.pem", KeyFile: "/var/lib/kubelet/pki/kubelet-client-current.pem"}},
			"certificate file /var/lib/kubelet/pki/kubelet-client-current.pem, key file /var/lib/kubelet/pki/kubelet-client-current.pem"},
		{rest.Config{BearerTokenFile: "/run/token"}, "token file /run/token"},
		{rest.Config{BearerToken: "secret"}, "inline token (sha256 "},
		{rest.Config{}, "no client credentials"},
	} {
		if got := CredentialsSource(&tc.rc); !strings.HasPrefix(got, tc.want) || strings.Contains(got, "secret") {
			t.Errorf("%+v: %q, want %q...", tc.rc, got, tc.want)
		}
	}
	a := CredentialsSource(&rest.Config{TLSClientConfig: rest.TLSClientConfig{CertData: []byte("c1"), KeyData: []byte("k")}})
	b := CredentialsSource(&rest.Config{TLSClientConfig: rest.TLSClientConfig{CertData: []byte("c2"), KeyData: []byte("k")}})
	if a == b {
		t.Errorf("two inline certificates have one source %q", a)
	}
}

// TestFollowCredentialsRestartsWhenTheKubeconfigNamesTheFile: kubeadm's kubelet-finalize
// rewrites kubelet.conf from the inline certificate to the rotated file; the loop,
// started with the inline credentials, asks for a restart. The same credentials written
// again do not.
func TestFollowCredentialsRestartsWhenTheKubeconfigNamesTheFile(t *testing.T) {
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubelet.conf")
	write := func(auth *clientcmdapi.AuthInfo) {
		t.Helper()
		cfg := clientcmdapi.NewConfig()
		cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: "https://192.0.2.1:6443"}
		cfg.AuthInfos["node"] = auth
		cfg.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "node"}
		cfg.CurrentContext = "c"
		if err := clientcmd.WriteToFile(*cfg, kubeconfig); err != nil {
			t.Fatal(err)
		}
	}
	inline := &clientcmdapi.AuthInfo{ClientCertificateData: []byte("cert"), ClientKeyData: []byte("key")}
	write(inline)
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- FollowCredentials(kubeconfig, CredentialsSource(rc), 10*time.Millisecond, slog.New(slog.DiscardHandler))(ctx)
	}()
	write(inline)
	select {
	case err := <-done:
		t.Fatalf("ended on unchanged credentials: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	// The file exists (clientcmd refuses a kubeconfig naming a missing one).
	current := filepath.Join(dir, "kubelet-client-current.pem")
	if err := os.WriteFile(current, []byte("pem"), 0o600); err != nil {
		t.Fatal(err)
	}
	write(&clientcmdapi.AuthInfo{ClientCertificate: current, ClientKey: current})
	var again *restart.Error
	if err := <-done; !errors.As(err, &again) || again.Reason != CredentialsChanged {
		t.Fatalf("after kubelet.conf named the file: %v, want a restart for %q", err, CredentialsChanged)
	}
}
