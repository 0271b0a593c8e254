package cgroupfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func write(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRead(t *testing.T) {
	// The v1 "no limit": precise as a uint64, where a float64 would round it.
	if v, err := Read[uint64](write(t, "9223372036854771712\n")); err != nil || v != 9223372036854771712 {
		t.Errorf("Read[uint64] = %d, %v", v, err)
	}
	if v, err := Read[int64](write(t, "-5\n")); err != nil || v != -5 {
		t.Errorf("Read[int64] = %d, %v", v, err)
	}
	if v, err := Read[float64](write(t, "1.5")); err != nil || v != 1.5 {
		t.Errorf("Read[float64] = %v, %v", v, err)
	}
	p := write(t, "max\n")
	if _, err := Read[uint64](p); err == nil || !strings.Contains(err.Error(), p) {
		t.Errorf("Read of \"max\": %v, want an error naming the file", err)
	}
	if _, err := Read[uint64](filepath.Join(t.TempDir(), "none")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Read of a missing file: %v, want fs.ErrNotExist", err)
	}
}

func TestKeyValues(t *testing.T) {
	kv, err := KeyValues[uint64](write(t, "cache 4096\nrss 8192\nbad x\nnovalue\nhierarchical_memory_limit 9223372036854771712\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(kv) != 3 || kv["cache"] != 4096 || kv["rss"] != 8192 || kv["hierarchical_memory_limit"] != 9223372036854771712 {
		t.Errorf("KeyValues = %v", kv)
	}
	if _, err := KeyValues[int64](filepath.Join(t.TempDir(), "none")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("KeyValues of a missing file: %v, want fs.ErrNotExist", err)
	}
}
