package pki

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/unitlet/unitlet/shared/checkpoint/checkpointtest"
	"github.com/unitlet/unitlet/shared/pki/pkitest"
)

func TestCheckKubeconfig(t *testing.T) {
	ca := pkitest.NewCA(t)
	dir := t.TempDir()
	now := time.Now()
	kubeconfig := filepath.Join(dir, "etc", "kubeconfig")

	if _, err := CheckKubeconfig(kubeconfig, now); !errors.Is(err, ErrNoKubeconfig) {
		t.Fatalf("missing kubeconfig: %v, want ErrNoKubeconfig", err)
	}

	s := Store{Dir: filepath.Join(dir, "pki"), Prefix: ClientPrefix}
	notAfter := now.Add(time.Hour).Truncate(time.Second)
	certPEM, keyPEM, _ := nodeCert(t, ca, "node-a", notAfter)
	if _, err := s.Update(certPEM, keyPEM, now); err != nil {
		t.Fatal(err)
	}
	if err := WriteKubeconfig(kubeconfig, "https://192.0.2.10:6443", ca.CertPEM, s.CurrentPath()); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(kubeconfig); err != nil || fi.Mode() != 0o600 {
		t.Errorf("kubeconfig mode %v (%v), want 0600", fi.Mode(), err)
	}
	got, err := CheckKubeconfig(kubeconfig, now)
	if err != nil || !got.Equal(notAfter) {
		t.Fatalf("valid kubeconfig: %s, %v; want %s", got, err, notAfter)
	}

	// Expired: the same kubeconfig after the certificate's end.
	if _, err := CheckKubeconfig(kubeconfig, notAfter.Add(time.Second)); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Errorf("expired certificate: %v", err)
	}

	// The link pointing at a certificate whose key is another's.
	otherCert, _, _ := nodeCert(t, ca, "node-a", notAfter)
	mismatched := filepath.Join(s.Dir, "mismatched.pem")
	if err := os.WriteFile(mismatched, append(otherCert, keyPEM...), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WriteKubeconfig(kubeconfig, "https://192.0.2.10:6443", ca.CertPEM, mismatched); err != nil {
		t.Fatal(err)
	}
	if _, err := CheckKubeconfig(kubeconfig, now); err == nil {
		t.Error("a certificate with another key was accepted")
	}

	// The certificate file missing.
	if err := WriteKubeconfig(kubeconfig, "https://192.0.2.10:6443", ca.CertPEM, filepath.Join(dir, "nope.pem")); err != nil {
		t.Fatal(err)
	}
	if _, err := CheckKubeconfig(kubeconfig, now); err == nil || errors.Is(err, ErrNoKubeconfig) {
		t.Errorf("missing certificate file: %v", err)
	}

	// Not a kubeconfig at all.
	if err := os.WriteFile(kubeconfig, []byte("{{{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := CheckKubeconfig(kubeconfig, now); err == nil || errors.Is(err, ErrNoKubeconfig) {
		t.Errorf("unparsable kubeconfig: %v", err)
	}

	// A token instead of a certificate counts as usable, without an expiry.
	token := "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://192.0.2.10:6443'}}]\n" +
		"users: [{name: u, user: {token: abc}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"
	if err := os.WriteFile(kubeconfig, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := CheckKubeconfig(kubeconfig, now); err != nil || !got.IsZero() {
		t.Errorf("token kubeconfig: %s, %v", got, err)
	}
}

func TestWriteKubeconfigRemovesTemporaryFilesAKilledWriterLeft(t *testing.T) {
	dir := t.TempDir()
	temps := checkpointtest.LeaveTemps(t, dir, "kubelet.conf")
	if err := WriteKubeconfig(filepath.Join(dir, "kubelet.conf"), "https://192.0.2.10:6443", pkitest.NewCA(t).CertPEM, "/var/lib/kubelet/pki/kubelet-client-current.pem"); err != nil {
		t.Fatal(err)
	}
	temps.Swept(t)
}
