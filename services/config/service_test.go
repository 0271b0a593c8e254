package config

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/unitlet/unitlet/shared/checkpoint"
	"github.com/unitlet/unitlet/shared/payload"
)

const baseConfig = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: 42\n"

type fixture struct {
	dir   string
	opts  *Options
	store *checkpoint.Store
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	dir := t.TempDir()
	f := &fixture{dir: dir, opts: &Options{
		ConfigFile: filepath.Join(dir, "config.yaml"),
		ConfigDir:  filepath.Join(dir, "config.d"),
		RootDir:    filepath.Join(dir, "root"),
		CertDir:    filepath.Join(dir, "root", "pki"),
	}}
	f.write(t, "config.yaml", baseConfig)
	store, err := checkpoint.Open(filepath.Join(dir, "root", "checkpoints"))
	if err != nil {
		t.Fatal(err)
	}
	f.store = store
	return f
}

func (f *fixture) write(t *testing.T, name, content string) {
	t.Helper()
	p := filepath.Join(f.dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) service(t *testing.T, reg prometheus.Registerer) *Service {
	t.Helper()
	s, err := newService(f.opts, f.store, reg, slog.New(slog.NewTextHandler(io.Discard, nil)), fakeHost("node-1", "10.0.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestReloadMakesGenerationsAndKeepsLastKnownGood(t *testing.T) {
	f := newFixture(t)
	reg := prometheus.NewRegistry()
	s := f.service(t, reg)
	first := s.Current()
	if first.Generation != 1 || first.Node.Name != "node-1" || !strings.Contains(string(first.KubeletConfiguration), `"maxPods":42`) {
		t.Fatalf("first load: generation %d node %q config %s", first.Generation, first.Node.Name, first.KubeletConfiguration)
	}
	if got := first.GetKubeletConfigurationSchema(); got != payload.SchemaKubeletConfiguration {
		t.Errorf("kubelet_configuration_schema = %q, want %q", got, payload.SchemaKubeletConfiguration)
	}
	sub := s.Subscribe(first.Generation)
	defer sub.Close()
	// What GetInfo reports: the generation in effect, from the start and at each change.
	var told []uint64
	s.OnGeneration(func(gen uint64) { told = append(told, gen) })

	// Unchanged: no new generation, no event.
	if err := s.Reload(TriggerSignal); err != nil {
		t.Fatal(err)
	}
	if s.Current().Generation != 1 {
		t.Fatalf("an unchanged reload made generation %d", s.Current().Generation)
	}

	// Invalid: the error names file and field; the config in effect stays.
	f.write(t, "config.d/10-bad.conf", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nsyncFrequency: soon\n")
	if err := s.Reload(TriggerFileChange); err == nil {
		t.Fatal("an invalid drop-in reloaded")
	}
	st := s.Status()
	if st.LastReloadSuccessful || st.LastErrorField != "syncFrequency" || !strings.HasSuffix(st.LastErrorFile, "10-bad.conf") || st.Trigger != TriggerFileChange {
		t.Fatalf("status after a bad reload: %v", st)
	}
	if s.Current() != first || testutil.ToFloat64(s.reloadOK) != 0 {
		t.Fatalf("a bad reload replaced the config or left the metric at %v", testutil.ToFloat64(s.reloadOK))
	}

	// Fixed and changed: the next generation reaches subscribers.
	os.Remove(filepath.Join(f.dir, "config.d/10-bad.conf"))
	f.write(t, "config.d/20-pods.conf", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: 7\n")
	if err := s.Reload(TriggerSignal); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-sub.Events():
		if ev.Seq != 2 || ev.Value.Generation != 2 || !strings.Contains(string(ev.Value.KubeletConfiguration), `"maxPods":7`) {
			t.Fatalf("event %d generation %d", ev.Seq, ev.Value.Generation)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no event for generation 2")
	}
	if st := s.Status(); !st.LastReloadSuccessful || st.LastError != "" || st.Generation != 2 {
		t.Fatalf("status after the fix: %v", st)
	}
	if !slices.Equal(told, []uint64{1, 1, 2}) {
		t.Errorf("OnGeneration was told %v, want [1 1 2] (the first, the unchanged reload's, the fix's)", told)
	}
	if testutil.ToFloat64(s.reloadOK) != 1 || testutil.ToFloat64(s.generation) != 2 {
		t.Fatalf("metrics after the fix: ok %v generation %v", testutil.ToFloat64(s.reloadOK), testutil.ToFloat64(s.generation))
	}
	if n := len(s.Current().Sources); n < 3 {
		t.Fatalf("sources %v: want defaults, file and the drop-in", s.Current().Sources)
	}

	// A restart with the same inputs keeps the generation; a corrupt checkpoint starts over.
	if again := f.service(t, nil).Current().Generation; again != 2 {
		t.Fatalf("restart with the same inputs: generation %d, want 2", again)
	}
	os.WriteFile(filepath.Join(f.store.Dir(), generationCheckpoint), []byte("garbage"), 0o600)
	if g := f.service(t, nil).Current().Generation; g != 1 {
		t.Fatalf("after a corrupt checkpoint: generation %d, want 1", g)
	}
}

func TestStartWithInvalidConfigFails(t *testing.T) {
	f := newFixture(t)
	f.write(t, "config.yaml", baseConfig+"bogus: 1\n")
	_, err := newService(f.opts, f.store, nil, slog.New(slog.NewTextHandler(io.Discard, nil)), fakeHost("node-1", ""))
	if err == nil || !strings.Contains(err.Error(), "bogus") || !strings.Contains(err.Error(), "config.yaml") {
		t.Fatalf("error %v, want one naming config.yaml and bogus", err)
	}
}

func TestRelevantFiles(t *testing.T) {
	s := &Service{opts: &Options{ConfigFile: "/etc/unitlet/config.yaml", ConfigDir: "/etc/unitlet/config.d"}}
	for path, want := range map[string]bool{
		"/etc/unitlet/config.yaml":         true,
		"/etc/unitlet/config.yaml.swp":     false,
		"/etc/unitlet/config.d":            true,
		"/etc/unitlet/config.d/10-a.conf":  true,
		"/etc/unitlet/config.d/10-a.conf~": false,
		"/etc/unitlet/config.d/sub/x.conf": false,
		"/etc/unitlet/other.conf":          false,
	} {
		if got := s.relevant(path); got != want {
			t.Errorf("relevant(%s) = %v, want %v", path, got, want)
		}
	}
}
