// Package eviction is unitlet-eviction: it watches the node for memory, disk and PID
// pressure as the kubelet's eviction manager does, reports the pressure conditions, gives
// podsync its admission verdicts, and when a threshold is met frees what the node can free
// and then evicts pods, one per cycle, through podsync.
package eviction

import (
	"context"
	"log/slog"

	"github.com/unitlet/unitlet/shared/daemon"
)

// ServiceName is unitlet-eviction's name on the bus.
const ServiceName = "eviction"

// Config is unitlet-eviction's configuration: the process settings, from UNITLET_*
// variables. The node's configuration (the eviction thresholds among it) comes from
// unitlet-config over the bus.
type Config struct {
	daemon.Settings
	// CgroupMount is where the cgroup filesystem is mounted: the v2 hierarchy, or the v1
	// controllers' directories.
	CgroupMount string `env:"CGROUP_MOUNT" envDefault:"/sys/fs/cgroup"`
}

// Command is unitlet-eviction's main.
func Command() daemon.Command[Config] {
	return daemon.Command[Config]{Service: ServiceName, About: "unitlet-eviction watches the node for memory, disk and PID pressure, reports the\npressure conditions, and evicts pods through unitlet-podsync when an eviction threshold is\nmet. It reads the node's configuration from unitlet-config over the bus.", Run: Run}
}

// Run runs unitlet-eviction until ctx ends or it fails.
func Run(ctx context.Context, cfg Config, log *slog.Logger) error {
	d := daemon.New(daemon.Options{Service: ServiceName, Settings: cfg.Settings, Logger: log})
	return d.Run(ctx)
}
