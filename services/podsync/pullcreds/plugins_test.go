package pullcreds

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// pluginDir builds testdata/plugin into a directory, as the plugin "test-plugin".
func pluginDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command("go", "build", "-o", filepath.Join(dir, "test-plugin"), "./testdata/plugin")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the test plugin: %v\n%s", err, out)
	}
	return dir
}

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "credential-providers.yaml")
	if err := os.WriteFile(p, []byte("apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\n"+body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const providerYAML = `providers:
- name: test-plugin
  apiVersion: credentialprovider.kubelet.k8s.io/v1
  matchImages: ["*.registry.example", "registry.example:5000/team"]
  defaultCacheDuration: 1m
  args: ["registry.example:5000/team"]
  env:
  - {name: PLUGIN_USER, value: robot}
  - {name: CACHE_KEY_TYPE, value: Registry}
  - {name: COUNT_FILE, value: %s}
`

func TestPluginsExecAndCache(t *testing.T) {
	dir := pluginDir(t)
	count := filepath.Join(t.TempDir(), "count")
	clk := clocktesting.NewFakeClock(time.Now())
	ps, err := LoadPlugins(writeConfig(t, strings.Replace(providerYAML, "%s", count, 1)), dir, clk, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	runs := func() int { b, _ := os.ReadFile(count); return len(b) }
	got := ps.Lookup(context.Background(), "registry.example:5000/team/app")
	if len(got) != 1 || got[0].Username != "robot" || got[0].Password != "for registry.example:5000/team/app" {
		t.Fatalf("Lookup = %+v, want robot's credential from the plugin", got)
	}
	// matchImages does not name this image: the plugin is not run.
	if got := ps.Lookup(context.Background(), "other.example/app"); len(got) != 0 || runs() != 1 {
		t.Errorf("an image outside matchImages: %+v, %d runs; want nothing, 1 run", got, runs())
	}
	// Cached by registry for defaultCacheDuration: another image of the registry, no run.
	ps.Lookup(context.Background(), "registry.example:5000/team/db")
	if runs() != 1 {
		t.Errorf("%d runs within the cache duration, want 1", runs())
	}
	clk.Step(61 * time.Second)
	ps.Lookup(context.Background(), "registry.example:5000/team/db")
	if runs() != 2 {
		t.Errorf("%d runs after the cache expired, want 2", runs())
	}
}

func TestPluginsResponseCacheDurationAndFailure(t *testing.T) {
	dir := pluginDir(t)
	count := filepath.Join(t.TempDir(), "count")
	body := strings.Replace(providerYAML, "%s", count, 1) + "  - {name: CACHE_DURATION, value: 0s}\n"
	ps, err := LoadPlugins(writeConfig(t, body), dir, clocktesting.NewFakeClock(time.Now()), slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	ps.Lookup(context.Background(), "a.registry.example/x")
	ps.Lookup(context.Background(), "a.registry.example/x")
	if b, _ := os.ReadFile(count); len(b) != 2 {
		t.Errorf("%d runs with a response cacheDuration of 0, want 2 (no caching)", len(b))
	}
	failing := body + "  - {name: FAIL, value: \"yes\"}\n"
	ps, err = LoadPlugins(writeConfig(t, failing), dir, clocktesting.NewFakeClock(time.Now()), slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	if got := ps.Lookup(context.Background(), "a.registry.example/x"); len(got) != 0 {
		t.Errorf("a failing plugin gave %+v, want nothing", got)
	}
}

func TestLoadPluginsErrorsNameFileAndField(t *testing.T) {
	dir := pluginDir(t)
	for _, tc := range []struct{ body, want string }{
		{"providers: []\n", "providers: Required value"},
		{"providers:\n- name: test-plugin\n  apiVersion: credentialprovider.kubelet.k8s.io/v1\n  defaultCacheDuration: 1m\n", "providers[0].matchImages: Required value"},
		{"providers:\n- name: test-plugin\n  apiVersion: credentialprovider.kubelet.k8s.io/v1alpha0\n  matchImages: [a.example]\n  defaultCacheDuration: 1m\n", "providers[0].apiVersion: Unsupported value"},
		{"providers:\n- name: test-plugin\n  apiVersion: credentialprovider.kubelet.k8s.io/v1\n  matchImages: [a.example]\n", "providers[0].defaultCacheDuration: Required value"},
		{"providers:\n- name: ../x\n  apiVersion: credentialprovider.kubelet.k8s.io/v1\n  matchImages: [a.example]\n  defaultCacheDuration: 1m\n", "providers[0].name: Invalid value"},
		{"providers:\n- name: missing\n  apiVersion: credentialprovider.kubelet.k8s.io/v1\n  matchImages: [a.example]\n  defaultCacheDuration: 1m\n", "providers[0].name: no executable"},
		{"providers:\n- name: test-plugin\n  apiVersion: credentialprovider.kubelet.k8s.io/v1\n  matchImages: [a.example]\n  defaultCacheDuration: 1m\n  tokenAttributes: {serviceAccountTokenAudience: x}\n", "providers[0].tokenAttributes: Forbidden"},
		{"providers:\n- name: test-plugin\n  matchImage: [a.example]\n", `unknown field "matchImage"`},
	} {
		path := writeConfig(t, tc.body)
		_, err := LoadPlugins(path, dir, clocktesting.NewFakeClock(time.Now()), slog.Default())
		if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("config %q: error %v, want one naming %s and %q", tc.body, err, path, tc.want)
		}
	}
	if _, err := LoadPlugins(filepath.Join(dir, "absent.yaml"), dir, clocktesting.NewFakeClock(time.Now()), slog.Default()); err == nil || !strings.Contains(err.Error(), "absent.yaml") {
		t.Errorf("a missing config file: error %v, want one naming it", err)
	}
}

// Without --image-credential-provider-config the node has no plugins: a lookup gives
// nothing and nothing is read; with one, it is loaded and its errors stop the start.
func TestNodePluginsNoneWithoutAConfigFile(t *testing.T) {
	ps, err := NodePlugins("", "", clocktesting.NewFakeClock(time.Now()), slog.Default())
	if err != nil {
		t.Fatalf("no config file: %v, want no plugins and no error", err)
	}
	if got := ps.Lookup(context.Background(), "registry.example:5000/team/app"); len(got) != 0 {
		t.Errorf("no config file: Lookup = %v, want nothing", got)
	}
	absent := filepath.Join(t.TempDir(), "absent.yaml")
	if _, err := NodePlugins(absent, t.TempDir(), clocktesting.NewFakeClock(time.Now()), slog.Default()); err == nil || !strings.Contains(err.Error(), "absent.yaml") {
		t.Errorf("a named config file that is missing: error %v, want one naming it", err)
	}
}
