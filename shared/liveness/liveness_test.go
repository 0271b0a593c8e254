package liveness

import (
	"strings"
	"testing"
	"time"
)

func TestStuckLoopsFailTheCheck(t *testing.T) {
	now := time.Date(2026, 11, 25, 6, 0, 0, 0, time.UTC)
	l := New(func() time.Time { return now })
	if err := l.Check(); err != nil {
		t.Fatalf("no loops: %v", err)
	}
	l.Watch("lease", time.Minute)
	l.Watch("status", 5*time.Minute)
	now = now.Add(50 * time.Second)
	l.Beat("lease")
	l.Beat("unknown")
	if err := l.Check(); err != nil {
		t.Fatalf("both within bounds: %v", err)
	}
	now = now.Add(2 * time.Minute)
	err := l.Check()
	if err == nil || !strings.Contains(err.Error(), "lease has not turned for 2m0s (at most 1m0s)") || strings.Contains(err.Error(), "status") {
		t.Fatalf("lease idle for 2m: %v, want only lease named", err)
	}
	l.Beat("lease")
	now = now.Add(3 * time.Minute)
	l.Beat("lease")
	if err := l.Check(); err == nil || !strings.Contains(err.Error(), "status has not turned") {
		t.Fatalf("status idle past 5m: %v", err)
	}
}
