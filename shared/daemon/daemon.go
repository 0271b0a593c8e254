package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/oklog/run"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	daemonv1 "github.com/unitlet/unitlet/proto/unitlet/daemon/v1"
	"github.com/unitlet/unitlet/shared/peercred"
)

// Options configure a Daemon.
type Options struct {
	// Service is the short name: "config", "certs", "podsync", "volumes" or "status".
	Service  string
	Settings Settings
	Logger   *slog.Logger
	// Registry receives the runtime's metrics; the service registers its own on it too.
	Registry *prometheus.Registry
	// DefaultRule admits callers of methods with no rule of their own. Zero: root and members
	// of the unitlet group.
	DefaultRule peercred.Rule
}

// Daemon is one unitlet service process.
type Daemon struct {
	opts    Options
	log     *slog.Logger
	started time.Time

	server  *grpc.Server
	health  *health.Server
	authz   *peercred.Authorizer
	mux     *http.ServeMux // every page: served on a Unix metrics socket only (servesPages)
	healthz *http.ServeMux // /healthz alone: what a TCP metrics listener serves
	metrics *grpcprom.ServerMetrics

	// stopping is cancelled when the process begins to stop: streaming calls end then, so
	// that the drain of in-flight calls is not held up by subscribers that never hang up.
	stopping     context.Context
	stopStreams  context.CancelFunc
	loops        []loop
	reloads      []func(context.Context)
	mu           sync.Mutex
	check        func(context.Context) error
	healthPeriod time.Duration
	notify       func(state string) // sd_notify; replaceable in tests
	activated    bool
	config       ConfigState
	registries   map[string]prometheus.Gatherer // AddRegistry's, by name
}

type loop struct {
	name string
	run  func(context.Context) error
}

// New returns a daemon whose gRPC server already serves grpc.health.v1 and
// unitlet.daemon.v1; register the service's API on Server() before Run.
func New(o Options) *Daemon {
	if o.Registry == nil {
		o.Registry = NewRegistry()
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.DefaultRule.String() == "" {
		o.DefaultRule = peercred.AnyOf(peercred.Root(), peercred.LookupGroup(SocketGroup))
	}
	d := &Daemon{
		opts:         o,
		log:          o.Logger,
		started:      time.Now(),
		health:       health.NewServer(),
		authz:        peercred.NewAuthorizer(o.DefaultRule),
		mux:          http.NewServeMux(),
		healthz:      http.NewServeMux(),
		healthPeriod: 10 * time.Second,
	}
	d.notify = d.sdNotify
	d.stopping, d.stopStreams = context.WithCancel(context.Background())
	d.metrics = grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram(
		grpcprom.WithHistogramBuckets([]float64{.0001, .00025, .0005, .001, .0025, .005, .01, .05, .1, .5, 1, 5}),
	))
	o.Registry.MustRegister(d.metrics, buildInfo(o.Service))
	d.server = grpc.NewServer(
		grpc.Creds(peercred.NewCredentials()),
		grpc.ChainUnaryInterceptor(d.metrics.UnaryServerInterceptor(), d.authz.UnaryInterceptor()),
		grpc.ChainStreamInterceptor(d.metrics.StreamServerInterceptor(), d.authz.StreamInterceptor(), d.endStreamsOnStop),
	)
	healthpb.RegisterHealthServer(d.server, d.health)
	daemonv1.RegisterDaemonServiceServer(d.server, infoServer{d: d})
	d.authz.Allow("/"+healthpb.Health_ServiceDesc.ServiceName+"/", peercred.Anyone())
	d.authz.Allow("/"+daemonv1.DaemonService_ServiceDesc.ServiceName+"/", peercred.Anyone())
	// The metrics name the node's pods and containers: not for anyone who reaches the socket.
	d.authz.Allow(daemonv1.DaemonService_GetMetrics_FullMethodName, o.DefaultRule)
	d.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	d.mux.Handle("/metrics", metricsHandler(o.Registry))
	d.mux.HandleFunc("/healthz", d.serveHealthz)
	d.healthz.HandleFunc("/healthz", d.serveHealthzWithheld)
	d.healthz.HandleFunc("/", d.serveHealthzOnly)
	return d
}

// Server is the gRPC server to register the service's API on.
func (d *Daemon) Server() *grpc.Server { return d.server }

// Authorizer decides who may call each RPC; set rules before Run.
func (d *Daemon) Authorizer() *peercred.Authorizer { return d.authz }

// Registry is the process's metrics registry.
func (d *Daemon) Registry() *prometheus.Registry { return d.opts.Registry }

// Logger is the process's logger.
func (d *Daemon) Logger() *slog.Logger { return d.log }

// Stopping is done once the process begins to stop.
func (d *Daemon) Stopping() <-chan struct{} { return d.stopping.Done() }

// HandleHTTP serves h at pattern on the metrics listener when that is a Unix socket; a
// TCP listener serves /healthz alone.
func (d *Daemon) HandleHTTP(pattern string, h http.Handler) { d.mux.Handle(pattern, h) }

// Go adds a loop of the service. It runs until its context is cancelled; when it returns
// early, with or without an error, the whole process stops.
func (d *Daemon) Go(name string, fn func(ctx context.Context) error) {
	d.loops = append(d.loops, loop{name: name, run: fn})
}

// OnReload runs fn on SIGHUP.
func (d *Daemon) OnReload(fn func(ctx context.Context)) { d.reloads = append(d.reloads, fn) }

