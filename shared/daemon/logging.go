package daemon

import (
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/unitlet/unitlet/shared/envconfig"
)

// NewLogger returns the process's logger: text or JSON to w at the configured level, every
// record carrying the service's name.
func NewLogger(w io.Writer, s Settings, service string) (*slog.Logger, error) {
	level, err := parseLevel(s.LogLevel)
	if err != nil {
		return nil, ConfigError(fmt.Errorf("environment: %sLOG_LEVEL=%q: %w", envconfig.Prefix, s.LogLevel, err))
	}
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler
	switch s.LogFormat {
	case "json":
		h = slog.NewJSONHandler(w, opts)
	case "text", "":
		h = slog.NewTextHandler(w, opts)
	default:
		return nil, ConfigError(fmt.Errorf("environment: %sLOG_FORMAT=%q: must be text or json", envconfig.Prefix, s.LogFormat))
	}
	return slog.New(h).With("service", service), nil
}

func parseLevel(s string) (slog.Level, error) {
	switch strings.ToLower(s) {
	case "debug":
		return slog.LevelDebug, nil
	case "info", "":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("must be debug, info, warn or error")
}
