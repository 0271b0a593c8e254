package pki

import (
	"strings"
	"testing"
	"time"

	"github.com/unitlet/unitlet/shared/envconfig"
)

func TestLifetimeSettings(t *testing.T) {
	for _, tc := range []struct {
		value   string
		want    time.Duration
		wantErr string
	}{
		{value: "", want: 0},
		{value: "10m", want: 10 * time.Minute},
		{value: "720h", want: 720 * time.Hour},
		{value: "5m", wantErr: "UNITLET_CERTIFICATE_LIFETIME=5m0s is shorter than 10m0s"},
		{value: "a week", wantErr: "UNITLET_CERTIFICATE_LIFETIME"},
	} {
		environ := map[string]string{}
		if tc.value != "" {
			environ["UNITLET_CERTIFICATE_LIFETIME"] = tc.value
		}
		var s LifetimeSettings
		err := envconfig.Parse(&s, environ)
		if err == nil {
			err = s.Validate()
		}
		got := s.CertificateLifetime
		switch {
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%q: error %v, want one containing %q", tc.value, err, tc.wantErr)
		case tc.wantErr == "" && (err != nil || got != tc.want):
			t.Errorf("%q: got %s, %v, want %s", tc.value, got, err, tc.want)
		}
	}
}
