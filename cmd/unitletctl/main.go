// Command unitletctl shows and controls the unitlet services of this node over their bus
// sockets.
//
//	unitletctl status [SERVICE...]   every service: socket, reachability, health, version, pid, uptime
//	unitletctl config                the effective configuration, its generation and the last reload
//	unitletctl config bootstrap      the TLS bootstrap: state, attempts, CSR, last error
//	unitletctl pods                  the node's pods: status, readiness, restarts, age, IP
//	unitletctl node                  the node in the API: registration, conditions, lease
//	unitletctl certs [rotate KIND]   the node's certificates and their rotation; force one
//	unitletctl eviction              node pressure: signals against thresholds, conditions, last evictions
//	unitletctl cis                   this node against the CIS Kubernetes Benchmark's worker-node checks
//	unitletctl version               unitletctl's own version
//
// Output is a table or YAML; -o json prints JSON.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/unitlet/unitlet/cmd/unitletctl/cis"
	"github.com/unitlet/unitlet/shared/bus"
	"github.com/unitlet/unitlet/shared/envconfig"
	"github.com/unitlet/unitlet/shared/version"
)

type globals struct {
	socketDir string
	output    string
	timeout   time.Duration
	// rotateWait bounds certs rotate's wait for the new certificate (--wait).
	rotateWait time.Duration
	stdout     io.Writer
	// stderr takes warnings about what a command leaves out.
	stderr io.Writer
}

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `Usage: unitletctl [flags] COMMAND

Commands:
  status [SERVICE...]  the unitlet services: socket, reachability, health, version, pid, uptime
  config               the node's effective configuration, its generation and the last reload
  config bootstrap     the TLS bootstrap (unitlet-config): state, attempts, CSR, certificate, last error
  pods                 the node's pods (unitlet-podsync): status, ready, restarts, age, IP, source
  node                 the node in the API (unitlet-status): registration, conditions, lease, pod status writes
  certs                the node's certificates (unitlet-certs): subject, not-after, next rotation, state
  certs rotate [client|serving]  force a rotation and follow it until the new certificate is in use
  eviction             node pressure (unitlet-eviction): each signal against its hard and soft thresholds
                       (MET when met), the pressure conditions, the last evictions
  cis                  this node against the CIS Kubernetes Benchmark v1.10 worker-node checks (4.1, 4.2);
                       reads the units, files, configuration in effect and node API (run as root); exit 1 on a FAIL
  version              unitletctl's version

Flags:
%s`

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	g := globals{stdout: stdout, stderr: stderr}
	fs := pflag.NewFlagSet("unitletctl", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	defaultDir := "/run/unitlet"
	if v, ok := os.LookupEnv(envconfig.Prefix + "SOCKET_DIR"); ok && v != "" {
		defaultDir = v
	}
	fs.StringVar(&g.socketDir, "socket-dir", defaultDir, "the directory of the bus sockets (env UNITLET_SOCKET_DIR)")
	fs.StringVarP(&g.output, "output", "o", "", "output format: json, or the default table/yaml")
	fs.DurationVar(&g.timeout, "timeout", 3*time.Second, "how long to wait for each service to answer")
	// certs rotate's flag is parsed with the global ones: pflag takes every flag on the
	// line, wherever it stands, so a command's own flag set never saw it.
	fs.DurationVar(&g.rotateWait, "wait", 15*time.Minute, "certs rotate: how long to wait for the new certificate (the rotation goes on after that)")
	showVersion := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			fmt.Fprintf(stdout, usage, fs.FlagUsages())
			return 0
		}
		fmt.Fprintf(stderr, "unitletctl: %v\n", err)
		return 2
	}
	if g.output != "" && g.output != "json" && g.output != "yaml" && g.output != "table" {
		fmt.Fprintf(stderr, "unitletctl: -o %q: want json (or leave it out for the table/yaml)\n", g.output)
		return 2
	}
	if *showVersion {
		fmt.Fprintln(stdout, version.String("unitletctl"))
		return 0
	}
	if fs.NArg() == 0 {
		fmt.Fprintf(stderr, usage, fs.FlagUsages())
		return 2
	}
	cmd, rest := fs.Arg(0), fs.Args()[1:]
	if fs.Changed("wait") && (cmd != "certs" || len(rest) == 0 || rest[0] != "rotate") {
		fmt.Fprintf(stderr, "unitletctl: --wait applies to certs rotate only\n")
		return 2
	}
	var err error
	switch cmd {
	case "status":
		err = statusCmd(ctx, g, rest)
	case "config":
		switch {
		case len(rest) == 0:
			err = configCmd(ctx, g)
		case len(rest) == 1 && rest[0] == "bootstrap":
			err = bootstrapCmd(ctx, g)
		default:
			err = usageError(fmt.Errorf("config takes no arguments but \"bootstrap\""))
		}
	case "pods":
		if len(rest) > 0 {
			err = usageError(fmt.Errorf("pods takes no arguments"))
			break
		}
		err = podsCmd(ctx, g, time.Now())
	case "node":
		if len(rest) > 0 {
			err = usageError(fmt.Errorf("node takes no arguments"))
			break
		}
		err = nodeCmd(ctx, g, time.Now())
	case "certs":
		err = certsCmd(ctx, g, rest, time.Now())
	case "eviction":
		if len(rest) > 0 {
			err = usageError(fmt.Errorf("eviction takes no arguments"))
			break
		}
		err = evictionCmd(ctx, g, time.Now())
	case "cis":
		if len(rest) > 0 {
			err = usageError(fmt.Errorf("cis takes no arguments"))
			break
		}
		err = cisCmd(ctx, g, cis.Host{SocketDir: g.socketDir, Timeout: g.timeout})
	case "version":
		fmt.Fprintln(stdout, version.String("unitletctl"))
	default:
		err = usageError(fmt.Errorf("unknown command %q; see unitletctl --help", cmd))
	}
	if err != nil {
		fmt.Fprintf(stderr, "unitletctl: %v\n", err)
		var ue usageErr
		if errors.As(err, &ue) {
			return 2
		}
		return 1
	}
	return 0
}

