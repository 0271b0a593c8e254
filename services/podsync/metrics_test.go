package podsync

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestProcessStartTimeIsThisProcesss(t *testing.T) {
	got := testutil.ToFloat64(processStartTime())
	now := float64(time.Now().Unix())
	if got <= now-24*3600 || got > now+1 {
		t.Errorf("process_start_time_seconds = %v, want a time within the last day (now %v)", got, now)
	}
}
