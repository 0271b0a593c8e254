package downwardapi

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func testPod() *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Name: "web", Namespace: "shop", UID: "uid-1",
		Labels:      map[string]string{"app": "web", "example.com/tier": "front"},
		Annotations: map[string]string{"note": "a \"quoted\" value", "Example.com/Mixed": "m"},
	}}
}

func TestMetadataValue(t *testing.T) {
	for _, tc := range []struct {
		path    string
		want    string
		ok      bool
		wantErr string
	}{
		{path: "metadata.name", want: "web", ok: true},
		{path: "metadata.namespace", want: "shop", ok: true},
		{path: "metadata.uid", want: "uid-1", ok: true},
		{path: "metadata.labels", want: "app=\"web\"\nexample.com/tier=\"front\"", ok: true},
		{path: "metadata.annotations", want: "Example.com/Mixed=\"m\"\nnote=\"a \\\"quoted\\\" value\"", ok: true},
		{path: "metadata.labels['app']", want: "web", ok: true},
		{path: "metadata.labels['example.com/tier']", want: "front", ok: true},
		{path: "metadata.labels['absent']", want: "", ok: true},
		{path: "metadata.annotations['note']", want: `a "quoted" value`, ok: true},
		// Annotation keys are checked lower-cased, as the API server does.
		{path: "metadata.annotations['Example.com/Mixed']", want: "m", ok: true},
		{path: "metadata.labels['bad key']", ok: true, wantErr: "invalid label key in metadata.labels['bad key']"},
		{path: "metadata.annotations['-x']", ok: true, wantErr: "invalid annotation key"},
		{path: "metadata.labels['']", ok: true, wantErr: "invalid label key"},
		{path: "metadata.name['x']", ok: true, wantErr: `fieldPath "metadata.name['x']" takes no key`},
		{path: "spec.nodeName", ok: false},
		{path: "status.podIP", ok: false},
		{path: "metadata.labels[app]", ok: false},
		{path: "", ok: false},
	} {
		got, ok, err := MetadataValue(testPod(), tc.path)
		switch {
		case ok != tc.ok:
			t.Errorf("%q: ok %v, want %v", tc.path, ok, tc.ok)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%q: error %v, want one containing %q", tc.path, err, tc.wantErr)
		case tc.wantErr == "" && (err != nil || got != tc.want):
			t.Errorf("%q: %q, %v; want %q", tc.path, got, err, tc.want)
		}
	}
}

func TestSplitSubscript(t *testing.T) {
	for path, want := range map[string][3]string{
		"metadata.labels['a']":        {"metadata.labels", "a", "true"},
		"metadata.labels['a/b.c']":    {"metadata.labels", "a/b.c", "true"},
		"metadata.labels['']":         {"metadata.labels", "", "true"},
		"['a']":                       {"", "", "false"},
		"metadata.labels":             {"", "", "false"},
		"metadata.labels['a'":         {"", "", "false"},
		"metadata.labels[a]":          {"", "", "false"},
		"metadata.labels['x']['y']":   {"metadata.labels", "x']['y", "true"},
		"metadata.annotations['k=v']": {"metadata.annotations", "k=v", "true"},
	} {
		f, k, ok := SplitSubscript(path)
		if got := [3]string{f, k, map[bool]string{true: "true", false: "false"}[ok]}; got != want {
			t.Errorf("SplitSubscript(%q) = %q, want %q", path, got, want)
		}
	}
}

// FuzzMetadataValue: any path gives a value, an error or "not metadata", never a panic; a
// value for a one-key path is the label or annotation itself.
func FuzzMetadataValue(f *testing.F) {
	for _, s := range []string{"metadata.name", "metadata.labels['app']", "metadata.annotations['note']", "metadata.labels['bad key']", "spec.nodeName", "['x']", "metadata.labels['x']['y']", "metadata.labels['"} {
		f.Add(s)
	}
	pod := testPod()
	f.Fuzz(func(t *testing.T, path string) {
		v, ok, err := MetadataValue(pod, path)
		if !ok && (v != "" || err != nil) {
			t.Fatalf("%q: not metadata but value %q error %v", path, v, err)
		}
		if err != nil && v != "" {
			t.Fatalf("%q: both value %q and error %v", path, v, err)
		}
		if field, key, sub := SplitSubscript(path); sub && err == nil {
			want := map[string]map[string]string{"metadata.labels": pod.Labels, "metadata.annotations": pod.Annotations}[field][key]
			if v != want {
				t.Fatalf("%q: %q, want %q", path, v, want)
			}
		}
	})
}
