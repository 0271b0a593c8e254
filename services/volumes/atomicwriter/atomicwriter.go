// Package atomicwriter keeps the files of a configMap, secret, downwardAPI or projected
// volume current without a reader ever seeing a half-written set.
//
// A volume directory managed by a Writer looks like this (the kubelet's layout, which
// applications and tools such as configmap-reload rely on):
//
//	..2026_01_02_15_04_05.123456789   the files of the current version (hidden, 0755)
//	..data -> ..2026_01_02_15_04_05.123456789
//	config.yaml -> ..data/config.yaml one symlink per top-level name of the payload
//	conf.d -> ..data/conf.d
//
// An update writes a complete new timestamped directory, then swaps `..data` in one
// rename(2) of a fresh symlink over it, so every path a reader opens resolves either
// entirely into the old version or entirely into the new one. Top-level symlinks for new
// names are added after the swap, those of removed names are deleted, and finally the old
// directory goes.
//
// The Writer never logs: errors say what failed and carry the log context, never the file
// contents (they are often secrets).
package atomicwriter

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

const (
	// dataDir is the symlink naming the current timestamped directory.
	dataDir = "..data"
	// newDataDir is the symlink prepared beside dataDir and renamed over it.
	newDataDir = "..data_tmp"
	// timestampLayout names a version directory; os.MkdirTemp appends a random suffix.
	timestampLayout = "..2006_01_02_15_04_05."

	maxPathLength     = 4096
	maxFileNameLength = 255
)

// FileProjection is one file of a payload: its content, its permission bits and,
// optionally, its owner.
type FileProjection struct {
	Data []byte
	// Mode holds the permission bits (0..0777) the file gets, umask notwithstanding.
	Mode int32
	// FsUser, when set, is the file's owning uid (the projected token of a pod whose
	// containers all run as one user).
	FsUser *int64
	// FsGroup, when set, is the file's owning gid (the pod's fsGroup); the directories
	// of the version get that group and the setgid bit too.
	FsGroup *int64
}

// Writer writes payloads into one volume directory. Calls to Write for one directory
// must not overlap: the caller serializes them (one sync of a volume at a time).
type Writer struct {
	targetDir  string
	logContext string
	now        func() time.Time
}

// New returns a Writer for targetDir, which must exist. logContext (for example
// "pod default/web volume config") prefixes every error.
func New(targetDir, logContext string) (*Writer, error) {
	info, err := os.Stat(targetDir)
	if err != nil {
		return nil, fmt.Errorf("%s: open volume directory: %w", logContext, err)
	}
	if !info.IsDir() {
		return nil, fmt.Errorf("%s: volume path %s is not a directory", logContext, targetDir)
	}
	return &Writer{targetDir: targetDir, logContext: logContext, now: time.Now}, nil
}

// Write makes the volume directory hold exactly payload, keyed by relative path.
// Nothing is written when every file already has the wanted content, mode and owner and
// no file is to be removed. setPerms, when not nil, is called with the new version
// directory's name (relative to the volume directory) after its files are written and
// before it becomes visible, for ownership rules the payload does not express.
func (w *Writer) Write(payload map[string]FileProjection, setPerms func(subPath string) error) error {
	clean, err := validatePayload(payload)
	if err != nil {
		return fmt.Errorf("%s: invalid payload: %w", w.logContext, err)
	}

	dataPath := filepath.Join(w.targetDir, dataDir)
	oldVersion, err := os.Readlink(dataPath)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s: read %s: %w", w.logContext, dataDir, err)
	}
	if oldVersion != "" && (strings.Contains(oldVersion, "/") || !strings.HasPrefix(oldVersion, "..")) {
		return fmt.Errorf("%s: %s points at %q, not at a version directory", w.logContext, dataDir, oldVersion)
	}

	var oldTopLevel map[string]bool
	write := true
	if oldVersion != "" {
		oldPath := filepath.Join(w.targetDir, oldVersion)
		oldTopLevel, err = topLevelNames(oldPath)
		if err != nil {
			return fmt.Errorf("%s: list current version %s: %w", w.logContext, oldVersion, err)
		}
		same, err := versionMatches(oldPath, clean)
		if err != nil {
			return fmt.Errorf("%s: compare with current version %s: %w", w.logContext, oldVersion, err)
		}
		write = !same
	}

	if write {
		newVersion, err := w.writeVersion(clean, setPerms)
		if err != nil {
			return err
		}
		if err := w.swap(newVersion); err != nil {
			_ = os.RemoveAll(filepath.Join(w.targetDir, newVersion))
			return err
		}
	}

	if err := w.linkTopLevel(clean); err != nil {
		return err
	}
	newTopLevel := make(map[string]bool)
	for p := range clean {
		newTopLevel[topLevel(p)] = true
	}
	for name := range oldTopLevel {
		if !newTopLevel[name] {
			if err := w.unlinkTopLevel(name); err != nil {
				return err
			}
		}
	}

	if write {
		if err := w.removeOldVersions(); err != nil {
			return err
		}
	}
	return nil
}

