package certs

import (
	"bytes"
	"crypto/x509"
	"crypto/x509/pkix"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/unitlet/unitlet/shared/pki"
	"github.com/unitlet/unitlet/shared/pki/pkitest"
)

// inlinePair is a node client certificate and its key, as kubeadm init puts them inline
// in kubelet.conf.
func inlinePair(t *testing.T, ca *pkitest.CA) (certPEM, keyPEM []byte) {
	t.Helper()
	key, keyPEM, err := pki.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	certPEM = ca.Sign(t, pkitest.Cert{PublicKey: key.Public(), Subject: pkix.Name{CommonName: "system:node:" + testNode, Organization: []string{"system:nodes"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour)})
	return certPEM, keyPEM
}

func TestSeedClientStoreFromTheInlineCertificate(t *testing.T) {
	ca := pkitest.NewCA(t)
	certPEM, keyPEM := inlinePair(t, ca)
	store := pki.Store{Dir: filepath.Join(t.TempDir(), "pki"), Prefix: pki.ClientPrefix}

	// Nothing inline (a kubeconfig naming files, or a token): nothing written.
	if got, err := seedClientStore(store, rest.TLSClientConfig{CertFile: "/etc/kubernetes/pki/node.crt"}, time.Now()); got != "" || err != nil {
		t.Fatalf("no inline pair: wrote %q, %v", got, err)
	}
	// kubeadm init's kubelet.conf, the store empty: the pair becomes the current certificate.
	got, err := seedClientStore(store, rest.TLSClientConfig{CertData: certPEM, KeyData: keyPEM}, time.Now())
	if err != nil || got == "" {
		t.Fatalf("seed: %q, %v", got, err)
	}
	cur, err := store.Current()
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := pki.ParseCertificates(certPEM); !bytes.Equal(cur.Leaf.Raw, want[0].Raw) {
		t.Errorf("the current certificate is %s, want the inline one", cur.Leaf.Subject)
	}
	// A current certificate is never replaced by the kubeconfig's (the store's is newer:
	// it was rotated since).
	other, otherKey := inlinePair(t, ca)
	if got, err := seedClientStore(store, rest.TLSClientConfig{CertData: other, KeyData: otherKey}, time.Now()); got != "" || err != nil {
		t.Fatalf("store with a current certificate: wrote %q, %v", got, err)
	}
	// A certificate and key that are no pair are refused, naming the store, and nothing
	// is written.
	empty := pki.Store{Dir: filepath.Join(t.TempDir(), "pki"), Prefix: pki.ClientPrefix}
	if _, err := seedClientStore(empty, rest.TLSClientConfig{CertData: certPEM, KeyData: otherKey}, time.Now()); err == nil {
		t.Fatal("a certificate with another's key was seeded")
	}
	if _, err := os.Stat(empty.CurrentPath()); !os.IsNotExist(err) {
		t.Errorf("%s after a refused seed: %v, want none", empty.CurrentPath(), err)
	}
}
