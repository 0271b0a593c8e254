// Package daemon is the process runtime every unitlet service shares: settings from the
// environment, logging, the bus socket (systemd socket activation or a socket of its own),
// the gRPC server with peer authorization and health, the metrics listener, sd_notify
// readiness and watchdog, and a graceful, bounded stop. A service builds a Daemon, registers
// its API and loops on it, and calls Run.
package daemon

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"reflect"
	"strings"
	"time"

	"github.com/caarlos0/env/v11"
)

// EnvPrefix prefixes every environment variable unitlet reads.
const EnvPrefix = "UNITLET_"

// Settings are the process settings every service reads from the environment. Services embed
// them in their own settings struct and parse the whole struct with ParseEnv.
type Settings struct {
	// SocketDir holds the bus sockets, <service>.sock each.
	SocketDir string `env:"SOCKET_DIR" envDefault:"/run/unitlet"`
	// MetricsAddr is the host:port of the HTTP listener for /metrics, /healthz and the
	// service's own pages. Empty: none, unless systemd passes a socket named "metrics".
	MetricsAddr string `env:"METRICS_ADDR"`
	// LogLevel is debug, info, warn or error.
	LogLevel string `env:"LOG_LEVEL" envDefault:"info"`
	// LogFormat is text or json.
	LogFormat string `env:"LOG_FORMAT" envDefault:"text"`
	// ShutdownTimeout bounds the drain of in-flight calls on stop.
	ShutdownTimeout time.Duration `env:"SHUTDOWN_TIMEOUT" envDefault:"10s"`
}

// ParseEnv fills v, a pointer to a struct with `env` tags, from UNITLET_* variables. environ
// overrides the process environment when not nil (tests). Errors are configuration errors.
func ParseEnv(v any, environ map[string]string) error {
	opts := env.Options{Prefix: EnvPrefix}
	if environ != nil {
		opts.Environment = environ
	}
	if err := env.ParseWithOptions(v, opts); err != nil {
		return ConfigError(fmt.Errorf("environment: %s", describeEnvError(v, err)))
	}
	return nil
}

// describeEnvError names the variable a parse error is about; the library names the Go field.
func describeEnvError(v any, err error) string {
	var agg env.AggregateError
	if !errors.As(err, &agg) {
		return err.Error()
	}
	var msgs []string
	for _, e := range agg.Errors {
		var pe env.ParseError
		if errors.As(e, &pe) {
			if tag, ok := envTag(reflect.TypeOf(v), pe.Name); ok {
				msgs = append(msgs, fmt.Sprintf("%s%s: %v", EnvPrefix, tag, pe.Err))
				continue
			}
		}
		msgs = append(msgs, e.Error())
	}
	return strings.Join(msgs, "; ")
}

// envTag finds the env tag of the field called name in struct t or its embedded structs.
func envTag(t reflect.Type, name string) (string, bool) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return "", false
	}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if f.Name == name {
			if tag, _, _ := strings.Cut(f.Tag.Get("env"), ","); tag != "" {
				return f.Tag.Get("envPrefix") + tag, true
			}
		}
		if f.Type.Kind() == reflect.Struct {
			if tag, ok := envTag(f.Type, name); ok {
				return f.Tag.Get("envPrefix") + tag, true
			}
		}
	}
	return "", false
}

// Validate checks the settings' values.
func (s Settings) Validate() error {
	if !filepath.IsAbs(s.SocketDir) {
		return ConfigError(fmt.Errorf("environment: %sSOCKET_DIR=%q: must be an absolute path", EnvPrefix, s.SocketDir))
	}
	if _, err := parseLevel(s.LogLevel); err != nil {
		return ConfigError(fmt.Errorf("environment: %sLOG_LEVEL=%q: %w", EnvPrefix, s.LogLevel, err))
	}
	if s.LogFormat != "text" && s.LogFormat != "json" {
		return ConfigError(fmt.Errorf("environment: %sLOG_FORMAT=%q: must be text or json", EnvPrefix, s.LogFormat))
	}
	if s.ShutdownTimeout <= 0 {
		return ConfigError(fmt.Errorf("environment: %sSHUTDOWN_TIMEOUT=%s: must be positive", EnvPrefix, s.ShutdownTimeout))
	}
	return nil
}

// SocketPath is where the bus socket of service lives in dir.
func SocketPath(dir, service string) string {
	return filepath.Join(dir, service+".sock")
}

// Load reads the process settings from the environment, checks them and makes the
// service's logger writing to w: what every service's main does first. Errors are
// configuration errors (exit 2).
func Load(w io.Writer, service string) (Settings, *slog.Logger, error) {
	var s Settings
	if err := ParseEnv(&s, nil); err != nil {
		return s, nil, err
	}
	if err := s.Validate(); err != nil {
		return s, nil, ConfigError(err)
	}
	log, err := NewLogger(w, s, service)
	if err != nil {
		return s, nil, ConfigError(err)
	}
	return s, log, nil
}
