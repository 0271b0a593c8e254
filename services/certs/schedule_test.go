package certs

import (
	"crypto/x509"
	"math/rand/v2"
	"testing"
	"time"
)

func TestRotationDeadlineIsBetween70And90PercentOfTheLifetime(t *testing.T) {
	notBefore := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	leaf := &x509.Certificate{NotBefore: notBefore, NotAfter: notBefore.Add(100 * time.Hour)}
	earliest, latest := notBefore.Add(70*time.Hour), notBefore.Add(90*time.Hour)
	if got := rotationDeadline(leaf, 0); !got.Equal(earliest) {
		t.Errorf("r=0: deadline %s, want %s", got, earliest)
	}
	seen := map[time.Duration]bool{}
	for range 1000 {
		got := rotationDeadline(leaf, rand.Float64())
		if got.Before(earliest) || !got.Before(latest) {
			t.Fatalf("deadline %s is outside [70%%, 90%%) of the lifetime", got.Sub(notBefore))
		}
		seen[got.Sub(notBefore).Round(time.Hour)] = true
	}
	if len(seen) < 15 {
		t.Errorf("deadlines are not spread over the window: %d distinct hours", len(seen))
	}
}

func TestRetryAfterGrowsToTheCapWithJitter(t *testing.T) {
	for _, tc := range []struct {
		failures int
		want     time.Duration
	}{{1, 2 * time.Second}, {2, 4 * time.Second}, {3, 8 * time.Second}, {8, 256 * time.Second}, {9, 5 * time.Minute}, {60, 5 * time.Minute}} {
		if got := retryAfter(tc.failures, 0); got != tc.want {
			t.Errorf("failure %d, no jitter: %s, want %s", tc.failures, got, tc.want)
		}
		if got := retryAfter(tc.failures, 0.999); got < tc.want/2 || got > tc.want {
			t.Errorf("failure %d, jittered: %s, want within [%s, %s]", tc.failures, got, tc.want/2, tc.want)
		}
	}
}
