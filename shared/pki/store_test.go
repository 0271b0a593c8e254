package pki

import (
	"crypto/ecdsa"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/unitlet/unitlet/shared/checkpoint"
	"github.com/unitlet/unitlet/shared/checkpoint/checkpointtest"
	"github.com/unitlet/unitlet/shared/pki/pkitest"
)

func TestStoreUpdateAndCurrent(t *testing.T) {
	ca := pkitest.NewCA(t)
	s := Store{Dir: filepath.Join(t.TempDir(), "pki"), Prefix: ClientPrefix}
	if _, err := s.Current(); !errors.Is(err, ErrNoCertificate) {
		t.Fatalf("Current of an empty store: %v, want ErrNoCertificate", err)
	}

	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	certPEM, keyPEM, key := nodeCert(t, ca, "node-a", now.Add(time.Hour))
	first, err := s.Update(certPEM, keyPEM, now)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(s.Dir, "kubelet-client-2030-01-02-03-04-05.pem"); first != want {
		t.Errorf("file %s, want %s", first, want)
	}
	for path, mode := range map[string]os.FileMode{s.Dir: 0o700 | os.ModeDir, first: 0o600} {
		if fi, err := os.Stat(path); err != nil || fi.Mode() != mode {
			t.Errorf("%s: %v (%v), want %v", path, fi.Mode(), err, mode)
		}
	}
	if target, err := os.Readlink(s.CurrentPath()); err != nil || target != filepath.Base(first) {
		t.Errorf("current link -> %q (%v), want the relative %s", target, err, filepath.Base(first))
	}
	cur, err := s.Current()
	if err != nil {
		t.Fatal(err)
	}
	if cur.Leaf == nil || !cur.Leaf.PublicKey.(*ecdsa.PublicKey).Equal(key.Public()) {
		t.Fatal("Current is not the stored certificate with its Leaf")
	}

	// A second update within the same second keeps both files and moves the link.
	certPEM2, keyPEM2, key2 := nodeCert(t, ca, "node-a", now.Add(2*time.Hour))
	second, err := s.Update(certPEM2, keyPEM2, now)
	if err != nil {
		t.Fatal(err)
	}
	if second == first {
		t.Fatal("the second update overwrote the first file")
	}
	if _, err := os.Stat(first); err != nil {
		t.Errorf("the first file is gone: %v", err)
	}
	cur, err = s.Current()
	if err != nil || !cur.Leaf.PublicKey.(*ecdsa.PublicKey).Equal(key2.Public()) {
		t.Fatalf("Current after the second update: %v", err)
	}
	if _, err := os.Lstat(s.CurrentPath() + ".tmp"); !os.IsNotExist(err) {
		t.Errorf("temporary link left behind: %v", err)
	}
}

func TestStoreUpdateRefusesMismatchedKey(t *testing.T) {
	ca := pkitest.NewCA(t)
	s := Store{Dir: t.TempDir(), Prefix: ServerPrefix}
	certPEM, _, _ := nodeCert(t, ca, "node-a", time.Now().Add(time.Hour))
	_, otherKeyPEM, _ := nodeCert(t, ca, "node-a", time.Now().Add(time.Hour))
	if _, err := s.Update(certPEM, otherKeyPEM, time.Now()); err == nil {
		t.Fatal("Update stored a certificate with another key")
	}
	if _, err := s.Current(); !errors.Is(err, ErrNoCertificate) {
		t.Errorf("Current after a refused update: %v", err)
	}
}

func TestStoreCurrentUnusable(t *testing.T) {
	s := Store{Dir: t.TempDir(), Prefix: ClientPrefix}
	if err := os.WriteFile(s.CurrentPath(), []byte("not PEM"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Current(); err == nil || errors.Is(err, ErrNoCertificate) {
		t.Fatalf("Current of garbage: %v, want a parse error", err)
	}
}

func TestStorePrune(t *testing.T) {
	ca := pkitest.NewCA(t)
	s := Store{Dir: t.TempDir(), Prefix: ClientPrefix}
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var files []string
	for i := range 5 {
		certPEM, keyPEM, _ := nodeCert(t, ca, "node-a", start.Add(48*time.Hour))
		f, err := s.Update(certPEM, keyPEM, start.Add(time.Duration(i)*time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	// Point the link back at an old file: Prune keeps it whatever its age.
	if err := os.Remove(s.CurrentPath()); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Base(files[1]), s.CurrentPath()); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(s.Dir, ServerPrefix+"-2020-01-01-00-00-00.pem")
	if err := os.WriteFile(other, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.Prune(2); err != nil {
		t.Fatal(err)
	}
	for i, f := range files {
		_, err := os.Stat(f)
		if kept := i == 1 || i >= 3; kept != (err == nil) {
			t.Errorf("file %d (%s): kept %v, want %v", i, filepath.Base(f), err == nil, kept)
		}
	}
	if _, err := s.Current(); err != nil {
		t.Errorf("Current after Prune: %v", err)
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("Prune removed another store's file: %v", err)
	}
}

func TestWriteFileAtomicReplaces(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	for _, content := range []string{"one", "two"} {
		if err := checkpoint.WriteFileAtomic(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(path); string(b) != content {
			t.Fatalf("content %q, want %q", b, content)
		}
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("%d files in the directory, want 1 (no temporary left)", len(entries))
	}
}

func TestStoreUpdateRemovesTemporaryFilesAKilledWriterLeft(t *testing.T) {
	s := Store{Dir: t.TempDir(), Prefix: ClientPrefix}
	temps := checkpointtest.LeaveTemps(t, s.Dir, "kubelet-client-2030-01-02-03-04-05.pem")
	now := time.Date(2030, 1, 2, 3, 4, 6, 0, time.UTC)
	certPEM, keyPEM, _ := nodeCert(t, pkitest.NewCA(t), "node-a", now.Add(time.Hour))
	if _, err := s.Update(certPEM, keyPEM, now); err != nil {
		t.Fatal(err)
	}
	temps.Swept(t)
}
