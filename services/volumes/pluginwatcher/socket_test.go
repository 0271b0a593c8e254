package pluginwatcher

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckSocketRefusesEscapeThroughDirectory(t *testing.T) {
	dir := registryDir(t)
	outside := t.TempDir()
	startPlugin(t, filepath.Join(outside, "x.sock"), csi, "x.csi.example.com")
	// A watched subdirectory swapped for a symbolic link to elsewhere.
	if err := os.Symlink(outside, filepath.Join(dir, "sub")); err != nil {
		t.Fatal(err)
	}
	inside := filepath.Join(dir, "real")
	if err := os.Mkdir(inside, 0o750); err != nil {
		t.Fatal(err)
	}
	startPlugin(t, filepath.Join(inside, "y.sock"), csi, "y.csi.example.com")
	w := New(dir, nil, nil)
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	w.realDir = real

	if _, err := w.checkSocket(filepath.Join(dir, "sub", "x.sock")); err == nil || !strings.Contains(err.Error(), "outside the registration directory") {
		t.Errorf("socket reached through a linked directory: error %v, want it refused as outside", err)
	}
	if _, err := w.checkSocket(filepath.Join(inside, "y.sock")); err != nil {
		t.Errorf("socket in a subdirectory refused: %v", err)
	}
}

func TestWithin(t *testing.T) {
	for _, tc := range []struct {
		path string
		want bool
	}{
		{"/reg", true},
		{"/reg/sub", true},
		{"/reg/..sub", true},
		{"/regular", false},
		{"/", false},
		{"/other/reg", false},
	} {
		if got := within("/reg", tc.path); got != tc.want {
			t.Errorf("within(/reg, %s) = %v, want %v", tc.path, got, tc.want)
		}
	}
}
