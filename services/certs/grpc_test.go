package certs

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	certsv1 "github.com/unitlet/unitlet/proto/unitlet/certs/v1"
	"github.com/unitlet/unitlet/shared/pki/pkitest"
)

func TestServerListsAndRotates(t *testing.T) {
	f := newFixture(t)
	now := f.clock.Now()
	old := f.install(t, f.clientStore(), pkitest.Cert{NotBefore: now.Add(-time.Minute), NotAfter: now.Add(24 * time.Hour)})
	s := NewServer(f.start(t))
	f.waitFor(t, KindClient, "valid", func(c Certificate) bool { return c.State == "valid" })

	list, err := s.ListCertificates(context.Background(), &certsv1.ListCertificatesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	cs := list.GetCertificates()
	if len(cs) != 2 {
		t.Fatalf("%d certificates", len(cs))
	}
	c := cs[0]
	if c.GetKind() != certsv1.CertificateKind_CERTIFICATE_KIND_CLIENT || c.GetSerial() != old.SerialNumber.String() ||
		c.GetSubject() != "CN=system:node:node-a,O=system:nodes" || c.GetIssuer() != "CN=test-cluster-ca" ||
		!c.GetNotAfter().AsTime().Equal(old.NotAfter) || !c.GetNextRotation().AsTime().Equal(rotationDeadline(old, 0.5)) ||
		c.GetState() != "valid" || c.GetLastRotation() == nil || c.GetPath() != f.clientStore().CurrentPath() {
		t.Fatalf("client certificate %v", c)
	}
	if sv := cs[1]; sv.GetKind() != certsv1.CertificateKind_CERTIFICATE_KIND_SERVING || sv.GetNotAfter() != nil || sv.GetState() == "" {
		t.Fatalf("serving certificate %v", sv)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := s.Rotate(ctx, &certsv1.RotateRequest{Kind: certsv1.CertificateKind_CERTIFICATE_KIND_CLIENT})
	if err != nil || resp.GetCertificate().GetSerial() == old.SerialNumber.String() {
		t.Fatalf("Rotate: %v, %v", resp, err)
	}
	for kind, want := range map[certsv1.CertificateKind]codes.Code{
		certsv1.CertificateKind_CERTIFICATE_KIND_SERVING:     codes.FailedPrecondition,
		certsv1.CertificateKind_CERTIFICATE_KIND_UNSPECIFIED: codes.InvalidArgument,
	} {
		if _, err := s.Rotate(ctx, &certsv1.RotateRequest{Kind: kind}); status.Code(err) != want {
			t.Errorf("Rotate(%s): %v, want %s", kind, err, want)
		}
	}
}