// validatePayload checks every path and returns the payload keyed by cleaned paths.
func validatePayload(payload map[string]FileProjection) (map[string]FileProjection, error) {
	clean := make(map[string]FileProjection, len(payload))
	for p, file := range payload {
		if err := validatePath(p); err != nil {
			return nil, err
		}
		c := path.Clean(p)
		if _, dup := clean[c]; dup {
			return nil, fmt.Errorf("paths %q and another name the same file %q", p, c)
		}
		if file.Mode < 0 || file.Mode > 0777 {
			return nil, fmt.Errorf("path %q: mode %#o is not within 0..0777", p, file.Mode)
		}
		clean[c] = file
	}
	// A file cannot also be a directory of another file.
	for p := range clean {
		for dir := path.Dir(p); dir != "."; dir = path.Dir(dir) {
			if _, ok := clean[dir]; ok {
				return nil, fmt.Errorf("path %q is a file and the directory of %q", dir, p)
			}
		}
	}
	return clean, nil
}

// validatePath refuses a path that is empty, absolute, too long, climbs with "..", or
// starts with ".." (the names the writer keeps for itself).
func validatePath(p string) error {
	switch {
	case p == "":
		return errors.New("path must not be empty")
	case path.IsAbs(p):
		return fmt.Errorf("path %q must be relative", p)
	case len(p) > maxPathLength:
		return fmt.Errorf("path %q is longer than %d characters", p, maxPathLength)
	}
	elements := strings.Split(p, "/")
	for _, e := range elements {
		if e == ".." {
			return fmt.Errorf("path %q must not contain '..'", p)
		}
		if len(e) > maxFileNameLength {
			return fmt.Errorf("path %q has a name longer than %d characters", p, maxFileNameLength)
		}
	}
	if strings.HasPrefix(path.Clean(p), "..") {
		return fmt.Errorf("path %q must not start with '..'", p)
	}
	if path.Clean(p) == "." {
		return fmt.Errorf("path %q names the volume directory itself", p)
	}
	return nil
}

// topLevel returns the first element of a clean relative path.
func topLevel(p string) string {
	if i := strings.IndexByte(p, '/'); i >= 0 {
		return p[:i]
	}
	return p
}

// topLevelNames lists the entries of a version directory.
func topLevelNames(dir string) (map[string]bool, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	names := make(map[string]bool, len(entries))
	for _, e := range entries {
		names[e.Name()] = true
	}
	return names, nil
}

// versionMatches tells whether the version directory dir holds exactly the files of
// payload, with their content, permission bits and owners.
func versionMatches(dir string, payload map[string]FileProjection) (bool, error) {
	found := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		found++
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if found != len(payload) {
		return false, nil
	}
	for p, want := range payload {
		full := filepath.Join(dir, p)
		info, err := os.Lstat(full)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		if !info.Mode().IsRegular() || info.Mode().Perm() != fs.FileMode(want.Mode) {
			return false, nil
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			if want.FsUser != nil && int64(st.Uid) != *want.FsUser {
				return false, nil
			}
			if want.FsGroup != nil && int64(st.Gid) != *want.FsGroup {
				return false, nil
			}
		}
		have, err := os.ReadFile(full)
		if err != nil {
			return false, err
		}
		if !bytes.Equal(have, want.Data) {
			return false, nil
		}
	}
	return true, nil
}

