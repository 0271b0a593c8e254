package volumes

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// A volume whose driver fails is tried again only after the kubelet's backoff (500 ms,
// doubled each failure), each early try refused without a call naming the wait and the
// last error; a success ends the backoff. A claim not bound yet is read at every try.
func TestFailedOperationsBackOff(t *testing.T) {
	m, f := newClaimsManager(t)
	clk := m.clk.(interface{ Step(time.Duration) })
	fc := &fakeCSI{failSetUps: 2}
	m.csi = fc
	f.bind("c", "pv-c", corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: "d.test", VolumeHandle: "h"}})
	pod := claimPod("uid-backoff", "c", false)
	try := func(wantCalls int, want string) {
		t.Helper()
		_, err := m.Prepare(context.Background(), pod)
		if fc.setUps != wantCalls || (want == "" && err != nil) || (want != "" && (err == nil || !strings.Contains(err.Error(), want))) {
			t.Fatalf("after %d driver calls (want %d): %v, want %q", fc.setUps, wantCalls, err, want)
		}
	}
	try(1, "the driver says no")
	try(1, "no retries permitted until 2023-11-14T22:13:20.5Z (durationBeforeRetry 500ms); the last try failed: the driver says no")
	clk.Step(500 * time.Millisecond)
	try(2, "the driver says no")
	clk.Step(500 * time.Millisecond)
	try(2, "durationBeforeRetry 1s")
	clk.Step(500 * time.Millisecond)
	try(3, "")
	if err := m.backoff.wait(pod.UID, "data"); err != nil {
		t.Errorf("after a success: %v, want no backoff", err)
	}

	// Not bound: no backoff, the claim read at each try.
	f.pvcs["default/c"].Status.Phase = corev1.ClaimPending
	p2 := claimPod("uid-pending", "c", false)
	reads := f.reads
	for i := 0; i < 3; i++ {
		if _, err := m.Prepare(context.Background(), p2); err == nil || !strings.Contains(err.Error(), "PVC is not bound") {
			t.Fatalf("pending claim: %v", err)
		}
	}
	if f.reads-reads != 3 {
		t.Errorf("a pending claim was read %d times in 3 tries, want 3", f.reads-reads)
	}
}
