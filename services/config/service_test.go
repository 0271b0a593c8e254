package config

import (
	"context"
	"errors"
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
	"k8s.io/client-go/tools/record"

	"github.com/unitlet/unitlet/services/config/kubeletconfig"
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

// permissive lets pods set unsafe sysctls and serves the debugging handlers; hardening is
// an operator's drop-in that takes both away and holds one value unitlet refuses.
const (
	permissive = baseConfig + "allowedUnsafeSysctls: [\"kernel.msg*\", \"net.core.somaxconn\"]\nenableDebuggingHandlers: true\n"
	hardening  = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n" +
		"allowedUnsafeSysctls: []\nenableDebuggingHandlers: false\nsyncFrequency: 5 parsecs\n"
)

// A start whose configuration does not load stops (the error names the file and the field;
// Run exits 2 with it), however often the node loaded another one before: the kubelet
// exits on a configuration it cannot load, and serving the earlier one would leave a node
// whose operator hardened it (no unsafe sysctls, no debugging handlers) on the permissive
// configuration because one value beside it was refused. Before, a configuration loaded
// before from the same --config and --config-dir was served instead, and the node ran on.
func TestStartWithAConfigurationThatDoesNotLoadStops(t *testing.T) {
	f := newFixture(t)
	f.write(t, "config.yaml", permissive)
	f.service(t, nil) // a configuration that loads, recorded as loaded before
	f.write(t, "config.d/50-harden.conf", hardening)
	s, err := newService(f.opts, f.store, nil, slog.New(slog.NewTextHandler(io.Discard, nil)), fakeHost("node-1", "10.0.0.1"))
	var ke *kubeletconfig.Error
	if err == nil || !errors.As(err, &ke) || ke.Field != "syncFrequency" || !strings.HasSuffix(ke.File, "50-harden.conf") {
		served := ""
		if s != nil {
			served = string(s.Current().KubeletConfiguration)
		}
		t.Fatalf("start with a hardening drop-in holding a refused value: error %v, want the drop-in and syncFrequency named; served %s", err, served)
	}

	// The same files, loaded before, that no longer load because the host changed under
	// them (swap turned on with failSwapOn at its default): the kubelet refuses to start,
	// and so does unitlet-config.
	os.Remove(filepath.Join(f.dir, "config.d/50-harden.conf"))
	f.service(t, nil)
	swapOn := fakeHost("node-1", "10.0.0.1")
	swapOn.swaps = func() ([]string, error) { return []string{"/swapfile"}, nil }
	if _, err := newService(f.opts, f.store, nil, slog.New(slog.NewTextHandler(io.Discard, nil)), swapOn); err == nil || !strings.Contains(err.Error(), "failSwapOn") {
		t.Errorf("start with unchanged files and swap turned on: %v, want the failSwapOn refusal", err)
	}
}

// A start that loads removes the checkpoint where earlier releases kept the last
// configuration that loaded: nothing reads it, and it holds the whole configuration.
func TestStartRemovesTheRetiredLastGoodCheckpoint(t *testing.T) {
	f := newFixture(t)
	if err := f.store.Write(retiredLastGoodCheckpoint, []byte(`{"configFile":"x"}`)); err != nil {
		t.Fatal(err)
	}
	f.service(t, nil)
	if _, err := f.store.Read(retiredLastGoodCheckpoint); !errors.Is(err, checkpoint.ErrNotFound) {
		t.Errorf("the retired checkpoint after a start: %v, want it gone", err)
	}
}

// A reload that fails is recorded on the Node as a Warning naming the file, the field and
// the generation that stays; the first load after it as Normal. It does not fail the
// health check (which feeds the watchdog: a restart with these files would stop).
func TestAFailedReloadIsAnEventOnTheNode(t *testing.T) {
	f := newFixture(t)
	f.write(t, "config.yaml", permissive)
	s := f.service(t, nil)

	// A failure before the node's credentials are there is recorded once they are.
	f.write(t, "config.d/50-harden.conf", hardening)
	if err := s.Reload(TriggerFileChange); err == nil {
		t.Fatal("a drop-in with a refused value reloaded")
	}
	rec := record.NewFakeRecorder(10)
	s.setRecorder(rec)
	want := func(what string, parts ...string) {
		t.Helper()
		select {
		case ev := <-rec.Events:
			for _, p := range parts {
				if !strings.Contains(ev, p) {
					t.Errorf("%s: event %q does not say %q", what, ev, p)
				}
			}
		default:
			t.Errorf("%s: no event", what)
		}
	}
	want("a failure from before the recorder", "Warning KubeletConfigInvalid", "50-harden.conf", "syncFrequency", "Generation 1 stays in effect", "file-change")
	if err := s.Healthy(context.Background()); err != nil {
		t.Errorf("health after a failed reload: %v, want it passing (the watchdog must not restart unitlet-config into a start that stops)", err)
	}

	if err := s.Reload(TriggerSignal); err == nil {
		t.Fatal("a drop-in with a refused value reloaded")
	}
	want("a failed reload", "Warning KubeletConfigInvalid", "syncFrequency", "(signal)")
	if s.Current().Generation != 1 {
		t.Errorf("generation %d in effect after failed reloads, want 1", s.Current().Generation)
	}

	f.write(t, "config.d/50-harden.conf", strings.Replace(hardening, "syncFrequency: 5 parsecs\n", "", 1))
	if err := s.Reload(TriggerSignal); err != nil {
		t.Fatal(err)
	}
	want("the fix", "Normal KubeletConfigLoaded", "generation 2 in effect")
	// Loads that follow a success are not events.
	if err := s.Reload(TriggerSignal); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-rec.Events:
		t.Errorf("an unchanged reload after a success recorded %q", ev)
	default:
	}
}

func TestAStuckLoadFailsTheHealthCheck(t *testing.T) {
	s := newFixture(t).service(t, nil)
	if err := s.Healthy(context.Background()); err != nil {
		t.Fatalf("idle: %v", err)
	}
	s.mu.Lock() // a load that does not end
	err := s.Healthy(context.Background())
	s.mu.Unlock()
	if err == nil || !strings.Contains(err.Error(), "under way for more than") {
		t.Fatalf("with a load stuck: %v", err)
	}
	if err := s.Healthy(context.Background()); err != nil {
		t.Fatalf("after it ended: %v", err)
	}
}

// A start whose checkpoint writes fail (the root dir's disk full) serves the configuration
// all the same and says so in the log: before, it ended the process as a configuration
// error (exit 2, which its unit does not restart), and a disk full for a minute left the
// node without unitlet-config for good.
func TestStartServesTheConfigurationWhenItsRecordsCannotBeWritten(t *testing.T) {
	f := newFixture(t)
	dir := f.store.Dir()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir, nil, 0o600); err != nil { // every write under it fails
		t.Fatal(err)
	}
	var logged strings.Builder
	s, err := newService(f.opts, f.store, nil, slog.New(slog.NewTextHandler(&logged, nil)), fakeHost("node-1", "10.0.0.1"))
	if err != nil {
		t.Fatalf("start with checkpoints that cannot be written: %v", err)
	}
	if c := s.Current(); c.Generation != 1 || c.Node.GetName() != "node-1" {
		t.Errorf("served generation %d for node %q, want generation 1 of node-1", c.Generation, c.Node.GetName())
	}
	if !strings.Contains(logged.String(), "its generation is not recorded") {
		t.Errorf("the log does not say the generation is not recorded:\n%s", logged.String())
	}
}
