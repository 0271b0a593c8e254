package pki

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
	"net"
	"slices"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"

	"github.com/unitlet/unitlet/shared/kubeapi"
)

// NewKey makes an ECDSA P-256 key, as the kubelet does, and its PEM encoding.
func NewKey() (crypto.Signer, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate key: %w", err)
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return key, pem.EncodeToMemory(&pem.Block{Type: keyutil.ECPrivateKeyBlockType, Bytes: der}), nil
}

// Request is what a certificate signing request asks for.
type Request struct {
	// SignerName, e.g. certificatesv1.KubeAPIServerClientKubeletSignerName.
	SignerName string
	Subject    pkix.Name
	DNSNames   []string
	IPs        []net.IP
	Usages     []certificatesv1.KeyUsage
	// Duration asks for a lifetime (CSR expirationSeconds); 0 leaves it to the signer.
	Duration time.Duration
}

// ClientRequest is a node's client certificate request (system:node:<name> in
// system:nodes, signer kube-apiserver-client-kubelet), as the kubelet makes it.
func ClientRequest(nodeName string, d time.Duration) Request {
	return Request{
		SignerName: certificatesv1.KubeAPIServerClientKubeletSignerName,
		Subject:    pkix.Name{CommonName: "system:node:" + nodeName, Organization: []string{"system:nodes"}},
		Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth},
		Duration:   d,
	}
}

// ServingRequest is a node's serving certificate request for its HTTPS API (signer
// kubelet-serving, the hostname and the node's IPs as SANs).
func ServingRequest(nodeName string, hostnames []string, ips []net.IP, d time.Duration) Request {
	return Request{
		SignerName: certificatesv1.KubeletServingSignerName,
		Subject:    pkix.Name{CommonName: "system:node:" + nodeName, Organization: []string{"system:nodes"}},
		DNSNames:   hostnames,
		IPs:        ips,
		Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth},
		Duration:   d,
	}
}

// Submit creates the CSR for key and returns its name and UID.
func Submit(ctx context.Context, c kubeapi.Interface, key crypto.Signer, r Request) (string, string, error) {
	der, err := certutil.MakeCSR(key, &r.Subject, r.DNSNames, r.IPs)
	if err != nil {
		return "", "", fmt.Errorf("make CSR: %w", err)
	}
	req := &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "csr-"},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    der,
			SignerName: r.SignerName,
			Usages:     r.Usages,
		},
	}
	if r.Duration > 0 {
		// The API's floor is 10 minutes; a shorter wish is the signer's to refuse.
		seconds := int32(r.Duration / time.Second)
		req.Spec.ExpirationSeconds = &seconds
	}
	created, err := c.CertificatesV1().CertificateSigningRequests().Create(ctx, req, metav1.CreateOptions{})
	if err != nil {
		return "", "", fmt.Errorf("create CSR for %s: %w", r.SignerName, err)
	}
	return created.Name, string(created.UID), nil
}

