package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	configv1 "github.com/unitlet/unitlet/proto/unitlet/config/v1"
	daemonv1 "github.com/unitlet/unitlet/proto/unitlet/daemon/v1"
	"github.com/unitlet/unitlet/shared/bus"
)

// serviceStatus is one row of `unitletctl status`.
type serviceStatus struct {
	Service       string     `json:"service"`
	Socket        string     `json:"socket"`
	SocketPresent bool       `json:"socketPresent"`
	Reachable     bool       `json:"reachable"`
	Health        string     `json:"health"`
	Version       string     `json:"version,omitempty"`
	PID           int32      `json:"pid,omitempty"`
	StartTime     *time.Time `json:"startTime,omitempty"`
	Activated     bool       `json:"socketActivated"`
	// Degraded: serving, but not as configured (unitlet-config's last load failed and
	// an earlier configuration stays in effect).
	Degraded bool `json:"degraded,omitempty"`
	// ConfigGeneration is the node configuration the service runs (unitlet-config: the
	// one it serves); PendingConfigGeneration a newer one it applies only after a restart.
	ConfigGeneration        uint64   `json:"configGeneration,omitempty"`
	PendingConfigGeneration uint64   `json:"pendingConfigGeneration,omitempty"`
	PendingConfigFields     []string `json:"pendingConfigFields,omitempty"`
	Error                   string   `json:"error,omitempty"`
}

// configColumn is the CONFIG column: the generation, and one waiting for a restart.
func (s serviceStatus) configColumn() string {
	switch {
	case s.ConfigGeneration == 0:
		return "-"
	case s.PendingConfigGeneration != 0:
		return fmt.Sprintf("%d (%d after a restart: %s)", s.ConfigGeneration, s.PendingConfigGeneration, strings.Join(s.PendingConfigFields, ","))
	default:
		return fmt.Sprint(s.ConfigGeneration)
	}
}

func (s serviceStatus) ok() bool { return s.Health == healthpb.HealthCheckResponse_SERVING.String() }

func statusCmd(ctx context.Context, g globals, names []string) error {
	if len(names) == 0 {
		names = bus.Services
	}
	for _, n := range names {
		if !slices.Contains(bus.Services, n) {
			return usageError(fmt.Errorf("unknown service %q; the services are %s", n, strings.Join(bus.Services, ", ")))
		}
	}
	rows := probeAll(ctx, g, names)

	if g.output == "json" {
		enc := json.NewEncoder(g.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rows); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "SERVICE\tSOCKET\tREACHABLE\tHEALTH\tVERSION\tPID\tUPTIME\tCONFIG\tNOTE")
		for _, r := range rows {
			sock, reach, pid, up := "missing", "no", "-", "-"
			if r.SocketPresent {
				sock = "present"
			}
			if r.Reachable {
				reach = "yes"
			}
			if r.PID != 0 {
				pid = fmt.Sprint(r.PID)
			}
			if r.StartTime != nil {
				up = time.Since(*r.StartTime).Round(time.Second).String()
			}
			fmt.Fprintf(tw, "unitlet-%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Service, sock, reach, r.Health, dash(r.Version), pid, up, r.configColumn(), r.Error)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	var down []string
	for _, r := range rows {
		if !r.ok() {
			down = append(down, "unitlet-"+r.Service)
		}
	}
	if len(down) > 0 {
		return fmt.Errorf("not serving: %s", strings.Join(down, ", "))
	}
	return nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// probeAll probes the services side by side, each within its own --timeout.
func probeAll(ctx context.Context, g globals, names []string) []serviceStatus {
	rows := make([]serviceStatus, len(names))
	var wg sync.WaitGroup
	for i, n := range names {
		wg.Go(func() { rows[i] = probe(ctx, g, n) })
	}
	wg.Wait()
	return rows
}

// probe asks one service for its health and identity.
func probe(ctx context.Context, g globals, service string) serviceStatus {
	path := bus.SocketPath(g.socketDir, service)
	st := serviceStatus{Service: service, Socket: path, Health: "-"}
	if fi, err := os.Stat(path); err != nil || fi.Mode()&os.ModeSocket == 0 {
		st.Error = "not running: no socket at " + path
		return st
	}
	st.SocketPresent = true
	conn, err := bus.DialPath(path)
	if err != nil {
		st.Error = err.Error()
		return st
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		st.Error = oneLine(explain(service, path, err))
		return st
	}
	st.Reachable = true
	st.Health = h.GetStatus().String()
	info, err := daemonv1.NewDaemonServiceClient(conn).GetInfo(ctx, &daemonv1.GetInfoRequest{})
	if err != nil {
		st.Error = oneLine(explain(service, path, err))
		return st
	}
	st.Version, st.PID, st.Activated = info.GetVersion(), info.GetPid(), info.GetSocketActivated()
	st.ConfigGeneration, st.PendingConfigGeneration, st.PendingConfigFields = info.GetConfigGeneration(), info.GetPendingConfigGeneration(), info.GetPendingConfigFields()
	if info.GetStartTime() != nil {
		t := info.GetStartTime().AsTime()
		st.StartTime = &t
	}
	if !st.ok() {
		st.Error = "its health check fails; see its log (journalctl -u unitlet-" + service + ")"
	} else if service == "config" {
		// Older unitlet-configs may not answer; the rest of the row stands without it.
		r, err := configv1.NewConfigServiceClient(conn).GetReloadStatus(ctx, &configv1.GetReloadStatusRequest{})
		if err == nil {
			st.ConfigGeneration = r.GetStatus().GetGeneration()
		}
		if err == nil && !r.GetStatus().GetLastReloadSuccessful() && r.GetStatus().GetLastError() != "" {
			st.Degraded = true
			st.Error = fmt.Sprintf("degraded: the configuration did not load (%s); generation %d stays in effect", strings.ReplaceAll(r.GetStatus().GetLastError(), "\n", " "), r.GetStatus().GetGeneration())
		}
	}
	return st
}

func oneLine(err error) string { return strings.ReplaceAll(err.Error(), "\n", " ") }
