package nodeconfig

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"

	configv1 "github.com/unitlet/unitlet/proto/unitlet/config/v1"
	"github.com/unitlet/unitlet/shared/bus"
	"github.com/unitlet/unitlet/shared/restart"
)

// configServer streams the generations it is given to each watcher, then waits.
type configServer struct {
	configv1.UnimplementedConfigServiceServer
	gens []*configv1.NodeConfig
}

func (s *configServer) WatchConfig(req *configv1.WatchConfigRequest, stream configv1.ConfigService_WatchConfigServer) error {
	for _, g := range s.gens {
		if g.GetGeneration() > req.GetAfterGeneration() {
			if err := stream.Send(&configv1.WatchConfigResponse{Config: g}); err != nil {
				return err
			}
		}
	}
	<-stream.Context().Done()
	return nil
}

func nodeConfig(gen uint64, kc string) *configv1.NodeConfig {
	return &configv1.NodeConfig{
		Generation: gen, KubeletConfiguration: []byte(kc),
		Node:  &configv1.NodeIdentity{Name: "node-1"},
		Paths: &configv1.Paths{RootDir: "/var/lib/kubelet"},
	}
}

func serveConfig(t *testing.T, gens ...*configv1.NodeConfig) string {
	t.Helper()
	dir := t.TempDir()
	l, err := net.Listen("unix", bus.SocketPath(dir, "config"))
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	configv1.RegisterConfigServiceServer(s, &configServer{gens: gens})
	go s.Serve(l)
	t.Cleanup(s.Stop)
	return dir
}

func decoded(t *testing.T, nc *configv1.NodeConfig) *Config {
	t.Helper()
	c, err := Decode(nc)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestChanged(t *testing.T) {
	a := decoded(t, nodeConfig(1, `{"maxPods":110,"evictionHard":{"memory.available":"100Mi"},"clusterDNS":["10.0.0.10"]}`))
	b := decoded(t, nodeConfig(2, `{"maxPods":110,"evictionHard":{"memory.available":"200Mi"},"podPidsLimit":100}`))
	b.Node = &configv1.NodeIdentity{Name: "node-1", Ips: []string{"10.0.0.2"}}
	if got, want := Changed(a, b), []string{"clusterDNS", "evictionHard", "podPidsLimit", FieldNode}; !slices.Equal(got, want) {
		t.Errorf("Changed = %q, want %q", got, want)
	}
	if got := Changed(a, a); len(got) != 0 {
		t.Errorf("Changed of one generation = %q", got)
	}
}

// state is what a Follower last recorded, as the daemon keeps it for GetInfo.
type state struct {
	Generation, Pending uint64
	PendingFields       []string
}

func (s *state) RecordConfig(generation, pending uint64, pendingFields []string) {
	*s = state{generation, pending, pendingFields}
}

// run follows a server that sends gens after started until the Follower stops or a
// second passes, and returns Run's error and what the Follower last recorded.
func run(t *testing.T, f *Follower, started *configv1.NodeConfig, gens ...*configv1.NodeConfig) (state, error) {
	t.Helper()
	f.SocketDir = serveConfig(t, append([]*configv1.NodeConfig{started}, gens...)...)
	st := &state{}
	f.Record = st
	f.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err := f.Run(ctx, decoded(t, started))
	return *st, err
}

func TestFollowerRestartsForFieldsItAppliesAtStart(t *testing.T) {
	started := nodeConfig(3, `{"nodeStatusMaxImages":50,"imageGCHighThresholdPercent":85}`)
	// podsync does not use nodeStatusMaxImages: it takes the generation as is.
	st, err := run(t, &Follower{Service: "podsync", supervised: func() bool { return true }}, started,
		nodeConfig(4, `{"nodeStatusMaxImages":10,"imageGCHighThresholdPercent":85}`))
	if err != nil || st.Generation != 4 || st.Pending != 0 {
		t.Errorf("podsync: %v, %+v; want generation 4 taken without a restart", err, st)
	}
	// status does: under systemd it stops to start again.
	_, err = run(t, &Follower{Service: "status", supervised: func() bool { return true }}, started,
		nodeConfig(4, `{"nodeStatusMaxImages":10,"imageGCHighThresholdPercent":85}`))
	var again *restart.Error
	if !errors.As(err, &again) {
		t.Fatalf("status: %v, want a restart.Error", err)
	}
	if want := "configuration generation 4 changes nodeStatusMaxImages, which status applies at start"; again.Reason != want {
		t.Errorf("reason %q, want %q", again.Reason, want)
	}
	// Without systemd to start it again, it runs on and reports the generation pending.
	st, err = run(t, &Follower{Service: "status", supervised: func() bool { return false }}, started,
		nodeConfig(4, `{"nodeStatusMaxImages":10,"imageGCHighThresholdPercent":85}`))
	if err != nil || st.Generation != 3 || st.Pending != 4 || !slices.Equal(st.PendingFields, []string{"nodeStatusMaxImages"}) {
		t.Errorf("status unsupervised: %v, %+v; want generation 3 with 4 pending for nodeStatusMaxImages", err, st)
	}
	// A changed node identity restarts every follower.
	moved := nodeConfig(4, `{"nodeStatusMaxImages":50,"imageGCHighThresholdPercent":85}`)
	moved.Node.Ips = []string{"10.0.0.9"}
	if _, err := run(t, &Follower{Service: "volumes", supervised: func() bool { return true }}, started, moved); !errors.As(err, &again) {
		t.Errorf("volumes with a new node IP: %v, want a restart.Error", err)
	}
}

func TestFollowerAppliesLiveFields(t *testing.T) {
	var applied []uint64
	f := &Follower{Service: "eviction", supervised: func() bool { return true }, Apply: func(c *Config) error {
		applied = append(applied, c.Generation)
		if c.KubeletConfiguration.EvictionMaxPodGracePeriod == 99 {
			return errors.New("refused")
		}
		return nil
	}}
	st, err := run(t, f, nodeConfig(1, `{"evictionSoft":{"memory.available":"1Gi"}}`),
		nodeConfig(2, `{"evictionSoft":{"memory.available":"2Gi"}}`),
		nodeConfig(3, `{"evictionSoft":{"memory.available":"2Gi"},"evictionMaxPodGracePeriod":99}`))
	if err != nil || !slices.Equal(applied, []uint64{2, 3}) || st.Generation != 2 {
		t.Errorf("%v, applied %v, %+v: want 2 and 3 offered live, 3 refused and 2 in force", err, applied, st)
	}
}

func TestFollowerSkipsAGenerationInAnUnknownSchema(t *testing.T) {
	var applied []uint64
	f := &Follower{Service: "eviction", supervised: func() bool { return true }, Apply: func(c *Config) error {
		applied = append(applied, c.Generation)
		return nil
	}}
	newer := nodeConfig(2, `{"evictionSoft":{"memory.available":"2Gi"}}`)
	newer.KubeletConfigurationSchema = "kubelet.config.k8s.io/v1.KubeletConfiguration"
	st, err := run(t, f, nodeConfig(1, `{"evictionSoft":{"memory.available":"1Gi"}}`), newer,
		nodeConfig(3, `{"evictionSoft":{"memory.available":"3Gi"}}`))
	if err != nil || !slices.Equal(applied, []uint64{3}) || st.Generation != 3 {
		t.Errorf("%v, applied %v, %+v: want 2 skipped, 3 applied and in force", err, applied, st)
	}
}
