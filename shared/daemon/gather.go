package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	daemonv1 "github.com/unitlet/unitlet/proto/unitlet/daemon/v1"
	"github.com/unitlet/unitlet/shared/payload"
)

// AddRegistry keeps a registry apart from the process's own under name: GetMetrics serves
// it for that name, and a Unix metrics socket at /metrics/<name>. Call it before Run.
func (d *Daemon) AddRegistry(name string, g prometheus.Gatherer) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.registries == nil {
		d.registries = map[string]prometheus.Gatherer{}
	}
	d.registries[name] = g
	d.mux.Handle("/metrics/"+name, promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
}

// gatherer is the registry GetMetrics serves for name: "" is the process's own.
func (d *Daemon) gatherer(name string) (prometheus.Gatherer, error) {
	if name == "" {
		return d.opts.Registry, nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if g, ok := d.registries[name]; ok {
		return g, nil
	}
	names := []string{`""`}
	for n := range d.registries {
		names = append(names, fmt.Sprintf("%q", n))
	}
	slices.Sort(names[1:])
	return nil, status.Errorf(codes.NotFound, "unitlet-%s has no metrics registry %q; it has %v", d.opts.Service, name, names)
}

func (s infoServer) GetMetrics(_ context.Context, req *daemonv1.GetMetricsRequest) (*daemonv1.GetMetricsResponse, error) {
	g, err := s.d.gatherer(req.GetRegistry())
	if err != nil {
		return nil, err
	}
	// A collector's error leaves its families out and the rest is still served, as the
	// /metrics handler does with ContinueOnError; the error is logged, not returned.
	fams, err := g.Gather()
	if err != nil {
		s.d.log.Warn("gather metrics", "registry", req.GetRegistry(), "err", err)
	}
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeProtoDelim))
	for _, f := range fams {
		if err := enc.Encode(f); err != nil {
			return nil, status.Errorf(codes.Internal, "encode metric family %s: %v", f.GetName(), err)
		}
	}
	return &daemonv1.GetMetricsResponse{MetricFamilies: buf.Bytes(), MetricFamiliesSchema: payload.DaemonMetricFamilies.Write}, nil
}

// DecodeMetrics reads a GetMetrics answer's families, refusing a schema this build does
// not know.
func DecodeMetrics(resp *daemonv1.GetMetricsResponse) ([]*dto.MetricFamily, error) {
	if err := payload.DaemonMetricFamilies.Check(resp.GetMetricFamiliesSchema()); err != nil {
		return nil, err
	}
	dec := expfmt.NewDecoder(bytes.NewReader(resp.GetMetricFamilies()), expfmt.NewFormat(expfmt.TypeProtoDelim))
	var fams []*dto.MetricFamily
	for {
		f := &dto.MetricFamily{}
		err := dec.Decode(f)
		if errors.Is(err, io.EOF) {
			return fams, nil
		}
		if err != nil {
			return nil, fmt.Errorf("decode metric family %d: %w", len(fams)+1, err)
		}
		fams = append(fams, f)
	}
}
