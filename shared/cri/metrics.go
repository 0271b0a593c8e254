package cri

import (
	"context"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
)

// Metrics counts and times every CRI call on the registry under the kubelet's names and
// label: kubelet_runtime_operations_total, kubelet_runtime_operations_duration_seconds
// (the kubelet's buckets) and kubelet_runtime_operations_errors_total, by operation_type
// named as the kubelet names it (run_podsandbox, create_container, list_containers, ...).
// A nil registry counts nothing.
func Metrics(reg prometheus.Registerer) Option {
	return func(o *options) { o.metrics = newOperationMetrics(reg) }
}

type operationMetrics struct {
	total, errors *prometheus.CounterVec
	duration      *prometheus.HistogramVec
}

func newOperationMetrics(reg prometheus.Registerer) *operationMetrics {
	if reg == nil {
		return nil
	}
	m := &operationMetrics{
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kubelet_runtime_operations_total",
			Help: "Cumulative number of runtime operations by operation type.",
		}, []string{"operation_type"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kubelet_runtime_operations_errors_total",
			Help: "Cumulative number of runtime operation errors by operation type.",
		}, []string{"operation_type"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "kubelet_runtime_operations_duration_seconds",
			Help:    "Duration in seconds of runtime operations. Broken down by operation type.",
			Buckets: prometheus.ExponentialBuckets(.005, 2.5, 14),
		}, []string{"operation_type"}),
	}
	reg.MustRegister(m.total, m.errors, m.duration)
	return m
}

// observe records one call of method (a gRPC full method name) that began at start.
func (m *operationMetrics) observe(method string, start time.Time, err error) {
	op := operationType(method)
	m.total.WithLabelValues(op).Inc()
	m.duration.WithLabelValues(op).Observe(time.Since(start).Seconds())
	if err != nil {
		m.errors.WithLabelValues(op).Inc()
	}
}

func (m *operationMetrics) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	start := time.Now()
	err := invoker(ctx, method, req, reply, cc, opts...)
	m.observe(method, start, err)
	return err
}

func (m *operationMetrics) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	start := time.Now()
	s, err := streamer(ctx, desc, cc, method, opts...)
	m.observe(method, start, err)
	return s, err
}

// kubeletOperations are the kubelet's operation_type values where they are not the
// method's name in snake case.
var kubeletOperations = map[string]string{
	"Status":                    "status",
	"RunPodSandbox":             "run_podsandbox",
	"StopPodSandbox":            "stop_podsandbox",
	"RemovePodSandbox":          "remove_podsandbox",
	"PodSandboxStatus":          "podsandbox_status",
	"ListPodSandbox":            "list_podsandbox",
	"PodSandboxStats":           "podsandbox_stats",
	"ListPodSandboxStats":       "list_podsandbox_stats",
	"ListPodSandboxMetrics":     "list_podsandbox_metrics",
	"UpdatePodSandboxResources": "update_podsandbox_resources",
	"ImageFsInfo":               "image_fs_info",
}

// operationType is the kubelet's operation_type of a CRI method:
// "/runtime.v1.RuntimeService/CreateContainer" is "create_container".
func operationType(method string) string {
	name := method[strings.LastIndexByte(method, '/')+1:]
	if op, ok := kubeletOperations[name]; ok {
		return op
	}
	var b strings.Builder
	for i, r := range name {
		if r >= 'A' && r <= 'Z' {
			if i > 0 {
				b.WriteByte('_')
			}
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}
