package hostpath

import (
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func typ(t corev1.HostPathType) *corev1.HostPathType { return &t }

// paths makes one of each kind of file in a temporary directory.
func paths(t *testing.T) (dir, file, sock string) {
	t.Helper()
	root := t.TempDir()
	dir = filepath.Join(root, "dir")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	file = filepath.Join(root, "file")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Socket paths are limited to 108 bytes; a short directory keeps it under.
	sockDir, err := os.MkdirTemp("", "hp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	sock = filepath.Join(sockDir, "s")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return dir, file, sock
}

func TestCheckTypes(t *testing.T) {
	dir, file, sock := paths(t)
	missing := filepath.Join(t.TempDir(), "missing")
	const char = "/dev/null"
	link := filepath.Join(t.TempDir(), "link-to-dir")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name    string
		path    string
		typ     *corev1.HostPathType
		wantErr string // substring; "" for success
	}{
		{"nil type checks nothing", missing, nil, ""},
		{"unset type checks nothing", missing, typ(corev1.HostPathUnset), ""},

		{"directory", dir, typ(corev1.HostPathDirectory), ""},
		{"directory through a symlink", link, typ(corev1.HostPathDirectory), ""},
		{"file is not a directory", file, typ(corev1.HostPathDirectory), file + " is not a directory"},
		{"missing is not a directory", missing, typ(corev1.HostPathDirectory), missing + " is not a directory"},
		{"directory or create on a file", file, typ(corev1.HostPathDirectoryOrCreate), file + " is not a directory"},
		{"directory or create on a directory", dir, typ(corev1.HostPathDirectoryOrCreate), ""},

		{"file", file, typ(corev1.HostPathFile), ""},
		{"directory is not a file", dir, typ(corev1.HostPathFile), dir + " is not a file"},
		{"socket is not a file", sock, typ(corev1.HostPathFile), sock + " is not a file"},
		{"missing is not a file", missing, typ(corev1.HostPathFile), missing + " is not a file"},
		{"file or create on a directory", dir, typ(corev1.HostPathFileOrCreate), dir + " is not a file"},
		{"file or create on a file", file, typ(corev1.HostPathFileOrCreate), ""},

		{"socket", sock, typ(corev1.HostPathSocket), ""},
		{"file is not a socket", file, typ(corev1.HostPathSocket), file + " is not a socket file"},

		{"char device", char, typ(corev1.HostPathCharDev), ""},
		{"file is not a char device", file, typ(corev1.HostPathCharDev), file + " is not a character device"},
		{"char device is not a block device", char, typ(corev1.HostPathBlockDev), char + " is not a block device"},
		{"directory is not a block device", dir, typ(corev1.HostPathBlockDev), dir + " is not a block device"},
		{"char device is not a file", char, typ(corev1.HostPathFile), char + " is not a file"},

		{"unknown type", dir, typ("Fifo"), "Fifo is an invalid volume type"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Check(tt.path, tt.typ)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Check(%s, %v) = %v, want nil", tt.path, tt.typ, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Check(%s, %v) = %v, want an error containing %q", tt.path, tt.typ, err, tt.wantErr)
			}
			if tt.wantErr != "" && strings.Contains(tt.wantErr, "is not") && !strings.HasPrefix(err.Error(), "hostPath type check failed: ") {
				t.Errorf("error %q does not start as the kubelet's", err)
			}
		})
	}
}

// TestBlockDevice needs a block device; /dev/loop0 or any block device under /dev serves.
func TestBlockDevice(t *testing.T) {
	entries, err := os.ReadDir("/dev")
	if err != nil {
		t.Fatal(err)
	}
	var block string
	for _, e := range entries {
		if e.Type()&fs.ModeDevice != 0 && e.Type()&fs.ModeCharDevice == 0 {
			block = filepath.Join("/dev", e.Name())
			break
		}
	}
	if block == "" {
		// No block device node: make one (needs CAP_MKNOD).
		block = filepath.Join(t.TempDir(), "blk")
		if err := mknodBlock(block); err != nil {
			t.Fatalf("no block device under /dev and cannot make one: %v", err)
		}
	}
	if err := Check(block, typ(corev1.HostPathBlockDev)); err != nil {
		t.Fatalf("Check(%s, BlockDevice) = %v", block, err)
	}
	if err := Check(block, typ(corev1.HostPathCharDev)); err == nil {
		t.Fatalf("Check(%s, CharDevice) = nil, want an error", block)
	}
}

func TestDirectoryOrCreateMakesParents(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a", "b", "c")
	if err := Check(path, typ(corev1.HostPathDirectoryOrCreate)); err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if !info.IsDir() {
		t.Fatalf("%s is %v, want a directory", path, info.Mode())
	}
	if got := info.Mode().Perm(); got != 0o755&^umask() {
		t.Errorf("mode %v, want %v", got, 0o755&^umask())
	}
}

func TestFileOrCreate(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	if err := Check(path, typ(corev1.HostPathFileOrCreate)); err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if !info.Mode().IsRegular() || info.Size() != 0 {
		t.Fatalf("%s: mode %v size %d, want an empty regular file", path, info.Mode(), info.Size())
	}
	if got := info.Mode().Perm(); got != 0o644&^umask() {
		t.Errorf("mode %v, want %v", got, 0o644&^umask())
	}

	// An existing file keeps its content.
	if err := os.WriteFile(path, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Check(path, typ(corev1.HostPathFileOrCreate)); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != "keep" {
		t.Errorf("content %q after a second check, want %q", b, "keep")
	}

	// The parent must exist, as with the kubelet.
	orphan := filepath.Join(dir, "no-such-dir", "f")
	err = Check(orphan, typ(corev1.HostPathFileOrCreate))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Check(%s) = %v, want a not-exist error", orphan, err)
	}
	if _, err := os.Stat(filepath.Dir(orphan)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("parent was created: %v", err)
	}
}

func TestFileOrCreateDoesNotFollowDanglingLink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "target")
	link := filepath.Join(dir, "link")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if err := Check(link, typ(corev1.HostPathFileOrCreate)); err == nil {
		t.Fatal("Check on a dangling link = nil, want an error")
	}
	if _, err := os.Lstat(target); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the link's target was created: %v", err)
	}
}
