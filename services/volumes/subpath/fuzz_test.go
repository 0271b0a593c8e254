package subpath

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzResolve: whatever subPath a pod spec carries, Resolve answers a path inside the
// volume or a refusal, never a path outside it, even through the volume's own symlinks.
func FuzzResolve(f *testing.F) {
	for _, seed := range []string{"a", "a/b/c", "..", "../x", "a/../../b", "/etc", "up", "up/x", "in/../in", "loop", "./a", "a//b", "..data/key", "\x00"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, sub string) {
		root := t.TempDir()
		if err := os.MkdirAll(filepath.Join(root, "in", "deep"), 0o755); err != nil {
			t.Fatal(err)
		}
		for link, target := range map[string]string{"up": "../..", "in/back": "../in", "abs": "/etc", "loop": "loop"} {
			if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
				t.Fatal(err)
			}
		}
		got, err := Resolve(root, sub)
		if err != nil {
			var re *RefusedError
			if errors.As(err, &re) && re.SubPath != sub {
				t.Errorf("refusal names %q, want %q", re.SubPath, sub)
			}
			return
		}
		real, _ := filepath.EvalSymlinks(root)
		if got != real && !strings.HasPrefix(got, real+"/") {
			t.Errorf("Resolve(%q) = %q, outside the volume %q", sub, got, real)
		}
	})
}