// WaitForCertificate waits until the CSR name (of uid) is approved and its certificate
// issued, and returns the certificate; a denied, failed, deleted or replaced CSR is an
// error naming why.
func WaitForCertificate(ctx context.Context, c kubeapi.Interface, name string, uid types.UID) ([]byte, error) {
	csrs := c.CertificatesV1().CertificateSigningRequests()
	byName := fields.OneTermEqualSelector("metadata.name", name).String()
	lw := cache.ToListWatcherWithWatchListSemantics(kubeapi.ListWatch(csrs, func(o *metav1.ListOptions) { o.FieldSelector = byName }), c)
	var issued []byte
	_, err := watchtools.UntilWithSync(ctx, lw, &certificatesv1.CertificateSigningRequest{}, nil, func(ev watch.Event) (bool, error) {
		if ev.Type == watch.Deleted {
			return false, fmt.Errorf("CSR %s was deleted before a certificate was issued", name)
		}
		req, ok := ev.Object.(*certificatesv1.CertificateSigningRequest)
		if !ok || (ev.Type != watch.Added && ev.Type != watch.Modified) {
			return false, nil
		}
		if req.UID != uid {
			return false, fmt.Errorf("CSR %s was replaced (uid %s, ours %s)", name, req.UID, uid)
		}
		approved := false
		for _, cond := range req.Status.Conditions {
			switch cond.Type {
			case certificatesv1.CertificateDenied:
				return false, fmt.Errorf("certificate signing request is denied, reason: %s, message: %s", cond.Reason, cond.Message)
			case certificatesv1.CertificateFailed:
				return false, fmt.Errorf("certificate signing request failed, reason: %s, message: %s", cond.Reason, cond.Message)
			case certificatesv1.CertificateApproved:
				approved = true
			}
		}
		if approved && len(req.Status.Certificate) > 0 {
			issued = req.Status.Certificate
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		return nil, err
	}
	return issued, nil
}

// Verify checks that an issued certificate belongs to key and is the one asked for: the
// leaf's public key, subject, SANs and extended usages. A signer that returns anything else
// is refused, so a node never installs a certificate it did not request.
func Verify(certPEM []byte, key crypto.Signer, r Request, now time.Time) (*x509.Certificate, error) {
	certs, err := ParseCertificates(certPEM)
	if err != nil {
		return nil, fmt.Errorf("issued certificate: %w", err)
	}
	leaf := certs[0]
	pub, ok := leaf.PublicKey.(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(key.Public()) {
		return nil, fmt.Errorf("issued certificate (serial %s) does not match the requested key", leaf.SerialNumber)
	}
	if leaf.Subject.CommonName != r.Subject.CommonName || !slices.Equal(leaf.Subject.Organization, r.Subject.Organization) {
		return nil, fmt.Errorf("issued certificate has subject CN=%q O=%v, requested CN=%q O=%v",
			leaf.Subject.CommonName, leaf.Subject.Organization, r.Subject.CommonName, r.Subject.Organization)
	}
	for _, name := range r.DNSNames {
		if !slices.Contains(leaf.DNSNames, name) {
			return nil, fmt.Errorf("issued certificate lacks the requested DNS name %q", name)
		}
	}
	for _, ip := range r.IPs {
		if !slices.ContainsFunc(leaf.IPAddresses, ip.Equal) {
			return nil, fmt.Errorf("issued certificate lacks the requested IP %s", ip)
		}
	}
	for _, u := range r.Usages {
		want := map[certificatesv1.KeyUsage]x509.ExtKeyUsage{
			certificatesv1.UsageClientAuth: x509.ExtKeyUsageClientAuth,
			certificatesv1.UsageServerAuth: x509.ExtKeyUsageServerAuth,
		}
		if eku, ok := want[u]; ok && !slices.Contains(leaf.ExtKeyUsage, eku) {
			return nil, fmt.Errorf("issued certificate lacks the requested usage %q", u)
		}
	}
	if now.After(leaf.NotAfter) {
		return nil, fmt.Errorf("issued certificate expired at %s", leaf.NotAfter.Format(time.RFC3339))
	}
	return leaf, nil
}

// Issue asks for a certificate for a new key and waits until it is approved and issued
// (or ctx ends, or the CSR is denied or fails). state reports each step for a visible
// progress ("submitted csr-abc12, waiting for approval"). The result is verified against
// the key and the request.
func Issue(ctx context.Context, c kubeapi.Interface, r Request, state func(string)) (certPEM, keyPEM []byte, leaf *x509.Certificate, err error) {
	key, keyPEM, err := NewKey()
	if err != nil {
		return nil, nil, nil, err
	}
	name, uid, err := Submit(ctx, c, key, r)
	if err != nil {
		return nil, nil, nil, err
	}
	if state != nil {
		state(fmt.Sprintf("submitted CSR %s (signer %s), waiting for approval and issuance", name, r.SignerName))
	}
	certPEM, err = WaitForCertificate(ctx, c, name, types.UID(uid))
	if err != nil {
		return nil, nil, nil, fmt.Errorf("CSR %s: %w", name, err)
	}
	leaf, err = Verify(certPEM, key, r, time.Now())
	if err != nil {
		return nil, nil, nil, fmt.Errorf("CSR %s: %w", name, err)
	}
	return certPEM, keyPEM, leaf, nil
}
