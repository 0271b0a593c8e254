package volumes

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestMeasureEveryStopsWithItsContext(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1_000_000, 0))
	m := NewManager(ManagerOptions{PodsDir: filepath.Join(t.TempDir(), "pods"), Clock: clk, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- m.MeasureEvery(ctx, time.Minute) }()
	// It measured once at start and waits for the period on the clock.
	for !clk.HasWaiters() {
		time.Sleep(time.Millisecond)
	}
	clk.Step(time.Minute)
	for !clk.HasWaiters() {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("MeasureEvery returned %v", err)
	}
}

// A walk that outlasts a prepare of its pod (the reconcile loop prepares every pod again
// each period, making its volumes anew) still gives the volume its usage: on the vm node a
// million-entry emptyDir took longer to walk than the period, and its usage stayed at the
// empty directory's 4096 bytes for good.
func TestAWalkOutlastingAPrepareKeepsItsResult(t *testing.T) {
	m, _ := newTestManager(t, nil)
	pod := testPod("uid-walk", []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		[]corev1.VolumeMount{{Name: "data", MountPath: "/data"}})
	ctx := context.Background()
	if _, err := m.Prepare(ctx, pod); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(m.podsDir, "uid-walk", "volumes", "kubernetes.io~empty-dir", "data")
	if err := os.WriteFile(filepath.Join(dir, "f"), make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	walks := 0
	m.measuring = func(path string) {
		walks++
		if path != dir {
			t.Errorf("walked %s, want %s", path, dir)
		}
		// The reconcile loop's prepare, while the walk is under way.
		if _, err := m.Prepare(ctx, pod); err != nil {
			t.Error(err)
		}
	}
	m.Measure()
	if walks != 1 {
		t.Fatalf("%d walks, want 1", walks)
	}
	vols := m.List()
	if len(vols) != 1 {
		t.Fatalf("%d volumes listed, want 1: %v", len(vols), vols)
	}
	if got := vols[0].UsedBytes; got < 1<<20 {
		t.Errorf("data: %d bytes used after the walk, want at least the file's 1 MiB", got)
	}
	if vols[0].MeasureTime == nil {
		t.Error("data: no measure time after the walk")
	}
}

// A walk that fails keeps the last usage and says why, once for as long as the error stays.
func TestAFailedWalkIsLoggedOnceAndKeepsTheLastUsage(t *testing.T) {
	var logs strings.Builder
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	m := NewManager(ManagerOptions{PodsDir: filepath.Join(t.TempDir(), "pods"), Clock: clk, Log: slog.New(slog.NewTextHandler(&logs, nil))})
	pod := testPod("uid-gone", []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		[]corev1.VolumeMount{{Name: "data", MountPath: "/data"}})
	if _, err := m.Prepare(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	m.Measure()
	before := m.List()[0].UsedBytes
	if before <= 0 {
		t.Fatalf("data: %d bytes used, want the directory's blocks", before)
	}
	dir := filepath.Join(m.podsDir, "uid-gone", "volumes", "kubernetes.io~empty-dir", "data")
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	m.Measure()
	m.Measure()
	if n := strings.Count(logs.String(), "measure a volume's usage"); n != 1 {
		t.Errorf("%d warnings for two failed walks, want 1:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "volume=data") || !strings.Contains(logs.String(), dir) {
		t.Errorf("the warning names neither the volume nor its path:\n%s", logs.String())
	}
	if got := m.List()[0].UsedBytes; got != before {
		t.Errorf("data: %d bytes used after a failed walk, want the last usage %d", got, before)
	}
	if err := os.Mkdir(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	m.Measure()
	if !strings.Contains(logs.String(), "measured a volume's usage again") {
		t.Errorf("no word that the walks succeed again:\n%s", logs.String())
	}
}

// A volume set up between two periods is measured within freshDelay, not at the next
// period; the volumes measured already are not walked again for it.
func TestNewVolumesAreMeasuredSoon(t *testing.T) {
	m, clk := newTestManager(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- m.MeasureEvery(ctx, time.Hour) }()
	for !clk.HasWaiters() {
		time.Sleep(time.Millisecond)
	}
	pod := testPod("uid-fresh", []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}, nil)
	if _, err := m.Prepare(ctx, pod); err != nil {
		t.Fatal(err)
	}
	measured := func() bool {
		for _, v := range m.List() {
			if v.GetMeasureTime() != nil {
				return true
			}
		}
		return false
	}
	// At most 20 steps: 40 s of the clock, far from the hour's period.
	for i := 0; i < 20 && !measured(); i++ {
		clk.Step(freshDelay)
		time.Sleep(20 * time.Millisecond)
	}
	if !measured() {
		t.Fatal("a new volume was not measured within freshDelay steps of the clock")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
