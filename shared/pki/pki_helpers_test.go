package pki

import (
	"crypto"
	"crypto/x509"
	"crypto/x509/pkix"
	"testing"
	"time"

	"github.com/unitlet/unitlet/shared/pki/pkitest"
)

// issue signs a client certificate for pub with subject, valid for a day until notAfter.
func issue(t *testing.T, ca *pkitest.CA, pub crypto.PublicKey, subject pkix.Name, notAfter time.Time) []byte {
	t.Helper()
	return ca.Sign(t, pkitest.Cert{
		PublicKey: pub, Subject: subject, NotBefore: notAfter.Add(-24 * time.Hour), NotAfter: notAfter,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
}

// nodeCert is a key and a client certificate for node, valid until notAfter.
func nodeCert(t *testing.T, ca *pkitest.CA, node string, notAfter time.Time) (certPEM, keyPEM []byte, key crypto.Signer) {
	t.Helper()
	key, keyPEM, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	return issue(t, ca, key.Public(), ClientRequest(node, 0).Subject, notAfter), keyPEM, key
}
