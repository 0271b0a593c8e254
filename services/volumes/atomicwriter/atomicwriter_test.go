package atomicwriter

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
)

func newWriter(t *testing.T) (*Writer, string) {
	t.Helper()
	dir := t.TempDir()
	w, err := New(dir, "test volume")
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return w, dir
}

func readVisible(t *testing.T, dir, p string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, p))
	if err != nil {
		t.Fatalf("read %s: %v", p, err)
	}
	return string(b)
}

func dataTarget(t *testing.T, dir string) string {
	t.Helper()
	target, err := os.Readlink(filepath.Join(dir, dataDir))
	if err != nil {
		t.Fatalf("read ..data: %v", err)
	}
	return target
}

// entries lists the names in dir, sorted.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	return names
}

func TestNewRequiresDirectory(t *testing.T) {
	if _, err := New(filepath.Join(t.TempDir(), "missing"), "ctx"); err == nil {
		t.Fatal("New on a missing directory succeeded")
	}
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := New(file, "ctx"); err == nil {
		t.Fatal("New on a file succeeded")
	}
}

func TestWriteLayoutAndModes(t *testing.T) {
	w, dir := newWriter(t)
	payload := map[string]FileProjection{
		"config.yaml":    {Data: []byte("a: 1\n"), Mode: 0o644},
		"conf.d/x.conf":  {Data: []byte("x"), Mode: 0o400},
		"conf.d/y/z.txt": {Data: []byte("z"), Mode: 0o600},
	}
	if err := w.Write(payload, nil); err != nil {
		t.Fatalf("Write: %v", err)
	}

	version := dataTarget(t, dir)
	if !strings.HasPrefix(version, "..") || !isVersionName(version) {
		t.Fatalf("..data points at %q, want a timestamped hidden directory", version)
	}
	want := []string{version, dataDir, "conf.d", "config.yaml"}
	sort.Strings(want)
	if got := entries(t, dir); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("volume directory holds %v, want %v", got, want)
	}
	for name, target := range map[string]string{"config.yaml": "..data/config.yaml", "conf.d": "..data/conf.d"} {
		got, err := os.Readlink(filepath.Join(dir, name))
		if err != nil || got != target {
			t.Errorf("%s -> %q (%v), want -> %q", name, got, err, target)
		}
	}
	for p, f := range payload {
		if got := readVisible(t, dir, p); got != string(f.Data) {
			t.Errorf("%s holds %q, want %q", p, got, f.Data)
		}
		info, err := os.Stat(filepath.Join(dir, p))
		if err != nil {
			t.Fatal(err)
		}
		if info.Mode().Perm() != fs.FileMode(f.Mode) {
			t.Errorf("%s has mode %#o, want %#o", p, info.Mode().Perm(), f.Mode)
		}
	}
	info, err := os.Stat(filepath.Join(dir, version))
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o755 {
		t.Errorf("version directory has mode %#o, want 0755", info.Mode().Perm())
	}
}

func TestWriteUnchangedPayloadDoesNothing(t *testing.T) {
	w, dir := newWriter(t)
	payload := map[string]FileProjection{"a": {Data: []byte("1"), Mode: 0o644}}
	if err := w.Write(payload, nil); err != nil {
		t.Fatal(err)
	}
	before := dataTarget(t, dir)
	calls := 0
	if err := w.Write(payload, func(string) error { calls++; return nil }); err != nil {
		t.Fatal(err)
	}
	if after := dataTarget(t, dir); after != before {
		t.Fatalf("unchanged payload swapped ..data from %s to %s", before, after)
	}
	if calls != 0 {
		t.Fatalf("setPerms called %d times for an unchanged payload", calls)
	}

	// A mode change alone is a change.
	payload["a"] = FileProjection{Data: []byte("1"), Mode: 0o600}
	if err := w.Write(payload, nil); err != nil {
		t.Fatal(err)
	}
	if dataTarget(t, dir) == before {
		t.Fatal("a mode change did not write a new version")
	}
	info, err := os.Stat(filepath.Join(dir, "a"))
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("a has mode %v (%v), want 0600", info.Mode().Perm(), err)
	}
}

