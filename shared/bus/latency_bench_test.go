package bus_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	configv1 "github.com/unitlet/unitlet/proto/unitlet/config/v1"
	daemonv1 "github.com/unitlet/unitlet/proto/unitlet/daemon/v1"
	"github.com/unitlet/unitlet/shared/bus"
	"github.com/unitlet/unitlet/shared/daemon"
	"github.com/unitlet/unitlet/shared/envconfig"
	"github.com/unitlet/unitlet/shared/watch"
)

// hubConfig streams generations from a hub, as unitlet-config does.
type hubConfig struct {
	configv1.UnimplementedConfigServiceServer
	hub *watch.Hub[*configv1.NodeConfig]
}

func (s hubConfig) WatchConfig(req *configv1.WatchConfigRequest, stream configv1.ConfigService_WatchConfigServer) error {
	return watch.Serve(stream.Context(), s.hub.Subscribe(req.GetAfterGeneration()), func(ev watch.Event[*configv1.NodeConfig]) error {
		return stream.Send(&configv1.WatchConfigResponse{Config: ev.Value})
	})
}

// startDaemon runs a real daemon (peer credentials, authorization, metrics interceptors)
// on a Unix socket in a temp dir.
func startDaemon(b *testing.B, hub *watch.Hub[*configv1.NodeConfig]) string {
	b.Helper()
	dir := b.TempDir()
	var s daemon.Settings
	if err := envconfig.Parse(&s, map[string]string{"UNITLET_SOCKET_DIR": dir}); err != nil {
		b.Fatal(err)
	}
	d := daemon.New(daemon.Options{Service: "config", Settings: s, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	configv1.RegisterConfigServiceServer(d.Server(), hubConfig{hub: hub})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	b.Cleanup(func() { cancel(); <-done })
	sock := filepath.Join(dir, "config.sock")
	for i := 0; i < 1000; i++ {
		if _, err := os.Stat(sock); err == nil {
			return dir
		}
		time.Sleep(5 * time.Millisecond)
	}
	b.Fatal("the daemon did not listen")
	return ""
}

// report sets the p50 and p99 of the samples, in microseconds.
func report(b *testing.B, samples []time.Duration) {
	slices.Sort(samples)
	pct := func(p float64) float64 {
		return float64(samples[int(p*float64(len(samples)-1))].Nanoseconds()) / 1e3
	}
	b.ReportMetric(pct(0.50), "p50-µs")
	b.ReportMetric(pct(0.99), "p99-µs")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkBusUnary is one unary call over the bus: DaemonService.GetInfo, through the
// peer-credential handshake's connection, authorization and metrics.
func BenchmarkBusUnary(b *testing.B) {
	dir := startDaemon(b, watch.NewHub(0, 0, func() *configv1.NodeConfig { return &configv1.NodeConfig{} }))
	conn, err := bus.Dial(dir, "config")
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	client := daemonv1.NewDaemonServiceClient(conn)
	ctx := context.Background()
	if _, err := client.GetInfo(ctx, &daemonv1.GetInfoRequest{}); err != nil {
		b.Fatal(err)
	}
	samples := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if _, err := client.GetInfo(ctx, &daemonv1.GetInfoRequest{}); err != nil {
			b.Fatal(err)
		}
		samples = append(samples, time.Since(start))
	}
	b.StopTimer()
	report(b, samples)
}

// BenchmarkBusWatchEvent is the time from publishing an event on the server's hub to its
// arrival at a client's WatchConfig stream.
func BenchmarkBusWatchEvent(b *testing.B) {
	current := &configv1.NodeConfig{}
	hub := watch.NewHub(0, 16, func() *configv1.NodeConfig { return current })
	dir := startDaemon(b, hub)
	conn, err := bus.Dial(dir, "config")
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := configv1.NewConfigServiceClient(conn).WatchConfig(ctx, &configv1.WatchConfigRequest{AfterGeneration: 0})
	if err != nil {
		b.Fatal(err)
	}
	// The hub is at generation 0 and so is the caller: no snapshot comes first. An event
	// published before the subscription exists is replayed from the hub's history.
	kc := []byte(`{"apiVersion":"kubelet.config.k8s.io/v1beta1","kind":"KubeletConfiguration","maxPods":110}`)
	samples := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		hub.Publish(func(seq uint64) *configv1.NodeConfig {
			return &configv1.NodeConfig{Generation: seq, KubeletConfiguration: kc}
		})
		m, err := stream.Recv()
		if err != nil {
			b.Fatal(err)
		}
		samples = append(samples, time.Since(start))
		if m.GetConfig().GetGeneration() != uint64(i+1) {
			b.Fatalf("generation %d, want %d", m.GetConfig().GetGeneration(), i+1)
		}
	}
	b.StopTimer()
	report(b, samples)
}