// writeVersion writes payload into a new timestamped directory and returns its name.
func (w *Writer) writeVersion(payload map[string]FileProjection, setPerms func(string) error) (string, error) {
	dir, err := os.MkdirTemp(w.targetDir, w.now().UTC().Format(timestampLayout))
	if err != nil {
		return "", fmt.Errorf("%s: create version directory: %w", w.logContext, err)
	}
	name := filepath.Base(dir)
	fail := func(err error) (string, error) {
		_ = os.RemoveAll(dir)
		return "", err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return fail(fmt.Errorf("%s: set mode of version directory: %w", w.logContext, err))
	}

	paths := make([]string, 0, len(payload))
	for p := range payload {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		if g := payload[p].FsGroup; g != nil {
			if err := os.Lchown(dir, -1, int(*g)); err != nil {
				return fail(fmt.Errorf("%s: set group of version directory: %w", w.logContext, err))
			}
			if err := os.Chmod(dir, 0o755|fs.ModeSetgid); err != nil {
				return fail(fmt.Errorf("%s: set mode of version directory: %w", w.logContext, err))
			}
			break
		}
	}
	for _, p := range paths {
		if err := w.writeFile(dir, p, payload[p]); err != nil {
			return fail(err)
		}
	}
	if setPerms != nil {
		if err := setPerms(name); err != nil {
			return fail(fmt.Errorf("%s: set ownership of version directory: %w", w.logContext, err))
		}
	}
	return name, nil
}

// writeFile writes one file of the payload below the version directory dir, creating
// its parent directories.
func (w *Writer) writeFile(dir, p string, file FileProjection) error {
	full := filepath.Join(dir, p)
	if err := w.makeParents(dir, path.Dir(p), file.FsGroup); err != nil {
		return err
	}
	mode := fs.FileMode(file.Mode)
	f, err := os.OpenFile(full, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("%s: create file %s: %w", w.logContext, p, err)
	}
	if _, err := f.Write(file.Data); err != nil {
		f.Close()
		return fmt.Errorf("%s: write file %s: %w", w.logContext, p, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("%s: write file %s: %w", w.logContext, p, err)
	}
	if file.FsUser != nil || file.FsGroup != nil {
		if err := os.Lchown(full, idOrKeep(file.FsUser), idOrKeep(file.FsGroup)); err != nil {
			return fmt.Errorf("%s: set owner of file %s: %w", w.logContext, p, err)
		}
	}
	// Chmod after chown: chown clears setuid/setgid bits, and the umask must not apply.
	if err := os.Chmod(full, mode); err != nil {
		return fmt.Errorf("%s: set mode %#o of file %s: %w", w.logContext, mode, p, err)
	}
	return nil
}

// makeParents creates the directories of rel (relative to the version directory dir),
// 0755, owned by fsGroup with the setgid bit when it is set.
func (w *Writer) makeParents(dir, rel string, fsGroup *int64) error {
	if rel == "." {
		return nil
	}
	current := dir
	for _, e := range strings.Split(rel, "/") {
		current = filepath.Join(current, e)
		err := os.Mkdir(current, 0o755)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("%s: create directory %s: %w", w.logContext, rel, err)
		}
		mode := fs.FileMode(0o755)
		if fsGroup != nil {
			if err := os.Lchown(current, -1, int(*fsGroup)); err != nil {
				return fmt.Errorf("%s: set group of directory %s: %w", w.logContext, rel, err)
			}
			mode |= fs.ModeSetgid
		}
		if err := os.Chmod(current, mode); err != nil {
			return fmt.Errorf("%s: set mode of directory %s: %w", w.logContext, rel, err)
		}
	}
	return nil
}