type usageErr struct{ error }

func usageError(err error) error { return usageErr{err} }

// explain turns a bus error into what the user should do about it.
func explain(service, socket string, err error) error {
	switch status.Code(err) {
	case codes.PermissionDenied:
		return fmt.Errorf("unitlet-%s refused the call: %s; run unitletctl as root or as a member of the unitlet group", service, status.Convert(err).Message())
	case codes.Unavailable, codes.DeadlineExceeded:
		if _, serr := os.Stat(socket); serr != nil {
			return fmt.Errorf("unitlet-%s is not running: no socket at %s (start it with `systemctl start unitlet-%s.socket`, or pass --socket-dir)", service, socket, service)
		}
		return fmt.Errorf("unitlet-%s is not answering on %s: %s", service, socket, status.Convert(err).Message())
	}
	return fmt.Errorf("unitlet-%s: %w", service, err)
}

// connect dials service (see dial) and bounds the calls on it by --timeout; done cancels
// the context and closes the connection.
func connect(ctx context.Context, g globals, service string) (_ context.Context, _ *grpc.ClientConn, path string, done func(), _ error) {
	conn, path, err := dial(g, service)
	if err != nil {
		return nil, nil, path, nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	return ctx, conn, path, func() { cancel(); conn.Close() }, nil
}

// dial connects to a service's bus socket in g.socketDir; a missing socket is explained
// as the service not running. It returns the socket's path for explain.
func dial(g globals, service string) (*grpc.ClientConn, string, error) {
	path := bus.SocketPath(g.socketDir, service)
	if _, err := os.Stat(path); err != nil {
		return nil, path, explain(service, path, status.Error(codes.Unavailable, err.Error()))
	}
	conn, err := bus.DialPath(path)
	return conn, path, err
}
