package criconfig

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// The kubelet's environment file format: single-quoted values (multi-line, comments after),
// comments and blank lines skipped, the strict errors.
func TestParseEnvFile(t *testing.T) {
	const file = "# settings\n\n  A='one'\nB='two\nlines' # trailing\nC= 'spaced'\nD=''\n"
	for key, want := range map[string]string{"A": "one", "B": "two\nlines", "C": "", "D": "", "E": ""} {
		got, _, err := parseEnvFile(strings.NewReader(file), key)
		if err != nil || got != want {
			t.Errorf("%s: %q %v, want %q", key, got, err, want)
		}
	}
	if _, found, _ := parseEnvFile(strings.NewReader(file), "E"); found {
		t.Error("E found")
	}
	for bad, want := range map[string]string{
		"A":          "missing '='",
		"=x":         "empty variable name",
		"A ='x'":     "whitespace before '='",
		"A=x":        "single quotes",
		"A='x' y":    "unexpected content after closing quote",
		"A='x\nmore": "line 1: unclosed single quote",
	} {
		if _, _, err := parseEnvFile(strings.NewReader(bad), "A"); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", bad, err, want)
		}
	}
}

// FuzzParseEnvFile: no input makes the parser panic or loop; what it finds for a key it
// also finds when the file is read again.
func FuzzParseEnvFile(f *testing.F) {
	for _, seed := range []string{"A='1'\n", "B='x\ny' # c\n", "# only\n", "C= 'e'\n", "D='unclosed\n", "E\n", "'='"} {
		f.Add(seed, "A")
	}
	f.Fuzz(func(t *testing.T, file, key string) {
		v1, f1, e1 := parseEnvFile(strings.NewReader(file), key)
		v2, f2, e2 := parseEnvFile(strings.NewReader(file), key)
		if v1 != v2 || f1 != f2 || (e1 == nil) != (e2 == nil) {
			t.Fatalf("two reads differ: %q %t %v / %q %t %v", v1, f1, e1, v2, f2, e2)
		}
	})
}

// fileKeyRef reads from the pod's emptyDir and never leaves it: a symlink to the host's
// /etc is resolved inside the volume.
func TestFileKeyValue(t *testing.T) {
	pods := t.TempDir()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "u1"}, Spec: corev1.PodSpec{Volumes: []corev1.Volume{
		{Name: "cfg", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}},
	}}}
	dir := filepath.Join(pods, "u1", "volumes", "kubernetes.io~empty-dir", "cfg")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "env"), []byte("TOKEN='s3cret'\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/hostname", filepath.Join(dir, "escape")); err != nil {
		t.Fatal(err)
	}
	ref := func(vol, path, key string, opt bool) *corev1.FileKeySelector {
		return &corev1.FileKeySelector{VolumeName: vol, Path: path, Key: key, Optional: ptr.To(opt)}
	}
	if v, ok, err := fileKeyValue(pod, ref("cfg", "env", "TOKEN", false), pods); err != nil || !ok || v != "s3cret" {
		t.Errorf("TOKEN: %q %t %v", v, ok, err)
	}
	if _, ok, err := fileKeyValue(pod, ref("cfg", "env", "NOPE", true), pods); err != nil || ok {
		t.Errorf("optional missing key: %t %v, want it left out", ok, err)
	}
	for _, c := range []struct {
		ref  *corev1.FileKeySelector
		want string
	}{
		{ref("cfg", "env", "NOPE", false), `environment variable key "NOPE" not found`},
		{ref("gone", "env", "A", false), `cannot find the volume "gone"`},
		{ref("host", "etc/hostname", "A", false), "is not an emptyDir"},
		{ref("cfg", "escape", "A", true), "couldn't parse env file"},
		{ref("cfg", "../../../../../etc/passwd", "A", true), "couldn't parse env file"},
	} {
		if _, _, err := fileKeyValue(pod, c.ref, pods); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.ref, err, c.want)
		}
	}
}

// Without openat2 the path is resolved inside the volume all the same.
func TestOpenJoinedStaysInTheVolume(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "env"), []byte("A='1'\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/hostname", filepath.Join(dir, "escape")); err != nil {
		t.Fatal(err)
	}
	if f, err := openJoined(dir, "env"); err != nil {
		t.Errorf("env: %v", err)
	} else {
		f.Close()
	}
	for _, p := range []string{"escape", "../../../../etc/hostname"} {
		if f, err := openJoined(dir, p); err == nil {
			f.Close()
			t.Errorf("%s opened, want it resolved inside the volume (where it does not exist)", p)
		}
	}
}