func idOrKeep(id *int64) int {
	if id == nil {
		return -1
	}
	return int(*id)
}

// swap points ..data at version in one rename.
func (w *Writer) swap(version string) error {
	tmp := filepath.Join(w.targetDir, newDataDir)
	// A ..data_tmp left by a crash between symlink and rename would block every update.
	if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s: remove stale %s: %w", w.logContext, newDataDir, err)
	}
	if err := os.Symlink(version, tmp); err != nil {
		return fmt.Errorf("%s: create %s: %w", w.logContext, newDataDir, err)
	}
	if err := os.Rename(tmp, filepath.Join(w.targetDir, dataDir)); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("%s: swap %s to %s: %w", w.logContext, dataDir, version, err)
	}
	return nil
}

// linkTopLevel makes sure every top-level name of payload is a symlink into ..data.
func (w *Writer) linkTopLevel(payload map[string]FileProjection) error {
	done := make(map[string]bool)
	for p, file := range payload {
		name := topLevel(p)
		if done[name] {
			continue
		}
		done[name] = true
		link := filepath.Join(w.targetDir, name)
		want := dataDir + "/" + name
		target, err := os.Readlink(link)
		switch {
		case err == nil && target == want:
			continue
		case err == nil:
			// A symlink of ours pointing elsewhere: replace it atomically.
			if err := w.replaceLink(link, want); err != nil {
				return err
			}
		case errors.Is(err, fs.ErrNotExist):
			if err := os.Symlink(want, link); err != nil {
				return fmt.Errorf("%s: create symlink %s: %w", w.logContext, name, err)
			}
		default:
			return fmt.Errorf("%s: %s exists in the volume and is not a symlink into %s", w.logContext, name, dataDir)
		}
		if file.FsUser != nil || file.FsGroup != nil {
			if err := os.Lchown(link, idOrKeep(file.FsUser), idOrKeep(file.FsGroup)); err != nil {
				return fmt.Errorf("%s: set owner of symlink %s: %w", w.logContext, name, err)
			}
		}
	}
	return nil
}

func (w *Writer) replaceLink(link, target string) error {
	tmp := link + ".tmp-link"
	_ = os.Remove(tmp)
	if err := os.Symlink(target, tmp); err != nil {
		return fmt.Errorf("%s: create symlink %s: %w", w.logContext, filepath.Base(link), err)
	}
	if err := os.Rename(tmp, link); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("%s: replace symlink %s: %w", w.logContext, filepath.Base(link), err)
	}
	return nil
}

// unlinkTopLevel removes the symlink of a name no longer in the payload; anything that
// is not our symlink is left alone.
func (w *Writer) unlinkTopLevel(name string) error {
	link := filepath.Join(w.targetDir, name)
	target, err := os.Readlink(link)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil || target != dataDir+"/"+name {
		return nil
	}
	if err := os.Remove(link); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s: remove symlink %s: %w", w.logContext, name, err)
	}
	return nil
}

// removeOldVersions deletes every version directory but the one ..data points at: the
// one just replaced and any a crash left behind.
func (w *Writer) removeOldVersions() error {
	current, err := os.Readlink(filepath.Join(w.targetDir, dataDir))
	if err != nil {
		return fmt.Errorf("%s: read %s: %w", w.logContext, dataDir, err)
	}
	entries, err := os.ReadDir(w.targetDir)
	if err != nil {
		return fmt.Errorf("%s: list volume directory: %w", w.logContext, err)
	}
	for _, e := range entries {
		name := e.Name()
		if name == current || !isVersionName(name) || !e.IsDir() {
			continue
		}
		if err := os.RemoveAll(filepath.Join(w.targetDir, name)); err != nil {
			return fmt.Errorf("%s: remove old version %s: %w", w.logContext, name, err)
		}
	}
	return nil
}

// isVersionName tells whether name looks like a version directory: ".." then a digit.
func isVersionName(name string) bool {
	return len(name) > 2 && strings.HasPrefix(name, "..") && name[2] >= '0' && name[2] <= '9'
}
