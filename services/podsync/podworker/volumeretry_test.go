package podworker

import (
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// A pod whose volumes are not ready is tried again soon at first, then less often.
func TestVolumeRetry(t *testing.T) {
	for n, want := range map[int]time.Duration{0: 250 * time.Millisecond, 1: 250 * time.Millisecond, 2: 500 * time.Millisecond, 3: time.Second, 5: 4 * time.Second, 6: 5 * time.Second, 100: 5 * time.Second} {
		if got := volumeRetry(n); got != want {
			t.Errorf("volumeRetry(%d) = %s, want %s", n, got, want)
		}
	}
}

// The crash-loop backoff: 10 s doubling to maxContainerRestartPeriod, from the cap when
// the cap is shorter.
func TestCrashLoopBackOffCap(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	for max, want := range map[time.Duration][]time.Duration{
		0:                {10 * time.Second, 20 * time.Second, 40 * time.Second},
		30 * time.Second: {10 * time.Second, 20 * time.Second, 30 * time.Second},
		2 * time.Second:  {2 * time.Second, 2 * time.Second},
	} {
		b := newCrashLoopBackOff(clk, max)
		for i, w := range want {
			b.Next("c", clk.Now())
			if got := b.Get("c"); got != w {
				t.Errorf("max %s: backoff %d = %s, want %s", max, i+1, got, w)
			}
		}
	}
}
