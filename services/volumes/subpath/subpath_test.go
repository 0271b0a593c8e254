package subpath

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// volume builds a volume root below a parent that also holds an "outside" directory a
// subPath must never reach.
//
//	root/a/b/file
//	root/..v1/cfg            root/..data -> ..v1     root/cfg -> ..data/cfg
//	root/inside -> a/b       root/dot -> .           root/file
//	root/abs -> /etc         root/a/abs -> <parent>/outside (absolute, pointing outside)
//	root/up -> ../outside    root/a/up -> ../../outside     root/a/deep -> ../a/../../outside
//	root/loop -> loop        root/dangling -> nowhere/x     root/a/back -> ../a/b
func volume(t *testing.T) string {
	t.Helper()
	parent := t.TempDir()
	root := filepath.Join(parent, "root")
	mk := func(p string) {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mk(filepath.Join(parent, "outside"))
	mk(filepath.Join(root, "a/b"))
	mk(filepath.Join(root, "..v1"))
	write := func(p string) {
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(parent, "outside/secret"))
	write(filepath.Join(root, "a/b/file"))
	write(filepath.Join(root, "..v1/cfg"))
	write(filepath.Join(root, "file"))
	for link, target := range map[string]string{
		"..data":   "..v1",
		"cfg":      "..data/cfg",
		"inside":   "a/b",
		"dot":      ".",
		"abs":      "/etc",
		"a/abs":    filepath.Join(parent, "outside"),
		"up":       "../outside",
		"a/up":     "../../outside",
		"a/deep":   "../a/../../outside",
		"loop":     "loop",
		"dangling": "nowhere/x",
		"a/back":   "../a/b",
	} {
		if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// resolvers runs each case through openat2 (Resolve) and through the element walk alone,
// which is what a kernel without openat2 uses.
var resolvers = map[string]func(root, subPath string) (string, error){
	"Resolve": Resolve,
	"walk": func(root, subPath string) (string, error) {
		if err := validate(subPath); err != nil {
			return "", err
		}
		rootFD, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return "", err
		}
		defer unix.Close(rootFD)
		fd, err := walk(rootFD, root, subPath)
		if err != nil {
			return "", err
		}
		defer unix.Close(fd)
		return os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	},
}

func TestResolveAccepts(t *testing.T) {
	for name, resolve := range resolvers {
		t.Run(name, func(t *testing.T) {
			root := volume(t)
			for subPath, want := range map[string]string{
				"a":             "a",
				"a/b/file":      "a/b/file",
				"./a//b/":       "a/b",
				"cfg":           "..v1/cfg",
				"inside/file":   "a/b/file",
				"a/back/file":   "a/b/file",
				"dot/a/b":       "a/b",
				"dot":           "",
				"..data/cfg":    "..v1/cfg",
				"file":          "file",
				"a/b/new/dir":   "a/b/new/dir",
				"fresh":         "fresh",
				"inside/made/x": "a/b/made/x",
			} {
				got, err := resolve(root, subPath)
				if err != nil {
					t.Errorf("%s: %v", subPath, err)
					continue
				}
				if w := filepath.Join(root, want); got != w {
					t.Errorf("%s resolved to %s, want %s", subPath, got, w)
				}
			}
		})
	}
}

func TestResolveRefuses(t *testing.T) {
	cases := map[string][]string{ // subPath: words the error must contain
		"/etc":            {"absolute"},
		"../outside":      {"'..'"},
		"a/../../outside": {"'..'"},
		"a/..":            {"'..'"},
		"":                {"empty"},
		"abs":             {`symlink "abs"`, `"/etc"`},
		"abs/passwd":      {`symlink "abs"`, `"/etc"`},
		"a/abs/secret":    {`symlink "a/abs"`, "outside"},
		"up":              {`symlink "up"`, `"../outside"`},
		"up/secret":       {`symlink "up"`, "outside the volume"},
		"a/up/secret":     {`symlink "a/up"`, `"../../outside"`},
		"a/deep":          {`symlink "a/deep"`},
		"inside/../../up": {"'..'"},
		"loop":            {"symlinks"},
		"dangling":        {`symlink "dangling"`, "missing"},
		"file/x":          {`"file" is not a directory`},
	}
	for name, resolve := range resolvers {
		t.Run(name, func(t *testing.T) {
			root := volume(t)
			for subPath, words := range cases {
				got, err := resolve(root, subPath)
				if err == nil {
					t.Errorf("%q accepted as %s", subPath, got)
					continue
				}
				var refused *RefusedError
				if !errors.As(err, &refused) {
					t.Errorf("%q: error %v is not a RefusedError", subPath, err)
					continue
				}
				msg := err.Error()
				if !strings.Contains(msg, strconv.Quote(subPath)) {
					t.Errorf("%q: error %q does not name the subPath", subPath, msg)
				}
				for _, w := range words {
					if !strings.Contains(msg, w) {
						t.Errorf("%q: error %q does not say %s", subPath, msg, w)
					}
				}
			}
			// Nothing was created outside, and the dangling link made nothing either.
			if _, err := os.Stat(filepath.Join(root, "nowhere")); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("a refused subPath created nowhere/: %v", err)
			}
			entries, _ := os.ReadDir(filepath.Join(filepath.Dir(root), "outside"))
			if len(entries) != 1 {
				t.Errorf("outside holds %d entries, want only its secret", len(entries))
			}
		})
	}
}

func TestResolveCreatesWithRootMode(t *testing.T) {
	for name, resolve := range resolvers {
		t.Run(name, func(t *testing.T) {
			root := volume(t)
			// Setgid and group-writable: bits the umask or mkdir would drop.
			if err := os.Chmod(root, 0o775|fs.ModeSetgid); err != nil {
				t.Fatal(err)
			}
			got, err := resolve(root, "x/y/z")
			if err != nil {
				t.Fatal(err)
			}
			if got != filepath.Join(root, "x/y/z") {
				t.Fatalf("resolved to %s", got)
			}
			for _, p := range []string{"x", "x/y", "x/y/z"} {
				info, err := os.Lstat(filepath.Join(root, p))
				if err != nil {
					t.Fatal(err)
				}
				if !info.IsDir() || info.Mode().Perm() != 0o775 || info.Mode()&fs.ModeSetgid == 0 {
					t.Errorf("%s: mode %v, want a directory drwxrwsr-x", p, info.Mode())
				}
			}
		})
	}
}

func TestOpenGivesDescriptorOfTarget(t *testing.T) {
	root := volume(t)
	f, err := Open(root, "cfg")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var st, want unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	if err := unix.Stat(filepath.Join(root, "..v1/cfg"), &want); err != nil {
		t.Fatal(err)
	}
	if st.Ino != want.Ino || st.Dev != want.Dev {
		t.Fatal("Open(cfg) is not the configMap file behind ..data")
	}
}
