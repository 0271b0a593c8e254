package pki

import (
	"crypto/x509/pkix"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/unitlet/unitlet/shared/pki/pkitest"
)

func TestVerify(t *testing.T) {
	ca := pkitest.NewCA(t)
	now := time.Now()
	key, _, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	other, _, _ := NewKey()
	req := ClientRequest("node-a", 0)

	good := issue(t, ca, key.Public(), req.Subject, now.Add(time.Hour))
	leaf, err := Verify(good, key, req, now)
	if err != nil || leaf.Subject.CommonName != "system:node:node-a" {
		t.Fatalf("Verify of the certificate asked for: %v", err)
	}

	cases := map[string]struct {
		cert []byte
		want string
	}{
		"another key":     {issue(t, ca, other.Public(), req.Subject, now.Add(time.Hour)), "does not match the requested key"},
		"another node":    {issue(t, ca, key.Public(), ClientRequest("node-b", 0).Subject, now.Add(time.Hour)), `CN="system:node:node-b"`},
		"another group":   {issue(t, ca, key.Public(), pkix.Name{CommonName: req.Subject.CommonName, Organization: []string{"system:masters"}}, now.Add(time.Hour)), "system:masters"},
		"expired":         {issue(t, ca, key.Public(), req.Subject, now.Add(-time.Minute)), "expired"},
		"not certificate": {[]byte("garbage"), "no certificate"},
	}
	for name, c := range cases {
		if _, err := Verify(c.cert, key, req, now); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one with %q", name, err, c.want)
		}
	}

	// A serving certificate must carry the requested SANs and the server usage.
	serving := ServingRequest("node-a", []string{"node-a"}, []net.IP{net.ParseIP("192.0.2.1")}, 0)
	if _, err := Verify(good, key, serving, now); err == nil || !strings.Contains(err.Error(), `DNS name "node-a"`) {
		t.Errorf("serving request with a client certificate: %v", err)
	}
}
