package nodeapi

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	certutil "k8s.io/client-go/util/cert"
)

// handshake connects to addr trusting roots and returns the certificate served.
func handshake(t *testing.T, addr string, roots *x509.CertPool, serverName string) *x509.Certificate {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: roots, ServerName: serverName})
	if err != nil {
		t.Fatalf("TLS handshake with %s as %s: %v", addr, serverName, err)
	}
	defer conn.Close()
	state := conn.ConnectionState()
	if state.Version < tls.VersionTLS12 {
		t.Errorf("TLS version %x, want at least 1.2", state.Version)
	}
	return state.PeerCertificates[0]
}

func TestSelfSignedCertificateIsMadeAndReused(t *testing.T) {
	dir := t.TempDir()
	s := startServer(t, Options{CertDir: dir, Hostname: "worker-1", IPs: []string{"127.0.0.1", "10.1.2.3"}})

	certPEM, err := os.ReadFile(filepath.Join(dir, "kubelet.crt"))
	if err != nil {
		t.Fatalf("self-signed certificate not kept: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "kubelet.key")); err != nil {
		t.Fatalf("self-signed key not kept: %v", err)
	}
	roots, err := certutil.NewPoolFromBytes(certPEM)
	if err != nil {
		t.Fatal(err)
	}
	// The kept chain verifies the served certificate for the hostname and for each IP.
	served := handshake(t, s.Address(), roots, "worker-1")
	handshake(t, s.Address(), roots, "127.0.0.1")
	if !slices.ContainsFunc(served.IPAddresses, func(ip net.IP) bool { return ip.Equal(net.ParseIP("10.1.2.3")) }) {
		t.Errorf("served certificate IPs %v lack 10.1.2.3", served.IPAddresses)
	}
	if served.NotAfter.Before(time.Now().Add(300 * 24 * time.Hour)) {
		t.Errorf("served certificate expires %v, want about a year from now", served.NotAfter)
	}

	// A second server (a restart) reuses the kept certificate.
	again := startServer(t, Options{CertDir: dir, Hostname: "worker-1", IPs: []string{"127.0.0.1"}})
	reused := handshake(t, again.Address(), roots, "worker-1")
	if !bytes.Equal(reused.Raw, served.Raw) {
		t.Errorf("restart served a new certificate; want the kept one reused")
	}
	after, err := os.ReadFile(filepath.Join(dir, "kubelet.crt"))
	if err != nil || !bytes.Equal(after, certPEM) {
		t.Errorf("restart rewrote kubelet.crt (%v)", err)
	}
}

func TestSelfSignedCertificateReplacedWhenUnusable(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "kubelet.crt"), []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "kubelet.key"), []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	startServer(t, Options{CertDir: dir, Hostname: "worker-1"})
	if _, err := tls.LoadX509KeyPair(filepath.Join(dir, "kubelet.crt"), filepath.Join(dir, "kubelet.key")); err != nil {
		t.Errorf("unusable certificate not replaced: %v", err)
	}
}

func TestConfiguredAndDynamicCertificates(t *testing.T) {
	// A configured tlsCertFile/tlsPrivateKeyFile is served as is.
	dir := t.TempDir()
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("configured.example", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(dir, "serving.crt"), filepath.Join(dir, "serving.key")
	if err := os.WriteFile(certFile, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, Options{CertFile: certFile, KeyFile: keyFile})
	roots, err := certutil.NewPoolFromBytes(certPEM)
	if err != nil {
		t.Fatal(err)
	}
	handshake(t, s.Address(), roots, "configured.example")

	// GetCertificate is asked at each handshake, so a rotated certificate is served at once.
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	calls := make(chan struct{}, 10)
	dyn := startServer(t, Options{GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
		calls <- struct{}{}
		return &pair, nil
	}})
	handshake(t, dyn.Address(), roots, "configured.example")
	if len(calls) == 0 {
		t.Errorf("GetCertificate was not asked")
	}
}
