package ownership

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatalf("this test changes file groups and must run as root (CAP_CHOWN); running as euid %d", os.Geteuid())
	}
}

func stat(t *testing.T, path string) (gid uint32, mode uint32) {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Gid, st.Mode & 0o7777
}

// tree makes a volume: a file, a set-user-ID file, a directory with a file, and a link to
// a directory outside the volume that holds a file of its own.
func tree(t *testing.T) (vol, outside string) {
	t.Helper()
	root := t.TempDir()
	vol, outside = filepath.Join(root, "vol"), filepath.Join(root, "outside")
	for _, d := range []string{vol, filepath.Join(vol, "sub"), outside} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for path, mode := range map[string]os.FileMode{
		filepath.Join(vol, "file"):        0o600,
		filepath.Join(vol, "suid"):        0o755 | os.ModeSetuid,
		filepath.Join(vol, "sub", "deep"): 0o400,
		filepath.Join(outside, "private"): 0o600,
	} {
		if err := os.WriteFile(path, nil, 0); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(outside, filepath.Join(vol, "link")); err != nil {
		t.Fatal(err)
	}
	return vol, outside
}

func TestSetAsTheKubelet(t *testing.T) {
	requireRoot(t)
	for _, tc := range []struct {
		name string
		ro   bool
		want map[string]uint32 // path below the volume → mode
	}{
		{name: "read-write", want: map[string]uint32{
			".": 0o2770, "file": 0o660, "suid": 0o4775, "sub": 0o2770, "sub/deep": 0o660,
		}},
		{name: "read-only", ro: true, want: map[string]uint32{
			".": 0o2750, "file": 0o640, "suid": 0o4755, "sub": 0o2750, "sub/deep": 0o440,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vol, outside := tree(t)
			if RootMatches(vol, 2000, tc.ro) {
				t.Fatal("RootMatches before Set")
			}
			if err := Set(vol, 2000, tc.ro); err != nil {
				t.Fatal(err)
			}
			for rel, mode := range tc.want {
				gid, got := stat(t, filepath.Join(vol, rel))
				if gid != 2000 || got != mode {
					t.Errorf("%s: gid %d mode %#o, want 2000 and %#o", rel, gid, got, mode)
				}
			}
			if gid, _ := stat(t, filepath.Join(vol, "link")); gid != 2000 {
				t.Errorf("the link's gid %d, want 2000", gid)
			}
			for _, p := range []string{outside, filepath.Join(outside, "private")} {
				if gid, mode := stat(t, p); gid == 2000 || mode&0o070 != 0 {
					t.Errorf("%s outside the volume changed through the link: gid %d mode %#o", p, gid, mode)
				}
			}
			if !RootMatches(vol, 2000, tc.ro) {
				t.Error("RootMatches after Set: false")
			}
			if RootMatches(vol, 3000, tc.ro) {
				t.Error("RootMatches for another group: true")
			}
		})
	}
}

func TestSetNamesWhatFailed(t *testing.T) {
	if err := Set(filepath.Join(t.TempDir(), "none"), 2000, false); err == nil || !os.IsNotExist(unwrapAll(err)) {
		t.Errorf("missing volume: %v, want a not-exist error", err)
	}
	if RootMatches(filepath.Join(t.TempDir(), "none"), 2000, false) {
		t.Error("RootMatches of a missing directory")
	}
}

func unwrapAll(err error) error {
	for {
		u, ok := err.(interface{ Unwrap() error })
		if !ok || u.Unwrap() == nil {
			return err
		}
		err = u.Unwrap()
	}
}
