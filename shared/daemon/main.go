package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"github.com/spf13/pflag"

	"github.com/unitlet/unitlet/shared/envconfig"
	"github.com/unitlet/unitlet/shared/restart"
	"github.com/unitlet/unitlet/shared/version"
)

// Config is a service's configuration: a struct that embeds Settings, with the service's
// own environment settings (`env` tags) and flags beside them. Main parses it once, checks
// it with Validate, and hands it to the service's Run.
type Config interface {
	// Process is the embedded Settings.
	Process() Settings
	// Validate checks the whole configuration; every error is the user's to fix (exit 2).
	Validate() error
}

// Command is a service's main, as data: Main reads its configuration (the environment,
// then the command line), makes the logger, and calls Run.
type Command[C Config] struct {
	// Service is the short name: "config", "certs", "podsync", "volumes" or "status".
	Service string
	// About is the --help text after the usage line.
	About string
	// Flags binds the service's flags to cfg. A flag that is not on the command line is
	// read from its variable, envconfig.Name(flag), when that is set. Nil: the service takes
	// no flags besides --help and --version.
	Flags func(fs *pflag.FlagSet, cfg *C)
	// Complete, when set, finishes cfg after the environment and the flags are read:
	// defaults that depend on other values, and values built from several flags. fromEnv
	// reports whether a flag's value came from its variable rather than the command line.
	Complete func(cfg *C, fs *pflag.FlagSet, fromEnv func(flag string) bool) error
	// Run runs the service until ctx ends or it fails.
	Run func(ctx context.Context, cfg C, log *slog.Logger) error
}

// Main is the whole main of a service: it reads the configuration from environ (as
// os.Environ gives it) and args, answers --help and --version, and runs the service. It
// returns the exit code: 0 after a clean stop, 2 for a bad command line or configuration,
// else ExitCode of Run's error, which it logs, once.
func Main[C Config](ctx context.Context, cmd Command[C], args, environ []string, stdout, stderr io.Writer) int {
	name := "unitlet-" + cmd.Service
	cfg, fs, err := cmd.Parse(args, envconfig.Map(environ))
	switch {
	case errors.Is(err, pflag.ErrHelp):
		fmt.Fprint(stdout, cmd.usage(fs))
		return ExitOK
	case err == nil && fs.Changed("version"):
		fmt.Fprintln(stdout, version.String(name))
		return ExitOK
	}
	var log *slog.Logger
	if err == nil {
		log, err = NewLogger(stderr, cfg.Process(), cmd.Service)
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return ExitBadConfig
	}
	setMemoryLimit(log, memlimit.FromCgroup)
	setGCPercent()
	if err := cmd.Run(ctx, cfg, log); err != nil {
		var again *restart.Error
		if errors.As(err, &again) {
			log.Info(name+" stopped to start again", "reason", again.Reason)
			return ExitOK
		}
		log.Error(name+" failed", "err", err)
		return ExitCode(err)
	}
	return ExitOK
}

// Parse reads a configuration: the environment's variables, then the command line over
// them, then Complete and Validate. It returns the flag set as parsed; with --version it
// stops there, and with --help the error is pflag.ErrHelp. environ holds the variables by
// name. Every error is the user's to fix.
func (cmd Command[C]) Parse(args []string, environ map[string]string) (cfg C, fs *pflag.FlagSet, err error) {
	name := "unitlet-" + cmd.Service
	fs = pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SortFlags = false
	fs.SetOutput(io.Discard)
	if err := envconfig.Parse(&cfg, environ); err != nil {
		return cfg, fs, err
	}
	if cmd.Flags != nil {
		cmd.Flags(fs, &cfg)
	}
	fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		return cfg, fs, err
	}
	if fs.Changed("version") {
		return cfg, fs, nil
	}
	if fs.NArg() > 0 {
		return cfg, fs, fmt.Errorf("unexpected argument %q: %s takes flags only", fs.Arg(0), name)
	}
	fromEnv := map[string]bool{}
	fs.VisitAll(func(f *pflag.Flag) {
		if err != nil || f.Changed || f.Name == "version" {
			return
		}
		v, ok := environ[envconfig.Name(f.Name)]
		if !ok {
			return
		}
		if setErr := fs.Set(f.Name, v); setErr != nil {
			err = fmt.Errorf("environment: %s=%q: %v", envconfig.Name(f.Name), v, setErr)
			return
		}
		fromEnv[f.Name] = true
	})
	if err != nil {
		return cfg, fs, err
	}
	if cmd.Complete != nil {
		if err := cmd.Complete(&cfg, fs, func(flag string) bool { return fromEnv[flag] }); err != nil {
			return cfg, fs, err
		}
	}
	return cfg, fs, cfg.Validate()
}

// usage is the --help text.
func (cmd Command[C]) usage(fs *pflag.FlagSet) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Usage: unitlet-%s [flags]\n\n%s\n\n", cmd.Service, cmd.About)
	b.WriteString("Every flag can also be set as UNITLET_<FLAG_NAME>; the command line wins. Process\n")
	b.WriteString("settings come from UNITLET_* variables (see the README).\n\n")
	b.WriteString(fs.FlagUsages())
	return b.String()
}
