package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/spf13/pflag"

	"github.com/unitlet/unitlet/shared/version"
)

// Main is the whole main of a service that takes no flags besides --version and --help:
// it parses them, loads the process settings (Load) and calls run, and returns the exit
// code: 0 after a clean stop, 2 for bad flags or settings, else ExitCode of run's error.
// about is the --help text after the usage line.
func Main(ctx context.Context, service, about string, args []string, stdout, stderr io.Writer, run func(context.Context, Settings, *slog.Logger) error) int {
	name := "unitlet-" + service
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	showVersion := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			fmt.Fprintf(stdout, "Usage: %s [--version]\n\n%s\n", name, about)
			return ExitOK
		}
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return ExitBadConfig
	}
	if *showVersion {
		fmt.Fprintln(stdout, version.String(name))
		return ExitOK
	}
	settings, log, err := Load(stderr, service)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return ExitBadConfig
	}
	if err := run(ctx, settings, log); err != nil {
		log.Error(name+" failed", "err", err)
		return ExitCode(err)
	}
	return ExitOK
}
