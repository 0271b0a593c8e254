// Package pkitest is a cluster's certificate authority and CSR signer for tests: a CA that
// issues certificates, and a signer that approves and answers the CSRs of a fake clientset.
//
// It does not import pki, so that pki's own tests can use it.
package pkitest

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"sync/atomic"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// CA signs certificates as a cluster's signers would. It is valid from two days ago to two
// days from now.
type CA struct {
	Cert    *x509.Certificate
	CertPEM []byte
	key     crypto.Signer
}

// NewCA makes a CA with a new ECDSA P-256 key, named CN=test-cluster-ca.
func NewCA(t testing.TB) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "test-cluster-ca"},
		NotBefore:             time.Now().Add(-48 * time.Hour),
		NotAfter:              time.Now().Add(48 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &CA{Cert: cert, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), key: key}
}

// Cert is what the CA puts in a certificate.
type Cert struct {
	PublicKey           crypto.PublicKey
	Subject             pkix.Name
	DNSNames            []string
	IPs                 []net.IP
	ExtKeyUsage         []x509.ExtKeyUsage
	NotBefore, NotAfter time.Time
}

// Requested is the certificate req asks for: its key, subject, DNS names and IPs.
func Requested(req *x509.CertificateRequest) Cert {
	return Cert{PublicKey: req.PublicKey, Subject: req.Subject, DNSNames: req.DNSNames, IPs: req.IPAddresses}
}

// Sign issues c with a random serial number and returns it PEM-encoded.
func (ca *CA) Sign(t testing.TB, c Cert) []byte {
	t.Helper()
	certPEM, err := ca.sign(c)
	if err != nil {
		t.Fatal(err)
	}
	return certPEM
}

func (ca *CA) sign(c Cert) ([]byte, error) {
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      c.Subject,
		DNSNames:     c.DNSNames,
		IPAddresses:  c.IPs,
		NotBefore:    c.NotBefore,
		NotAfter:     c.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  c.ExtKeyUsage,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, c.PublicKey, ca.key)
	if err != nil {
		return nil, fmt.Errorf("sign certificate for %s: %w", c.Subject, err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// RunSigner approves every pending CSR in c and issues it the certificate decide makes of
// its request, until the test ends; decide returning false leaves the CSR pending. It
// updates every issued CSR again on each tick: the fake API server's watch may miss an
// update made between its list and its watch.
func (ca *CA) RunSigner(t testing.TB, c kubernetes.Interface, decide func(*x509.CertificateRequest) (Cert, bool)) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if err := ca.signPending(ctx, c, decide); err != nil {
				t.Error(err)
				return
			}
		}
	}()
}

// signPending answers the pending CSRs in c once, and updates the issued ones again.
func (ca *CA) signPending(ctx context.Context, c kubernetes.Interface, decide func(*x509.CertificateRequest) (Cert, bool)) error {
	csrs := c.CertificatesV1().CertificateSigningRequests()
	list, err := csrs.List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil // the test may have stopped the cluster; try again on the next tick
	}
	for i := range list.Items {
		req := &list.Items[i]
		if len(req.Status.Certificate) == 0 {
			block, _ := pem.Decode(req.Spec.Request)
			if block == nil {
				return fmt.Errorf("CSR %s: no PEM request", req.Name)
			}
			cr, err := x509.ParseCertificateRequest(block.Bytes)
			if err != nil {
				return fmt.Errorf("CSR %s: %w", req.Name, err)
			}
			cert, ok := decide(cr)
			if !ok {
				continue
			}
			if req.Status.Certificate, err = ca.sign(cert); err != nil {
				return fmt.Errorf("CSR %s: %w", req.Name, err)
			}
			req.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{{
				Type: certificatesv1.CertificateApproved, Status: "True", Reason: "AutoApproved",
			}}
		}
		_, _ = csrs.UpdateStatus(ctx, req, metav1.UpdateOptions{})
	}
	return nil
}

// NewClientset is a fake clientset that names CSRs from their generateName and gives them
// UIDs, as the API server does.
func NewClientset() *fake.Clientset {
	c := fake.NewClientset()
	var n atomic.Int32
	c.PrependReactor("create", "certificatesigningrequests", func(a k8stesting.Action) (bool, runtime.Object, error) {
		obj := a.(k8stesting.CreateAction).GetObject().(*certificatesv1.CertificateSigningRequest)
		if obj.Name == "" {
			obj.Name = fmt.Sprintf("%s%d", obj.GenerateName, n.Add(1))
		}
		obj.UID = types.UID("uid-" + obj.Name)
		return false, nil, nil
	})
	return c
}
