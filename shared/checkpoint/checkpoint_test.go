package checkpoint

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/unitlet/unitlet/shared/checkpoint/checkpointtest"
)

func TestWriteReadRoundTrip(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "state"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Read("pods"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("read before write: got %v, want ErrNotFound", err)
	}
	for _, want := range []string{"first", "", "second\nwith\nlines"} {
		if err := s.Write("pods", []byte(want)); err != nil {
			t.Fatal(err)
		}
		got, err := s.Read("pods")
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Fatalf("read %q, want %q", got, want)
		}
	}
	fi, err := os.Stat(filepath.Join(s.Dir(), "pods"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode().Perm())
	}
	names, err := s.List()
	if err != nil || len(names) != 1 || names[0] != "pods" {
		t.Fatalf("list = %v, %v; want [pods]", names, err)
	}
}

func TestCorruptCheckpointIsSetAside(t *testing.T) {
	for name, mangle := range map[string]func([]byte) []byte{
		"flipped byte": func(b []byte) []byte { b[len(b)-1] ^= 1; return b },
		"truncated":    func(b []byte) []byte { return b[:len(b)-3] },
		"no header":    func([]byte) []byte { return []byte("garbage") },
		"empty file":   func([]byte) []byte { return nil },
	} {
		t.Run(name, func(t *testing.T) {
			s, err := Open(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Write("gen", []byte("payload")); err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(s.Dir(), "gen")
			raw, _ := os.ReadFile(p)
			if err := os.WriteFile(p, mangle(raw), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err = s.Read("gen")
			var ce *CorruptError
			if !errors.As(err, &ce) {
				t.Fatalf("read corrupt: got %v, want *CorruptError", err)
			}
			if _, err := os.Stat(ce.MovedTo); err != nil {
				t.Errorf("set-aside file: %v", err)
			}
			if !strings.Contains(err.Error(), "gen") {
				t.Errorf("error %q does not name the checkpoint", err)
			}
			if _, err := s.Read("gen"); !errors.Is(err, ErrNotFound) {
				t.Errorf("second read: got %v, want ErrNotFound", err)
			}
			if names, _ := s.List(); len(names) != 0 {
				t.Errorf("list after set-aside = %v, want none", names)
			}
			// The store keeps working.
			if err := s.Write("gen", []byte("again")); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestReadJSONUndecodableIsSetAside(t *testing.T) {
	s, _ := Open(t.TempDir())
	if err := s.Write("state", []byte("not json")); err != nil {
		t.Fatal(err)
	}
	var v struct{ A int }
	var ce *CorruptError
	if err := s.ReadJSON("state", &v); !errors.As(err, &ce) {
		t.Fatalf("got %v, want *CorruptError", err)
	}
	if err := s.WriteJSON("state", struct{ A int }{7}); err != nil {
		t.Fatal(err)
	}
	if err := s.ReadJSON("state", &v); err != nil || v.A != 7 {
		t.Fatalf("ReadJSON = %v, %+v", err, v)
	}
}

func TestBadNames(t *testing.T) {
	s, _ := Open(t.TempDir())
	for _, n := range []string{"", "a/b", "../x", ".hidden", "x.corrupt-1"} {
		if err := s.Write(n, nil); err == nil {
			t.Errorf("Write(%q) succeeded", n)
		}
	}
}

func TestWriteLeavesNoTemporaryFiles(t *testing.T) {
	s, _ := Open(t.TempDir())
	for i := 0; i < 5; i++ {
		if err := s.Write("x", []byte("data")); err != nil {
			t.Fatal(err)
		}
	}
	entries, _ := os.ReadDir(s.Dir())
	if len(entries) != 1 {
		t.Fatalf("directory holds %d entries, want 1", len(entries))
	}
}

// FuzzDecode feeds arbitrary file contents to the reader: it must never panic, and whatever
// it accepts must be exactly what Write would have produced for the returned data.
func FuzzDecode(f *testing.F) {
	f.Add(encode([]byte("payload")))
	f.Add(encode(nil))
	f.Add([]byte(header + "00\nx"))
	f.Add([]byte("\n"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, raw []byte) {
		data, reason := decode(raw)
		if reason != "" {
			return
		}
		if !bytes.Equal(encode(data), raw) {
			t.Fatalf("accepted %q, which Write would not produce", raw)
		}
	})
}

// A temporary file a killed writer left (fault run 22: unitlet-eviction SIGKILLed between
// the write and the rename) is removed by the next Open once it is a minute old; a fresh
// one, maybe another writer's in flight, stays.
func TestOpenRemovesStaleTemporaryFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	if _, err := Open(dir); err != nil {
		t.Fatal(err)
	}
	temps := checkpointtest.LeaveTemps(t, dir, "eviction-state")
	if _, err := Open(dir); err != nil {
		t.Fatal(err)
	}
	temps.Swept(t)
}
