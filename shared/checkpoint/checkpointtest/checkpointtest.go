// Package checkpointtest helps tests of code that writes with checkpoint.WriteFileAtomic.
package checkpointtest

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Temps are two temporary files of WriteFileAtomic's naming in one directory: Stale as a
// writer killed two minutes ago left it, Fresh as a write in progress has it.
type Temps struct{ Stale, Fresh string }

// LeaveTemps writes a stale and a fresh temporary file for the file name in dir.
func LeaveTemps(t *testing.T, dir, name string) Temps {
	t.Helper()
	tt := Temps{Stale: filepath.Join(dir, "."+name+".tmp-2894460176"), Fresh: filepath.Join(dir, "."+name+".tmp-1")}
	for _, p := range []string{tt.Stale, tt.Fresh} {
		if err := os.WriteFile(p, []byte("half a write"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-2 * time.Minute)
	if err := os.Chtimes(tt.Stale, old, old); err != nil {
		t.Fatal(err)
	}
	return tt
}

// Swept fails the test unless the stale file is gone and the fresh one is still there.
func (tt Temps) Swept(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(tt.Stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the stale temporary file %s is still there (%v)", tt.Stale, err)
	}
	if _, err := os.Stat(tt.Fresh); err != nil {
		t.Errorf("the fresh temporary file went: %v", err)
	}
}
