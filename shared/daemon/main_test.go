package daemon

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// testConfig is a service's configuration as the services write theirs: Settings embedded,
// an environment setting and a flag of its own.
type testConfig struct {
	Settings
	Lifetime time.Duration `env:"TEST_LIFETIME"`
	Name     string
	NameFrom string
}

func (c testConfig) Validate() error {
	if c.Name == "bad" {
		return errors.New("--name: must not be bad")
	}
	return c.Settings.Validate()
}

func testCommand(run func(context.Context, testConfig, *slog.Logger) error) Command[testConfig] {
	return Command[testConfig]{
		Service: "test",
		About:   "about it",
		Flags:   func(fs *pflag.FlagSet, c *testConfig) { fs.StringVar(&c.Name, "name", "", "a name") },
		Complete: func(c *testConfig, _ *pflag.FlagSet, fromEnv func(string) bool) error {
			c.NameFrom = "flag"
			if fromEnv("name") {
				c.NameFrom = "env"
			}
			return nil
		},
		Run: run,
	}
}

func TestMainFlagsAndExitCodes(t *testing.T) {
	ran := false
	cmd := testCommand(func(context.Context, testConfig, *slog.Logger) error { ran = true; return nil })
	for _, tc := range []struct {
		args     []string
		environ  []string
		code     int
		out, err string
	}{
		{args: []string{"--version"}, code: ExitOK, out: "unitlet-test "},
		{args: []string{"--help"}, code: ExitOK, out: "Usage: unitlet-test [flags]\n\nabout it\n"},
		{args: []string{"--bogus"}, code: ExitBadConfig, err: "unitlet-test: unknown flag: --bogus"},
		{args: []string{"extra"}, code: ExitBadConfig, err: `unitlet-test: unexpected argument "extra"`},
		{args: []string{"--name=bad"}, code: ExitBadConfig, err: "unitlet-test: --name: must not be bad"},
		{environ: []string{"UNITLET_TEST_LIFETIME=a week"}, code: ExitBadConfig, err: "unitlet-test: environment: UNITLET_TEST_LIFETIME"},
		{environ: []string{"UNITLET_LOG_LEVEL=chatty"}, code: ExitBadConfig, err: "unitlet-test: environment: UNITLET_LOG_LEVEL"},
	} {
		var stdout, stderr bytes.Buffer
		if code := Main(context.Background(), cmd, tc.args, tc.environ, &stdout, &stderr); code != tc.code ||
			!strings.HasPrefix(stdout.String(), tc.out) || !strings.HasPrefix(stderr.String(), tc.err) {
			t.Errorf("Main(%v, %v) = %d, stdout %q, stderr %q", tc.args, tc.environ, code, stdout.String(), stderr.String())
		}
	}
	if ran {
		t.Errorf("run ran for --version, --help or a bad configuration")
	}
	var stderr bytes.Buffer
	if code := Main(context.Background(), cmd, nil, []string{"UNITLET_SOCKET_DIR=" + t.TempDir()}, &bytes.Buffer{}, &stderr); code != ExitOK || !ran {
		t.Errorf("a clean run: code %d, ran %v", code, ran)
	}
	failing := testCommand(func(context.Context, testConfig, *slog.Logger) error { return ConfigError(errors.New("bad")) })
	stderr.Reset()
	if code := Main(context.Background(), failing, nil, nil, &bytes.Buffer{}, &stderr); code != ExitBadConfig {
		t.Errorf("a configuration error: code %d, want %d", code, ExitBadConfig)
	}
	if n := strings.Count(stderr.String(), "bad"); n != 1 {
		t.Errorf("the failure was logged %d times, want once:\n%s", n, stderr.String())
	}
}

func TestMainReadsTheEnvironmentThenTheFlags(t *testing.T) {
	var got testConfig
	cmd := testCommand(func(_ context.Context, c testConfig, _ *slog.Logger) error { got = c; return nil })
	environ := []string{"UNITLET_TEST_LIFETIME=15m", "UNITLET_NAME=from-env", "UNITLET_LOG_LEVEL=debug", "UNRELATED=x"}
	if code := Main(context.Background(), cmd, nil, environ, &bytes.Buffer{}, &bytes.Buffer{}); code != ExitOK {
		t.Fatalf("code %d", code)
	}
	if got.Lifetime != 15*time.Minute || got.Name != "from-env" || got.NameFrom != "env" || got.LogLevel != "debug" || got.SocketDir != "/run/unitlet" {
		t.Errorf("from the environment: %+v", got)
	}
	if code := Main(context.Background(), cmd, []string{"--name=from-flag"}, environ, &bytes.Buffer{}, &bytes.Buffer{}); code != ExitOK {
		t.Fatalf("code %d", code)
	}
	if got.Name != "from-flag" || got.NameFrom != "flag" {
		t.Errorf("the command line wins: %+v", got)
	}
}