// SetHealthCheck sets the service's own health check. It decides the gRPC health status,
// /healthz, and whether the systemd watchdog is fed.
func (d *Daemon) SetHealthCheck(fn func(ctx context.Context) error) {
	d.mu.Lock()
	d.check = fn
	d.mu.Unlock()
}

func (d *Daemon) healthCheck(ctx context.Context) error {
	d.mu.Lock()
	fn := d.check
	d.mu.Unlock()
	if fn == nil {
		return nil
	}
	return fn(ctx)
}

// Run binds the sockets, tells systemd it is ready, and serves until ctx ends, SIGTERM or
// SIGINT arrives, or a loop returns. A stop by signal or cancellation returns nil.
func (d *Daemon) Run(ctx context.Context) error {
	ls, err := listen(d.opts.Service, d.opts.Settings)
	if err != nil {
		return err
	}
	d.activated = ls.activated
	var g run.Group

	// Signals: SIGTERM and SIGINT stop the process; SIGHUP reloads. Its interrupt is the
	// first to run on any stop, so it tells systemd that the process is stopping.
	{
		sigs := make(chan os.Signal, 4)
		signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
		ctx, cancel := context.WithCancel(ctx)
		g.Add(func() error {
			defer signal.Stop(sigs)
			for {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case s := <-sigs:
					if s != syscall.SIGHUP {
						d.log.Info("stopping", "signal", s.String())
						return nil
					}
					d.reload(ctx)
				}
			}
		}, func(error) {
			d.notify("STOPPING=1")
			d.health.Shutdown()
			cancel()
		})
	}

	// gRPC server: the bus API. On stop, streams end at once and unary calls drain for at
	// most ShutdownTimeout.
	{
		g.Add(func() error {
			if err := d.server.Serve(ls.grpc); !isClosed(err) && !errors.Is(err, grpc.ErrServerStopped) {
				return fmt.Errorf("serve bus API: %w", err)
			}
			return nil
		}, func(error) {
			d.stopStreams()
			d.drain()
		})
	}

	// Metrics HTTP servers: /healthz, and on a Unix socket /metrics and the service's pages.
	for _, l := range ls.http() {
		handler := d.healthz
		if servesPages(l) {
			handler = d.mux
		}
		srv := &http.Server{Handler: handler, ReadHeaderTimeout: 5 * time.Second}
		g.Add(func() error {
			if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) && !isClosed(err) {
				return fmt.Errorf("serve metrics on %s: %w", l.Addr(), err)
			}
			return nil
		}, func(error) {
			ctx, cancel := context.WithTimeout(context.Background(), d.opts.Settings.ShutdownTimeout)
			defer cancel()
			_ = srv.Shutdown(ctx)
		})
	}

	// Health: the service's check drives gRPC health and the systemd watchdog.
	{
		ctx, cancel := context.WithCancel(ctx)
		g.Add(func() error { return d.watchHealth(ctx) }, func(error) { cancel() })
	}

	// The service's own loops.
	for _, l := range d.loops {
		ctx, cancel := context.WithCancel(ctx)
		g.Add(func() error {
			err := l.run(ctx)
			if ctx.Err() != nil {
				return nil
			}
			if err == nil {
				return fmt.Errorf("%s ended unexpectedly", l.name)
			}
			return fmt.Errorf("%s: %w", l.name, err)
		}, func(error) { cancel() })
	}

	d.setServing(d.healthCheck(ctx) == nil)
	d.notify("READY=1\nSTATUS=serving\nMAINPID=" + fmt.Sprint(os.Getpid()))
	d.log.Info("serving", "socket", ls.grpc.Addr().String(), "activated", ls.activated, "metrics", metricsAddr(ls), "pages", metricsPages(ls))
	err = g.Run()
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	if err == nil {
		// A failure is logged once, by Main, with the error.
		d.log.Info("stopped")
	}
	return err
}

// metricsAddr is, for the log, the metrics listeners' addresses.
func metricsAddr(ls *listeners) string {
	var out []string
	for _, l := range ls.http() {
		out = append(out, l.Addr().String())
	}
	return strings.Join(out, " ")
}

// metricsPages says, for the log, what each metrics listener serves.
func metricsPages(ls *listeners) string {
	var out []string
	for _, l := range ls.http() {
		if servesPages(l) {
			out = append(out, "all")
		} else {
			out = append(out, "/healthz only")
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}

// drain stops the gRPC server gracefully, forcing the stop after ShutdownTimeout.
func (d *Daemon) drain() {
	done := make(chan struct{})
	go func() {
		d.server.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(d.opts.Settings.ShutdownTimeout):
		d.log.Warn("in-flight calls did not finish in time; closing them", "timeout", d.opts.Settings.ShutdownTimeout)
		d.server.Stop()
		<-done
	}
}

func (d *Daemon) reload(ctx context.Context) {
	d.log.Info("reloading", "signal", "SIGHUP")
	d.notify(fmt.Sprintf("RELOADING=1\nMONOTONIC_USEC=%d", monotonicMicros()))
	for _, fn := range d.reloads {
		fn(ctx)
	}
	d.notify("READY=1")
}

// endStreamsOnStop ends a streaming call's context when the process begins to stop.
func (d *Daemon) endStreamsOnStop(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ctx, cancel := context.WithCancel(ss.Context())
	defer cancel()
	stop := context.AfterFunc(d.stopping, cancel)
	defer stop()
	return handler(srv, &streamWithContext{ServerStream: ss, ctx: ctx})
}

type streamWithContext struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *streamWithContext) Context() context.Context { return s.ctx }

func monotonicMicros() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0
	}
	return ts.Nano() / 1e3
}