func TestWriteUpdateSwapsAndCleansUp(t *testing.T) {
	w, dir := newWriter(t)
	// Distinct timestamps so the version names differ by more than the random suffix.
	clock := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	w.now = func() time.Time { clock = clock.Add(time.Second); return clock }

	first := map[string]FileProjection{
		"keep":      {Data: []byte("same"), Mode: 0o644},
		"change":    {Data: []byte("old"), Mode: 0o644},
		"gone":      {Data: []byte("bye"), Mode: 0o644},
		"dir/inner": {Data: []byte("in"), Mode: 0o644},
		"dir/drop":  {Data: []byte("drop"), Mode: 0o644},
	}
	if err := w.Write(first, nil); err != nil {
		t.Fatal(err)
	}
	oldVersion := dataTarget(t, dir)

	// A reader holding the old version open keeps seeing it until and after the swap;
	// setPerms runs before the swap, when the visible content must still be the old one.
	held, err := os.Open(filepath.Join(dir, "change"))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()

	second := map[string]FileProjection{
		"keep":      {Data: []byte("same"), Mode: 0o644},
		"change":    {Data: []byte("new"), Mode: 0o644},
		"dir/inner": {Data: []byte("in"), Mode: 0o644},
		"added":     {Data: []byte("hi"), Mode: 0o644},
	}
	var sawBeforeSwap string
	setPerms := func(subPath string) error {
		if subPath == oldVersion || !isVersionName(subPath) {
			t.Errorf("setPerms got %q, want the new version directory", subPath)
		}
		if _, err := os.Stat(filepath.Join(dir, subPath, "change")); err != nil {
			t.Errorf("new version not written before setPerms: %v", err)
		}
		sawBeforeSwap = readVisible(t, dir, "change")
		return nil
	}
	if err := w.Write(second, setPerms); err != nil {
		t.Fatal(err)
	}
	if sawBeforeSwap != "old" {
		t.Errorf("visible content before the swap was %q, want the old %q", sawBeforeSwap, "old")
	}

	newVersion := dataTarget(t, dir)
	if newVersion == oldVersion {
		t.Fatal("..data still points at the old version")
	}
	want := []string{dataDir, newVersion, "added", "change", "dir", "keep"}
	sort.Strings(want)
	if got := entries(t, dir); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("volume directory holds %v, want %v (old version and removed names gone)", got, want)
	}
	if got := readVisible(t, dir, "change"); got != "new" {
		t.Errorf("change holds %q, want new", got)
	}
	if got := readVisible(t, dir, "added"); got != "hi" {
		t.Errorf("added holds %q, want hi", got)
	}
	if _, err := os.Lstat(filepath.Join(dir, "gone")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("symlink of removed key still there: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "dir/drop")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("removed nested file still visible: %v", err)
	}
	// The open descriptor still reads the old content (the old file was unlinked, not
	// rewritten in place).
	b := make([]byte, 16)
	n, _ := held.Read(b)
	if string(b[:n]) != "old" {
		t.Errorf("reader of the old version saw %q, want old", b[:n])
	}
}

func TestWriteRemovesEverythingForEmptyPayload(t *testing.T) {
	w, dir := newWriter(t)
	if err := w.Write(map[string]FileProjection{"a": {Data: []byte("1"), Mode: 0o644}}, nil); err != nil {
		t.Fatal(err)
	}
	if err := w.Write(map[string]FileProjection{}, nil); err != nil {
		t.Fatal(err)
	}
	got := entries(t, dir)
	if len(got) != 2 || got[1] != dataDir {
		t.Fatalf("after an empty payload the volume holds %v, want only ..data and its version", got)
	}
}

func TestWriteRefusesInvalidPaths(t *testing.T) {
	for _, p := range []string{
		"", "/etc/passwd", "../escape", "a/../../b", "a/..", "..data", "..hidden", "..data/x",
		".", strings.Repeat("n", 256), strings.Repeat("a/", 2049) + "b",
	} {
		w, dir := newWriter(t)
		err := w.Write(map[string]FileProjection{p: {Data: []byte("x"), Mode: 0o644}}, nil)
		if err == nil {
			t.Errorf("path %.40q accepted", p)
			continue
		}
		if !strings.Contains(err.Error(), "test volume") {
			t.Errorf("error %q does not carry the log context", err)
		}
		if got := entries(t, dir); len(got) != 0 {
			t.Errorf("path %.40q refused but the volume holds %v", p, got)
		}
	}
}

func TestWriteRefusesConflictingPaths(t *testing.T) {
	w, _ := newWriter(t)
	err := w.Write(map[string]FileProjection{
		"a":   {Data: []byte("file"), Mode: 0o644},
		"a/b": {Data: []byte("nested"), Mode: 0o644},
	}, nil)
	if err == nil {
		t.Fatal("a file that is also a directory was accepted")
	}
	err = w.Write(map[string]FileProjection{
		"x/y":  {Data: []byte("1"), Mode: 0o644},
		"x//y": {Data: []byte("2"), Mode: 0o644},
	}, nil)
	if err == nil {
		t.Fatal("two names for one file were accepted")
	}
	if err := w.Write(map[string]FileProjection{"m": {Mode: 0o1777}}, nil); err == nil {
		t.Fatal("mode outside 0..0777 accepted")
	}
}

func TestWriteErrorsNeverCarryContent(t *testing.T) {
	w, _ := newWriter(t)
	secret := "s3cr3t-token-value"
	err := w.Write(map[string]FileProjection{"../x": {Data: []byte(secret), Mode: 0o644}}, nil)
	if err == nil || strings.Contains(err.Error(), secret) {
		t.Fatalf("error %v (want one, without the content)", err)
	}
}

func TestWriteSetPermsFailureLeavesOldVersion(t *testing.T) {
	w, dir := newWriter(t)
	if err := w.Write(map[string]FileProjection{"a": {Data: []byte("1"), Mode: 0o644}}, nil); err != nil {
		t.Fatal(err)
	}
	before := dataTarget(t, dir)
	boom := errors.New("boom")
	err := w.Write(map[string]FileProjection{"a": {Data: []byte("2"), Mode: 0o644}}, func(string) error { return boom })
	if !errors.Is(err, boom) {
		t.Fatalf("Write error %v, want it to wrap setPerms' error", err)
	}
	if dataTarget(t, dir) != before || readVisible(t, dir, "a") != "1" {
		t.Fatal("a failed write changed the visible version")
	}
	if got := entries(t, dir); len(got) != 3 {
		t.Fatalf("failed write left %v, want ..data, a and one version", got)
	}
}

