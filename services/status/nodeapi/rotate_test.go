package nodeapi

import (
	"bytes"
	"crypto/tls"
	"log/slog"
	"testing"
	"time"

	certutil "k8s.io/client-go/util/cert"

	"github.com/unitlet/unitlet/shared/pki"
)

func TestRotatingCertificateFollowsTheStore(t *testing.T) {
	store := pki.Store{Dir: t.TempDir(), Prefix: pki.ServerPrefix}
	fallbackPEM, fallbackKey, err := certutil.GenerateSelfSignedCertKey("self-signed", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	fallback, err := tls.X509KeyPair(fallbackPEM, fallbackKey)
	if err != nil {
		t.Fatal(err)
	}
	r := &rotatingCertificate{store: store, fallback: &fallback, log: slog.New(slog.DiscardHandler)}
	serves := func(want *tls.Certificate, what string) {
		t.Helper()
		got, err := r.GetCertificate(nil)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Certificate[0], want.Certificate[0]) {
			t.Fatalf("does not serve %s", what)
		}
	}
	serves(&fallback, "the self-signed certificate before one is issued")

	issue := func(host string) *tls.Certificate {
		certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey(host, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := store.Update(certPEM, keyPEM, time.Now()); err != nil {
			t.Fatal(err)
		}
		c, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		return &c
	}
	first := issue("first")
	r.checked = time.Time{} // skip the once-a-second wait
	serves(first, "the issued certificate")
	second := issue("second")
	// Within a second of the last look the cached one is served; the look is dated now,
	// so that a slow machine's time spent issuing does not count.
	r.checked = time.Now()
	serves(first, "the cached certificate within a second")
	time.Sleep(1100 * time.Millisecond)
	serves(second, "the rotated certificate")
}
