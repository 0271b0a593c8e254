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
	"strings"
	"time"

	"github.com/unitlet/unitlet/shared/envconfig"
)

// Settings are the process settings every service reads from the environment. A service's
// configuration struct embeds them, with its own settings beside, and Main parses the whole
// struct (envconfig.Parse).
type Settings struct {
	// SocketDir holds the bus sockets, <service>.sock each.
	SocketDir string `env:"SOCKET_DIR" envDefault:"/run/unitlet"`
	// MetricsAddr is the process's HTTP listener. A host:port serves /healthz alone, with
	// no authentication, as the kubelet's healthz port. "unix:" and an absolute path is a
	// Unix socket (mode 0600, the process owner's) that also serves /metrics,
	// /metrics/<name> and the service's pages (HandleHTTP): those name the node's pods and
	// hold its configuration, so only the socket's file permissions may guard them.
	// Empty: none, unless systemd passes a socket named "metrics" (see servesPages).
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
	if err := checkMetricsAddr(s.MetricsAddr); err != nil {
		return ConfigError(fmt.Errorf("environment: %sMETRICS_ADDR=%q: %w", envconfig.Prefix, s.MetricsAddr, err))
	}
	if s.ShutdownTimeout <= 0 {
		return ConfigError(fmt.Errorf("environment: %sSHUTDOWN_TIMEOUT=%s: must be positive", envconfig.Prefix, s.ShutdownTimeout))
	}
	return nil
}

// metricsUnix prefixes a MetricsAddr that is a Unix socket's path.
const metricsUnix = "unix:"

// checkMetricsAddr checks a MetricsAddr: empty, host:port, or unix: and an absolute path.
func checkMetricsAddr(addr string) error {
	const want = "want host:port (a TCP listener serving /healthz only) or unix:/absolute/path (a Unix socket serving /metrics and the service's pages too)"
	if addr == "" {
		return nil
	}
	if path, ok := strings.CutPrefix(addr, metricsUnix); ok {
		// An abstract socket (@name) has no file permissions: anyone may connect.
		if !filepath.IsAbs(path) || filepath.Clean(path) != path {
			return fmt.Errorf("the socket's path must be absolute and clean (no abstract socket: it has no file permissions); %s", want)
		}
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
