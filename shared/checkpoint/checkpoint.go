// Package checkpoint keeps small pieces of a service's state on disk so that a restart finds
// them again. A write is atomic (temporary file, fsync, rename, fsync of the directory): after
// a crash the file holds either the old or the new content. Every file carries a checksum; a
// file that fails it is set aside under a ".corrupt-<time>" name and reported, never trusted.
package checkpoint

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

const header = "unitlet-checkpoint v1 sha256:"

// ErrNotFound is returned by Read for a checkpoint that was never written or was deleted.
var ErrNotFound = errors.New("checkpoint not found")

// CorruptError reports a checkpoint that failed its checksum or format and was moved aside.
type CorruptError struct {
	Name    string
	Reason  string
	MovedTo string
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("checkpoint %s is corrupt (%s); moved aside to %s", e.Name, e.Reason, e.MovedTo)
}

// Store is a directory of named checkpoints.
type Store struct {
	dir string
	now func() time.Time
}

// staleTemp is how old a temporary file of a write must be before Open takes it for one a
// killed writer left: a write takes milliseconds, seconds on a disk under load.
const staleTemp = time.Minute

// tempInfix marks WriteFileAtomic's temporary files: ".<name>.tmp-<random>".
const tempInfix = ".tmp-"

// Open returns the store in dir, creating the directory (mode 0700) when needed. The
// temporary files of writes that never finished (the writer killed between the write and
// the rename) are removed once they are a minute old: nothing reads them, and each kill at
// that moment would leave one more.
func Open(dir string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("open checkpoint store: %w", err)
	}
	RemoveStaleTemps(dir)
	return &Store{dir: dir, now: time.Now}, nil
}

// RemoveStaleTemps removes the temporary files WriteFileAtomic left in dir, writes whose
// writer was killed between the write and the rename, once they are more than a minute
// old. Users of WriteFileAtomic outside a Store call it when they start or before they
// write in dir.
func RemoveStaleTemps(dir string) {
	now := time.Now()
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !e.Type().IsRegular() || !strings.HasPrefix(e.Name(), ".") || !strings.Contains(e.Name(), tempInfix) {
			continue
		}
		if info, err := e.Info(); err == nil && now.Sub(info.ModTime()) > staleTemp {
			_ = os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}

// Dir is the store's directory.
func (s *Store) Dir() string { return s.dir }

func (s *Store) path(name string) (string, error) {
	if name == "" || strings.ContainsAny(name, `/\`) || strings.HasPrefix(name, ".") || strings.Contains(name, ".corrupt-") {
		return "", fmt.Errorf("checkpoint name %q: must be a plain file name, not starting with a dot", name)
	}
	return filepath.Join(s.dir, name), nil
}

// Write replaces the checkpoint name with data, atomically.
func (s *Store) Write(name string, data []byte) error {
	p, err := s.path(name)
	if err != nil {
		return err
	}
	if err := WriteFileAtomic(p, encode(data), 0o600); err != nil {
		return fmt.Errorf("write checkpoint %s: %w", name, err)
	}
	return nil
}

// Read returns the checkpoint's data. A missing checkpoint gives ErrNotFound; a corrupt one is
// moved aside and gives a *CorruptError, so the next Read reports ErrNotFound.
func (s *Store) Read(name string) ([]byte, error) {
	p, err := s.path(name)
	if err != nil {
		return nil, err
	}
	raw, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("read checkpoint %s: %w", name, err)
	}
	data, reason := decode(raw)
	if reason != "" {
		return nil, s.setAside(name, reason)
	}
	return data, nil
}

// setAside renames a corrupt checkpoint out of the way and returns the error that reports it.
func (s *Store) setAside(name, reason string) error {
	p := filepath.Join(s.dir, name)
	aside := fmt.Sprintf("%s.corrupt-%s", p, s.now().UTC().Format("20060102T150405.000000000Z"))
	if err := os.Rename(p, aside); err != nil {
		return fmt.Errorf("checkpoint %s is corrupt (%s) and could not be moved aside: %w", name, reason, err)
	}
	return &CorruptError{Name: name, Reason: reason, MovedTo: aside}
}

func encode(data []byte) []byte {
	sum := sha256.Sum256(data)
	var buf bytes.Buffer
	buf.Grow(len(header) + 65 + len(data))
	buf.WriteString(header)
	buf.WriteString(hex.EncodeToString(sum[:]))
	buf.WriteByte('\n')
	buf.Write(data)
	return buf.Bytes()
}

func decode(raw []byte) (data []byte, reason string) {
	line, data, ok := bytes.Cut(raw, []byte{'\n'})
	if !ok {
		return nil, "no header line"
	}
	want, ok := bytes.CutPrefix(line, []byte(header))
	if !ok {
		return nil, "unknown header"
	}
	sum := sha256.Sum256(data)
	if hex.EncodeToString(sum[:]) != string(want) {
		return nil, "checksum mismatch"
	}
	return data, ""
}

// Delete removes a checkpoint; deleting a missing one is not an error.
func (s *Store) Delete(name string) error {
	p, err := s.path(name)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("delete checkpoint %s: %w", name, err)
	}
	return syncDir(s.dir)
}

// List returns the names of the checkpoints in the store, sorted; set-aside corrupt files and
// temporary files are not listed.
func (s *Store) List() ([]string, error) {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("list checkpoints: %w", err)
	}
	var names []string
	for _, e := range entries {
		n := e.Name()
		if e.Type().IsRegular() && !strings.HasPrefix(n, ".") && !strings.Contains(n, ".corrupt-") {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names, nil
}

// WriteJSON stores v as JSON.
func (s *Store) WriteJSON(name string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("write checkpoint %s: %w", name, err)
	}
	return s.Write(name, data)
}

// ReadJSON loads a checkpoint written by WriteJSON into v. Besides Read's errors, a payload
// that passes its checksum but does not decode into v is set aside as corrupt too.
func (s *Store) ReadJSON(name string, v any) error {
	data, err := s.Read(name)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return s.setAside(name, "does not decode: "+err.Error())
	}
	return nil
}

// WriteFileAtomic replaces path with data: it writes a temporary file in the same directory,
// fsyncs it, renames it over path and fsyncs the directory.
func WriteFileAtomic(path string, data []byte, perm os.FileMode) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+tempInfix+"*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // a no-op once renamed
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
