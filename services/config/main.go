package config

import (
	"context"
	"log/slog"
	"net/http"
	"path/filepath"

	"github.com/spf13/pflag"

	configv1 "github.com/unitlet/unitlet/proto/unitlet/config/v1"
	"github.com/unitlet/unitlet/shared/checkpoint"
	"github.com/unitlet/unitlet/shared/daemon"
	"github.com/unitlet/unitlet/shared/kube"
	"github.com/unitlet/unitlet/shared/pki"
)

// ServiceName is unitlet-config's name on the bus.
const ServiceName = "config"

// Config is unitlet-config's configuration: the process settings and the lifetime its TLS
// bootstrap asks for (UNITLET_* variables), and its command line, with the kubelet's flag
// names.
type Config struct {
	daemon.Settings
	pki.LifetimeSettings
	Options
}

// Validate checks the settings; the flags were checked as they were read.
func (c Config) Validate() error {
	if err := c.Settings.Validate(); err != nil {
		return err
	}
	return c.LifetimeSettings.Validate()
}

// Command is unitlet-config's main.
func Command() daemon.Command[Config] {
	return daemon.Command[Config]{
		Service:  ServiceName,
		About:    "unitlet-config owns the node's configuration and serves it to the other unitlet services.",
		Flags:    func(fs *pflag.FlagSet, c *Config) { bindFlags(fs, &c.Options) },
		Complete: func(c *Config, fs *pflag.FlagSet, fromEnv func(string) bool) error { return c.complete(fs, fromEnv) },
		Run:      Run,
	}
}

// Run runs unitlet-config until ctx ends or it fails.
func Run(ctx context.Context, cfg Config, log *slog.Logger) error {
	// Exit 1, not 2: systemd starts it again, and the file may yet be put in place.
	if err := cfg.checkKubeconfig(); err != nil {
		return err
	}
	lock, err := Lock(cfg.RootDir)
	if err != nil {
		return err
	}
	defer lock.Close()
	store, err := checkpoint.Open(filepath.Join(cfg.RootDir, "checkpoints"))
	if err != nil {
		return err
	}

	d := daemon.New(daemon.Options{Service: ServiceName, Settings: cfg.Settings, Logger: log})
	svc, err := NewService(&cfg.Options, store, d.Registry(), log)
	if err != nil {
		return daemon.ConfigError(err)
	}
	bootstrap := NewBootstrapper(svc.Current, cfg.CertificateLifetime, d.Registry(), log)
	configv1.RegisterConfigServiceServer(d.Server(), NewServer(svc, bootstrap))
	// On the metrics listener only when that is a Unix socket (UNITLET_METRICS_SOCKET);
	// a TCP one serves /healthz alone. The node API's /configz is unitlet-status's.
	d.HandleHTTP("/configz", http.HandlerFunc(svc.ServeConfigz))
	d.OnReload(func(context.Context) { _ = svc.Reload(TriggerSignal) })
	d.SetHealthCheck(svc.Healthy)
	svc.OnGeneration(func(gen uint64) { d.SetConfigState(daemon.ConfigState{Generation: gen}) })
	// File watch: the config file and its drop-ins, reloaded when they change.
	d.Go("file watch", svc.WatchFiles)
	// Node events: a failed reload, and the first load after one, on the Node, once the
	// node's kubeconfig is usable (with its client certificate followed as unitlet-certs
	// rotates it; set before any client is made).
	kube.FollowRotatedCertificates()
	d.Go("node events", svc.RecordNodeEvents)
	// TLS bootstrap, with a bootstrap kubeconfig: beside the bus, as the other services read
	// the configuration and wait for the kubeconfig themselves; READY=1 does not wait for it.
	d.Go("tls bootstrap", bootstrap.Run)
	return d.Run(ctx)
}
