package harness

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadStackRuntimeVersion(t *testing.T) {
	for _, f := range []string{"containerd2.yaml", "bench-pods-containerd2.yaml"} {
		s, err := LoadStack(filepath.Join("..", "stacks", f))
		if err != nil {
			t.Fatal(err)
		}
		if s.Runtime.Kind != "containerd" || s.Runtime.Version != Containerd2 {
			t.Errorf("%s runtime %+v, want containerd version %q", f, s.Runtime, Containerd2)
		}
	}
	dir := t.TempDir()
	for body, want := range map[string]string{
		"runtime: {kind: containerd}\n":                   "",
		"runtime: {kind: containerd, version: \"1.6\"}\n": "",
		"runtime: {kind: containerd, version: \"2\"}\n":   "",
		"runtime: {kind: containerd, version: \"1.7\"}\n": `runtime.version "1.7": supported:`,
		"runtime: {version: \"2\"}\n":                     `runtime.version "2": needs runtime.kind containerd`,
	} {
		checkLoadStack(t, dir, body, want)
	}
}

// checkLoadStack loads a stack file of body in dir: with want empty it must load, else fail
// with an error naming the file and saying want.
func checkLoadStack(t *testing.T, dir, body, want string) {
	t.Helper()
	p := filepath.Join(dir, "s.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := LoadStack(p)
	switch {
	case want == "" && err != nil:
		t.Errorf("%q: %v", body, err)
	case want != "" && (err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), p)):
		t.Errorf("%q: error %v, want one naming %s and %q", body, err, p, want)
	}
}
