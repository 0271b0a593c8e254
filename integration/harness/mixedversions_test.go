package harness

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// PrevBinDir refuses an unset or incomplete UNITLET_PREV_BIN_DIR, saying to run make
// prev-release, and takes a complete one.
func TestPrevBinDirSaysHowToGetTheBinaries(t *testing.T) {
	t.Setenv("UNITLET_PREV_BIN_DIR", "")
	if _, err := PrevBinDir(); err == nil || !strings.Contains(err.Error(), "make prev-release") {
		t.Errorf("unset: %v, want an error naming make prev-release", err)
	}
	dir := t.TempDir()
	t.Setenv("UNITLET_PREV_BIN_DIR", dir)
	for _, b := range prevBinaries[1:] {
		if err := os.WriteFile(filepath.Join(dir, b), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := PrevBinDir(); err == nil || !strings.Contains(err.Error(), prevBinaries[0]) || !strings.Contains(err.Error(), "make prev-release") {
		t.Errorf("without %s: %v, want an error naming it and make prev-release", prevBinaries[0], err)
	}
	if err := os.WriteFile(filepath.Join(dir, prevBinaries[0]), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := PrevBinDir(); err != nil || got != dir {
		t.Errorf("complete: %q %v, want %s", got, err, dir)
	}
}

// BinaryBuild reads the version and commit from --version's line.
func TestBinaryBuildReadsVersionAndCommit(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "unitlet-podsync")
	script := "#!/bin/sh\necho 'unitlet-podsync v0.1.0-3-gabcdef0 (commit abcdef0123, go1.26.8 linux/amd64)'\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := BinaryBuild(bin)
	if err != nil || b != (Build{Version: "v0.1.0-3-gabcdef0", Commit: "abcdef0123"}) {
		t.Errorf("BinaryBuild: %+v %v", b, err)
	}
	if err := os.WriteFile(bin, []byte("#!/bin/sh\necho unitlet-podsync\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := BinaryBuild(bin); err == nil {
		t.Errorf("BinaryBuild of a line without version and commit: no error")
	}
}
