// Package daemon is the process runtime every unitlet service shares: settings from the
// environment, logging, the bus socket (systemd socket activation or a socket of its own),
// the gRPC server with peer authorization and health, the metrics listener, sd_notify
// readiness and watchdog, and a graceful, bounded stop. A service builds a Daemon, registers
// its API and loops on it, and calls Run.
package daemon

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/unitlet/unitlet/shared/envconfig"
)

// Settings are the process settings every service reads from the environment. A service's
// configuration struct embeds them, with its own settings beside, and Main parses the whole
// struct (envconfig.Parse).
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

// Process returns the settings themselves; through embedding, a service's configuration
// struct returns its process settings, which is what Main needs of it.
func (s Settings) Process() Settings { return s }

// Validate checks the settings' values.
func (s Settings) Validate() error {
	if !filepath.IsAbs(s.SocketDir) {
		return ConfigError(fmt.Errorf("environment: %sSOCKET_DIR=%q: must be an absolute path", envconfig.Prefix, s.SocketDir))
	}
	if _, err := parseLevel(s.LogLevel); err != nil {
		return ConfigError(fmt.Errorf("environment: %sLOG_LEVEL=%q: %w", envconfig.Prefix, s.LogLevel, err))
	}
	if s.LogFormat != "text" && s.LogFormat != "json" {
		return ConfigError(fmt.Errorf("environment: %sLOG_FORMAT=%q: must be text or json", envconfig.Prefix, s.LogFormat))
	}
	if s.ShutdownTimeout <= 0 {
		return ConfigError(fmt.Errorf("environment: %sSHUTDOWN_TIMEOUT=%s: must be positive", envconfig.Prefix, s.ShutdownTimeout))
	}
	return nil
}
