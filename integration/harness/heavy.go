package harness

import (
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// heavyWaitAtMost bounds the wait for another suite's heavy phase: past it the phase goes
// ahead beside the other, and says so.
const heavyWaitAtMost = 30 * time.Minute

// HeavyPhase keeps the phases that starve a 2-core machine from overlapping, across the
// suites make test runs side by side: the fault suite's schedule, and the vm suite's
// package upgrades under load, its million-link walk and its guest's second boot. Each
// takes one machine-wide lock (a flock in the temp directory) for its length and waits
// while another holds it. Beside one another they missed each other's targets: the guest's
// containerd did not answer Status for 30 s during a dpkg step that took 1m30s beside the
// fault suite's churn (the node NotReady), and a fault suite beside the vm's boot missed
// its invariants. Run one at a time, each meets its targets as it does alone; the wait is
// logged. The lock is released by the returned func or, at the latest, when t ends.
func HeavyPhase(t testing.TB, what string) (release func()) {
	t.Helper()
	path := filepath.Join(os.TempDir(), "unitlet-heavy-phase.lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatalf("%s: the heavy-phase lock %s: %v", what, path, err)
	}
	began := time.Now()
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if err != syscall.EWOULDBLOCK {
			f.Close()
			t.Fatalf("%s: flock %s: %v", what, path, err)
		}
		if time.Since(began) > heavyWaitAtMost {
			t.Logf("%s: another suite's heavy phase has held %s for over %s: going ahead beside it", what, path, heavyWaitAtMost)
			f.Close()
			return func() {}
		}
		time.Sleep(time.Second)
	}
	if waited := time.Since(began); waited > time.Second {
		t.Logf("%s waited %s for another suite's heavy phase to end (%s)", what, waited.Round(time.Second), path)
	}
	var once sync.Once
	release = func() { once.Do(func() { f.Close() }) }
	t.Cleanup(release)
	return release
}
