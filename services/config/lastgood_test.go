package config

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/unitlet/unitlet/services/config/kubeletconfig"
)

func TestStartWithBrokenFilesServesTheLastGood(t *testing.T) {
	f := newFixture(t)
	good := f.service(t, nil).Current()

	f.write(t, "config.yaml", baseConfig+"syncFrequency: 5 parsecs\n")
	s, err := newService(f.opts, f.store, nil, slog.New(slog.NewTextHandler(io.Discard, nil)), fakeHost("node-1", "10.0.0.1"))
	if err != nil {
		t.Fatalf("restart with a broken file and a last good configuration: %v", err)
	}
	if c := s.Current(); c.Generation != good.Generation || string(c.KubeletConfiguration) != string(good.KubeletConfiguration) {
		t.Errorf("served generation %d, want the last good %d", c.Generation, good.Generation)
	}
	if st := s.Status(); st.LastReloadSuccessful || st.LastErrorField != "syncFrequency" || st.Generation != good.Generation {
		t.Errorf("status %v: want the failure named and the last good generation", st)
	}
	// Fixed: it loads as a reload does, the next generation.
	f.write(t, "config.yaml", baseConfig+"podsPerCore: 50\n")
	if err := s.Reload(TriggerSignal); err != nil || s.Current().Generation != good.Generation+1 || !s.Status().LastReloadSuccessful {
		t.Errorf("reload after the fix: %v, generation %d", err, s.Current().Generation)
	}

	// Another --config: the last good one is not this file's; the start fails as before.
	f.write(t, "other.yaml", baseConfig+"syncFrequency: 5 parsecs\n")
	other := *f.opts
	other.ConfigFile = f.dir + "/other.yaml"
	_, err = newService(&other, f.store, nil, slog.New(slog.NewTextHandler(io.Discard, nil)), fakeHost("node-1", "10.0.0.1"))
	var ke *kubeletconfig.Error
	if !errors.As(err, &ke) || !strings.Contains(err.Error(), "not these") {
		t.Errorf("start from another file: %v, want the load error and why the last good cannot stand in", err)
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
	for _, want := range []string{"its generation is not recorded", "not recorded as the last good one"} {
		if !strings.Contains(logged.String(), want) {
			t.Errorf("the log does not say %q:\n%s", want, logged.String())
		}
	}
}
