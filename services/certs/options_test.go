package certs

import (
	"context"
	"encoding/base64"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	clocktesting "k8s.io/utils/clock/testing"

	configv1 "github.com/unitlet/unitlet/proto/unitlet/config/v1"
	"github.com/unitlet/unitlet/shared/nodeconfig"
	"github.com/unitlet/unitlet/shared/pki"
	"github.com/unitlet/unitlet/shared/pki/pkitest"
)

func testNodeConfig(paths *configv1.Paths) *nodeconfig.Config {
	return &nodeconfig.Config{
		KubeletConfiguration: &kubeletconfigv1beta1.KubeletConfiguration{ServerTLSBootstrap: true},
		Node:                 &configv1.NodeIdentity{Name: testNode},
		Paths:                paths,
	}
}

// A node without a kubeconfig is standalone: no client, nothing to rotate, and the
// certificates would live in <root-dir>/pki.
func TestNodeOptionsStandalone(t *testing.T) {
	root := t.TempDir()
	opts, rc, err := nodeOptions(context.Background(), testNodeConfig(&configv1.Paths{RootDir: root}), time.Hour, clocktesting.NewFakeClock(time.Now()), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if opts.Standalone == "" || opts.Client != nil || rc != nil {
		t.Errorf("standalone = %q, client %v, rest config %v; want standalone without a client", opts.Standalone, opts.Client, rc)
	}
	if opts.CertDir != filepath.Join(root, "pki") || !opts.Serving || opts.Lifetime != time.Hour || opts.Node.Name != testNode {
		t.Errorf("options %+v: want <root-dir>/pki, serving, a 1h lifetime and node %s", opts, testNode)
	}
}

// kubeadm init's kubelet.conf, its client certificate inline, seeds the empty client store
// and gives a client; its inline credentials are not rotated.
func TestNodeOptionsWithAnInlineKubeconfig(t *testing.T) {
	ca := pkitest.NewCA(t)
	certPEM, keyPEM := inlinePair(t, ca)
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubelet.conf")
	body := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://192.0.2.10:6443", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {client-certificate-data: %s, client-key-data: %s}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`, base64.StdEncoding.EncodeToString(certPEM), base64.StdEncoding.EncodeToString(keyPEM))
	if err := os.WriteFile(kubeconfig, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	certDir := filepath.Join(dir, "certs")
	opts, rc, err := nodeOptions(context.Background(), testNodeConfig(&configv1.Paths{RootDir: dir, CertDir: certDir, Kubeconfig: kubeconfig}), 0, clocktesting.NewFakeClock(time.Now()), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if opts.Standalone != "" || opts.Client == nil || rc == nil || opts.CertDir != certDir {
		t.Fatalf("standalone %q, client %v, rest config %v, cert dir %q; want a client and --cert-dir", opts.Standalone, opts.Client, rc, opts.CertDir)
	}
	if _, err := (pki.Store{Dir: certDir, Prefix: pki.ClientPrefix}).Current(); err != nil {
		t.Errorf("the client store was not seeded: %v", err)
	}
	if opts.ClientCredentials != "the kubeconfig carries its client certificate inline" {
		t.Errorf("ClientCredentials = %q, want the inline credentials named", opts.ClientCredentials)
	}
}
