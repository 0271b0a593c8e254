package status

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	daemonv1 "github.com/unitlet/unitlet/proto/unitlet/daemon/v1"
	"github.com/unitlet/unitlet/services/status/nodemetrics"
	"github.com/unitlet/unitlet/shared/bus"
	"github.com/unitlet/unitlet/shared/daemon"
)

// metricsTimeout bounds each service's answer to a scrape of the node's metrics.
const metricsTimeout = 3 * time.Second

// maxMetricsMessage bounds a service's gathered metrics: a node full of probed pods is
// megabytes, more than gRPC's default 4 MiB.
const maxMetricsMessage = 64 << 20

// nodeMetricsSources are what the node API's /metrics gathers: unitlet-status's own
// registry, whole, and every other service's over the bus (config and podsync always, the
// optional ones when their socket exists) without its Go runtime and process families
// (go_*, process_*), which describe that process only and stay on its own metrics listener.
func nodeMetricsSources(socketDir string, own prometheus.Gatherer) func() []nodemetrics.Source {
	return func() []nodemetrics.Source {
		sources := []nodemetrics.Source{{
			Service: ServiceName,
			Gather:  func(context.Context) ([]*dto.MetricFamily, error) { return own.Gather() },
		}}
		for _, svc := range append([]string{"config", "podsync"}, presentOptionalServices(socketDir)...) {
			sources = append(sources, busMetrics(socketDir, svc, "", withoutRuntime))
		}
		return sources
	}
}

// probeMetricsSources are what /metrics/probes gathers: unitlet-podsync's prober metrics.
func probeMetricsSources(socketDir string) func() []nodemetrics.Source {
	return func() []nodemetrics.Source {
		return []nodemetrics.Source{busMetrics(socketDir, "podsync", "probes", nil)}
	}
}

// busMetrics gathers registry of unitlet-svc with GetMetrics, its families passed through
// keep when not nil.
func busMetrics(socketDir, svc, registry string, keep func(*dto.MetricFamily) bool) nodemetrics.Source {
	return nodemetrics.Source{Service: svc, Gather: func(ctx context.Context) ([]*dto.MetricFamily, error) {
		conn, err := bus.Dial(socketDir, svc)
		if err != nil {
			return nil, fmt.Errorf("unitlet-%s: %w", svc, err)
		}
		defer conn.Close()
		// Not waiting for a connection: a stopped service fails the call at once instead of
		// holding the scrape until the timeout.
		resp, err := daemonv1.NewDaemonServiceClient(conn).GetMetrics(ctx, &daemonv1.GetMetricsRequest{Registry: registry},
			grpc.WaitForReady(false), grpc.MaxCallRecvMsgSize(maxMetricsMessage))
		if grpcstatus.Code(err) == codes.Unimplemented {
			return nil, fmt.Errorf("unitlet-%s: %w", svc, nodemetrics.ErrUnsupported)
		}
		if err != nil {
			return nil, fmt.Errorf("unitlet-%s: get metrics: %w", svc, err)
		}
		fams, err := daemon.DecodeMetrics(resp)
		if err != nil {
			return nil, fmt.Errorf("unitlet-%s: %w", svc, err)
		}
		if keep == nil {
			return fams, nil
		}
		kept := fams[:0]
		for _, f := range fams {
			if keep(f) {
				kept = append(kept, f)
			}
		}
		return kept, nil
	}}
}

// withoutRuntime drops the Go runtime's and the process's families.
func withoutRuntime(f *dto.MetricFamily) bool {
	return !strings.HasPrefix(f.GetName(), "go_") && !strings.HasPrefix(f.GetName(), "process_")
}
