package daemon

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	sddaemon "github.com/coreos/go-systemd/v22/daemon"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/unitlet/unitlet/shared/envconfig"
)

// sdNotify sends state to systemd when NOTIFY_SOCKET is set; without it there is nobody to
// tell. A failure to notify is logged and never fatal.
func (d *Daemon) sdNotify(state string) {
	if _, err := sddaemon.SdNotify(false, state); err != nil {
		what, _, _ := strings.Cut(state, "\n")
		d.log.Warn("tell systemd", "state", what, "err", err)
	}
}

// watchHealth runs the health check periodically: it sets the gRPC health status and, when
// systemd asks for a watchdog (WATCHDOG_USEC), sends WATCHDOG=1 every half interval, but only
// while the check passes, so that systemd restarts a service that is alive but not well.
func (d *Daemon) watchHealth(ctx context.Context) error {
	period := d.healthPeriod
	watchdog, err := sddaemon.SdWatchdogEnabled(false)
	if err != nil {
		d.log.Warn("ignoring the watchdog settings", "err", err)
	}
	if watchdog > 0 {
		period = watchdog / 2
		d.log.Info("watchdog enabled", "interval", watchdog)
	}
	timeout := max(period/2, 10*time.Millisecond)
	healthy := true
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		err := d.healthCheck(cctx)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		switch {
		case err == nil && !healthy:
			d.log.Info("healthy again")
		case err != nil && healthy:
			d.log.Warn("health check failing; not feeding the watchdog", "err", err)
		}
		healthy = err == nil
		d.setServing(healthy)
		if healthy && watchdog > 0 {
			d.notify("WATCHDOG=1")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

func (d *Daemon) setServing(ok bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if ok {
		st = healthpb.HealthCheckResponse_SERVING
	}
	d.health.SetServingStatus("", st)
	d.health.SetServingStatus(d.opts.Service, st)
}

// serveHealthz answers 200 "ok" while the service's health check passes, 503 with the
// reason otherwise.
func (d *Daemon) serveHealthz(w http.ResponseWriter, r *http.Request) { d.answerHealthz(w, r, true) }

// serveHealthzWithheld is serveHealthz for a listener with no authentication: a failure's
// reason is withheld, as the kubelet's healthz handler withholds it.
func (d *Daemon) serveHealthzWithheld(w http.ResponseWriter, r *http.Request) {
	d.answerHealthz(w, r, false)
}

func (d *Daemon) answerHealthz(w http.ResponseWriter, r *http.Request, reason bool) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if err := d.healthCheck(ctx); err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		msg := "unhealthy: reason withheld (the service's log and unitletctl status give it)"
		if reason {
			msg = "unhealthy: " + err.Error()
		}
		_, _ = w.Write([]byte(msg + "\n"))
		return
	}
	_, _ = w.Write([]byte("ok\n"))
}

// serveHealthzOnly answers every path but /healthz on a TCP metrics listener: not found,
// as on the kubelet's healthz port, saying where the pages are served instead.
func (d *Daemon) serveHealthzOnly(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusNotFound)
	fmt.Fprintf(w, "404 page not found: this unauthenticated TCP listener serves /healthz only; the node's metrics are on the node API (authenticated, port 10250 by default), and unitlet-%s serves its own on a Unix socket with %sMETRICS_SOCKET=/run/unitlet/%s-metrics.sock\n",
		d.opts.Service, envconfig.Prefix, d.opts.Service)
}
