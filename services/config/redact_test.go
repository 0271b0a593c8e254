package config

import (
	"context"
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"google.golang.org/grpc/peer"

	configv1 "github.com/unitlet/unitlet/proto/unitlet/config/v1"
	"github.com/unitlet/unitlet/shared/peercred"
)

// The staticPodURLHeader values reach root callers of the bus (podsync needs them) and
// nobody else: not /configz, not a non-root caller, not a caller of unknown credentials.
func TestSecretsOnlyForRoot(t *testing.T) {
	f := newFixture(t)
	f.write(t, "config.yaml", baseConfig+"staticPodURL: https://pods.example/node\nstaticPodURLHeader:\n  Authorization: [\"Bearer s3cr3t\"]\n")
	s := f.service(t, nil)
	srv := NewServer(s, nil)
	as := func(uid uint32) context.Context {
		return peer.NewContext(context.Background(), &peer.Peer{AuthInfo: peercred.AuthInfo{UID: uid}})
	}
	get := func(ctx context.Context) string {
		t.Helper()
		r, err := srv.GetConfig(ctx, &configv1.GetConfigRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return string(r.GetConfig().GetKubeletConfiguration())
	}
	if c := get(as(0)); !strings.Contains(c, "s3cr3t") {
		t.Errorf("root: %s, want the header value", c)
	}
	for name, ctx := range map[string]context.Context{"uid 1000": as(1000), "unknown caller": context.Background()} {
		if c := get(ctx); strings.Contains(c, "s3cr3t") || !strings.Contains(c, "Authorization") {
			t.Errorf("%s: %s, want the header named and its value redacted", name, c)
		}
	}
	if !strings.Contains(string(s.Current().GetKubeletConfiguration()), "s3cr3t") {
		t.Error("redacting for a caller changed the configuration in effect")
	}
	rec := httptest.NewRecorder()
	s.ServeConfigz(rec, httptest.NewRequest("GET", "/configz", nil))
	body, _ := io.ReadAll(rec.Body)
	if strings.Contains(string(body), "s3cr3t") || !strings.Contains(string(body), `"kubeletconfig"`) {
		t.Errorf("/configz: %s", body)
	}
}
