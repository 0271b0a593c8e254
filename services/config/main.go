package config

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"

	"github.com/spf13/pflag"

	configv1 "github.com/unitlet/unitlet/proto/unitlet/config/v1"
	"github.com/unitlet/unitlet/shared/checkpoint"
	"github.com/unitlet/unitlet/shared/daemon"
	"github.com/unitlet/unitlet/shared/pki"
	"github.com/unitlet/unitlet/shared/version"
)

// ServiceName is unitlet-config's name on the bus.
const ServiceName = "config"

// Main runs unitlet-config and returns its exit code: 0 after a clean stop, 2 when the
// configuration or the command line is invalid (restarting cannot help), 1 otherwise.
func Main(ctx context.Context, args []string, environ func(string) (string, bool), stdout, stderr io.Writer) int {
	fail := func(code int, err error) int {
		fmt.Fprintf(stderr, "unitlet-config: %v\n", err)
		return code
	}
	o, fs, err := ParseOptions(args, environ)
	if errors.Is(err, pflag.ErrHelp) {
		fmt.Fprintf(stdout, "Usage: unitlet-config [flags]\n\nunitlet-config owns the node's configuration and serves it to the other unitlet services.\nEvery flag can also be set as UNITLET_<FLAG_NAME>; the command line wins.\n\n%s", fs.FlagUsages())
		return daemon.ExitOK
	}
	if err != nil {
		return fail(daemon.ExitBadConfig, err)
	}
	if o.Version {
		fmt.Fprintln(stdout, version.String("unitlet-config"))
		return daemon.ExitOK
	}

	settings, log, err := daemon.Load(stderr, ServiceName)
	if err != nil {
		return fail(daemon.ExitBadConfig, err)
	}
	lifetime, err := pki.RequestedLifetime(nil)
	if err != nil {
		return fail(daemon.ExitBadConfig, err)
	}

	lock, err := Lock(o.RootDir)
	if err != nil {
		return fail(daemon.ExitFailure, err)
	}
	defer lock.Close()
	store, err := checkpoint.Open(filepath.Join(o.RootDir, "checkpoints"))
	if err != nil {
		return fail(daemon.ExitFailure, err)
	}

	d := daemon.New(daemon.Options{Service: ServiceName, Settings: settings, Logger: log})
	svc, err := NewService(o, store, d.Registry(), log)
	if err != nil {
		return fail(daemon.ExitBadConfig, err)
	}
	bootstrap := NewBootstrapper(svc.Current, d.Registry(), log)
	bootstrap.lifetime = lifetime
	configv1.RegisterConfigServiceServer(d.Server(), NewServer(svc, bootstrap))
	d.HandleHTTP("/configz", http.HandlerFunc(svc.ServeConfigz))
	d.OnReload(func(context.Context) { _ = svc.Reload(TriggerSignal) })
	d.Go("file watch", svc.WatchFiles)
	if o.BootstrapKubeconfig != "" {
		// TLS bootstrap runs beside the bus: the other services read the configuration and
		// wait for the kubeconfig themselves, and READY=1 does not wait for it.
		d.Go("tls bootstrap", bootstrap.Run)
	}

	if err := d.Run(ctx); err != nil {
		log.Error("unitlet-config failed", "err", err)
		return daemon.ExitCode(err)
	}
	return daemon.ExitOK
}