func TestWriteRecoversFromCrashLeftovers(t *testing.T) {
	w, dir := newWriter(t)
	if err := w.Write(map[string]FileProjection{"a": {Data: []byte("1"), Mode: 0o644}}, nil); err != nil {
		t.Fatal(err)
	}
	// A crash between symlink and rename, and a half-written version.
	if err := os.Symlink("..nowhere", filepath.Join(dir, newDataDir)); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "..2020_01_01_00_00_00.123"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := w.Write(map[string]FileProjection{"a": {Data: []byte("2"), Mode: 0o644}}, nil); err != nil {
		t.Fatalf("Write after a crash: %v", err)
	}
	if got := readVisible(t, dir, "a"); got != "2" {
		t.Fatalf("a holds %q, want 2", got)
	}
	want := []string{dataDir, dataTarget(t, dir), "a"}
	sort.Strings(want)
	if got := entries(t, dir); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("volume holds %v, want %v", got, want)
	}
}

func TestWriteRestoresMissingSymlink(t *testing.T) {
	w, dir := newWriter(t)
	payload := map[string]FileProjection{"a": {Data: []byte("1"), Mode: 0o644}}
	if err := w.Write(payload, nil); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "a")); err != nil {
		t.Fatal(err)
	}
	if err := w.Write(payload, nil); err != nil {
		t.Fatal(err)
	}
	if got := readVisible(t, dir, "a"); got != "1" {
		t.Fatalf("a holds %q after repair, want 1", got)
	}
}

func TestWriteRefusesForeignFileAtTopLevel(t *testing.T) {
	w, dir := newWriter(t)
	if err := os.Mkdir(filepath.Join(dir, "mnt"), 0o755); err != nil {
		t.Fatal(err)
	}
	err := w.Write(map[string]FileProjection{"mnt": {Data: []byte("1"), Mode: 0o644}}, nil)
	if err == nil {
		t.Fatal("payload name over an existing directory accepted")
	}
}

func TestWriteOwnership(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test changes file owners and must run as root")
	}
	w, dir := newWriter(t)
	uid, gid := int64(1234), int64(2345)
	payload := map[string]FileProjection{
		"token":   {Data: []byte("t"), Mode: 0o640, FsUser: &uid, FsGroup: &gid},
		"sub/ca":  {Data: []byte("c"), Mode: 0o644, FsGroup: &gid},
		"plain":   {Data: []byte("p"), Mode: 0o644},
		"sub/key": {Data: []byte("k"), Mode: 0o440, FsGroup: &gid},
	}
	if err := w.Write(payload, nil); err != nil {
		t.Fatal(err)
	}
	owner := func(p string, follow bool) (uint32, uint32, fs.FileMode) {
		t.Helper()
		var info fs.FileInfo
		var err error
		if follow {
			info, err = os.Stat(filepath.Join(dir, p))
		} else {
			info, err = os.Lstat(filepath.Join(dir, p))
		}
		if err != nil {
			t.Fatal(err)
		}
		st := info.Sys().(*syscall.Stat_t)
		return st.Uid, st.Gid, info.Mode()
	}
	if u, g, m := owner("token", true); u != 1234 || g != 2345 || m.Perm() != 0o640 {
		t.Errorf("token: uid %d gid %d mode %v, want 1234 2345 0640", u, g, m)
	}
	if u, g, _ := owner("token", false); u != 1234 || g != 2345 {
		t.Errorf("token symlink: uid %d gid %d, want 1234 2345", u, g)
	}
	if u, g, m := owner("sub/ca", true); u != 0 || g != 2345 || m.Perm() != 0o644 {
		t.Errorf("sub/ca: uid %d gid %d mode %v, want 0 2345 0644", u, g, m)
	}
	if _, g, m := owner(dataDir+"/sub", true); g != 2345 || m&fs.ModeSetgid == 0 {
		t.Errorf("sub directory: gid %d mode %v, want 2345 and setgid", g, m)
	}
	// A file without an owner keeps root as its user (its group comes from the setgid
	// version directory).
	if u, _, _ := owner("plain", true); u != 0 {
		t.Errorf("plain: uid %d, want root", u)
	}
	before := dataTarget(t, dir)
	if err := w.Write(payload, nil); err != nil {
		t.Fatal(err)
	}
	if dataTarget(t, dir) != before {
		t.Error("unchanged payload with owners was rewritten")
	}
	other := int64(999)
	payload["plain"] = FileProjection{Data: []byte("p"), Mode: 0o644, FsGroup: &other}
	if err := w.Write(payload, nil); err != nil {
		t.Fatal(err)
	}
	if dataTarget(t, dir) == before {
		t.Error("an owner change did not write a new version")
	}
}
