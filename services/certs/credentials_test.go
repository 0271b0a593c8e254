package certs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/rest"
)

func TestOtherCredentials(t *testing.T) {
	dir := t.TempDir()
	link := filepath.Join(dir, "pki", "kubelet-client-current.pem")
	if err := os.MkdirAll(filepath.Dir(link), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(link, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "admin.pem")
	for _, tc := range []struct {
		tls  rest.TLSClientConfig
		want string
	}{
		{rest.TLSClientConfig{CertFile: link, KeyFile: link}, ""},
		{rest.TLSClientConfig{CertFile: filepath.Join(dir, "pki", ".", "kubelet-client-current.pem")}, ""},
		{rest.TLSClientConfig{CertData: []byte("pem")}, "inline"},
		{rest.TLSClientConfig{}, "without a client certificate"},
		{rest.TLSClientConfig{CertFile: other}, "admin.pem"},
	} {
		got := otherCredentials(&rest.Config{TLSClientConfig: tc.tls}, link)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%+v: %q, want %q", tc.tls, got, tc.want)
		}
	}
}
