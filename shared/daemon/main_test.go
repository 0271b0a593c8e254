package daemon

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

func TestMainFlagsAndExitCodes(t *testing.T) {
	ran := false
	run := func(context.Context, Settings, *slog.Logger) error { ran = true; return nil }
	for _, tc := range []struct {
		args     []string
		code     int
		out, err string
	}{
		{[]string{"--version"}, ExitOK, "unitlet-test ", ""},
		{[]string{"--help"}, ExitOK, "Usage: unitlet-test [--version]\n\nabout it", ""},
		{[]string{"--bogus"}, ExitBadConfig, "", "unitlet-test: unknown flag: --bogus"},
	} {
		var stdout, stderr bytes.Buffer
		if code := Main(context.Background(), "test", "about it", tc.args, &stdout, &stderr, run); code != tc.code ||
			!strings.HasPrefix(stdout.String(), tc.out) || !strings.HasPrefix(stderr.String(), tc.err) {
			t.Errorf("Main(%v) = %d, stdout %q, stderr %q", tc.args, code, stdout.String(), stderr.String())
		}
	}
	if ran {
		t.Errorf("run ran for --version, --help or a bad flag")
	}
	t.Setenv("UNITLET_SOCKET_DIR", t.TempDir())
	var stderr bytes.Buffer
	if code := Main(context.Background(), "test", "", nil, &bytes.Buffer{}, &stderr, run); code != ExitOK || !ran {
		t.Errorf("a clean run: code %d, ran %v", code, ran)
	}
	failing := func(context.Context, Settings, *slog.Logger) error { return ConfigError(errors.New("bad")) }
	if code := Main(context.Background(), "test", "", nil, &bytes.Buffer{}, &stderr, failing); code != ExitBadConfig {
		t.Errorf("a configuration error: code %d, want %d", code, ExitBadConfig)
	}
}
