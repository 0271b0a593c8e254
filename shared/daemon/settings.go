// Package daemon is the process runtime every unitlet service shares: settings from the
// environment, logging, the bus socket (systemd socket activation or a socket of its own),
// the gRPC server with peer authorization and health, the metrics listener, sd_notify
// readiness and watchdog, and a graceful, bounded stop. A service builds a Daemon, registers
// its API and loops on it, and calls Run.
package daemon

import (
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"time"

	"github.com/unitlet/unitlet/shared/envconfig"
)

// Settings are the process settings every service reads from the environment. A service's
// configuration struct embeds them, with its own settings beside, and Main parses the whole
// struct (envconfig.Parse).
type Settings struct {
	// SocketDir holds the bus sockets, <service>.sock each.
	SocketDir string `env:"SOCKET_DIR" envDefault:"/run/unitlet"`
	// MetricsAddr is the process's TCP listener, host:port: /healthz alone, with no
	// authentication, as the kubelet's healthz port. Empty: none, unless systemd passes a
	// socket named "metrics" (see servesPages).
	MetricsAddr string `env:"METRICS_ADDR"`
	// MetricsSocket is a Unix socket's absolute path (mode 0600, the process owner's) that
	// serves /healthz, /metrics, /metrics/<name> and the service's pages (HandleHTTP):
	// those name the node's pods and hold its configuration, so only the socket's file
	// permissions may guard them. Empty: none. A setting of its own, beside MetricsAddr,
	// so a release that does not know it ignores it: a unit's drop-in that opts in stays
	// valid for a service rolled back one package.
	MetricsSocket string `env:"METRICS_SOCKET"`
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
	if err := checkMetricsAddr(s.MetricsAddr); err != nil {
		return ConfigError(fmt.Errorf("environment: %sMETRICS_ADDR=%q: %w", envconfig.Prefix, s.MetricsAddr, err))
	}
	if p := s.MetricsSocket; p != "" && (!filepath.IsAbs(p) || filepath.Clean(p) != p) {
		// An abstract socket (@name) has no file permissions: anyone may connect.
		return ConfigError(fmt.Errorf("environment: %sMETRICS_SOCKET=%q: want an absolute, clean path (a Unix socket that serves /metrics and the service's pages; no abstract socket: it has no file permissions)", envconfig.Prefix, p))
	}
	if s.ShutdownTimeout <= 0 {
		return ConfigError(fmt.Errorf("environment: %sSHUTDOWN_TIMEOUT=%s: must be positive", envconfig.Prefix, s.ShutdownTimeout))
	}
	return nil
}

// checkMetricsAddr checks a MetricsAddr: empty or host:port.
func checkMetricsAddr(addr string) error {
	want := "want host:port (a TCP listener serving /healthz only; for /metrics and the service's pages, a Unix socket: " + envconfig.Prefix + "METRICS_SOCKET=/absolute/path)"
	if addr == "" {
		return nil
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%v; %s", err, want)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("port %q is not a number of 0 to 65535; %s", port, want)
	}
	return nil
}
