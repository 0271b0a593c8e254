package nodeconfig

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	configv1 "github.com/unitlet/unitlet/proto/unitlet/config/v1"
	"github.com/unitlet/unitlet/shared/bus"
	"github.com/unitlet/unitlet/shared/restart"
)

// The parts of a NodeConfig besides the KubeletConfiguration, named as fields in Changed:
// every service that follows the configuration restarts when one of them changes.
const (
	FieldNode  = "(node identity)"
	FieldPaths = "(paths)"
)

// The KubeletConfiguration fields groups of services share: the API client's, the CRI
// client's, and those that shape the Node's capacity and allocatable (nodeinfo.Node).
var (
	apiClientFields = []string{"kubeAPIQPS", "kubeAPIBurst", "contentType"}
	eventFields     = []string{"eventRecordQPS", "eventBurst"}
	criFields       = []string{"containerRuntimeEndpoint", "imageServiceEndpoint", "runtimeRequestTimeout"}
	nodeFields      = []string{"maxPods", "podsPerCore", "systemReserved", "kubeReserved", "reservedSystemCPUs", "evictionHard", "enforceNodeAllocatable", "enableControllerAttachDetach", "providerID"}
)

// Uses are the KubeletConfiguration fields (JSON names) each service that follows the
// configuration applies, by service; a change to one restarts the service unless Live
// names it. unitlet-config applies its own at every load and follows nothing.
var Uses = map[string][]string{
	"certs": join(apiClientFields, []string{"serverTLSBootstrap", "rotateCertificates"}),
	"podsync": join(apiClientFields, eventFields, criFields, nodeFields, []string{
		"staticPodPath", "podLogsDir", "syncFrequency", "fileCheckFrequency", "httpCheckFrequency", "staticPodURL", "staticPodURLHeader",
		"port", "clusterDomain", "clusterDNS", "resolvConf", "imageMinimumGCAge", "imageMaximumGCAge", "imageGCHighThresholdPercent", "imageGCLowThresholdPercent",
		"cgroupRoot", "cgroupsPerQOS", "cgroupDriver", "podPidsLimit", "systemReservedCgroup", "kubeReservedCgroup", "singleProcessOOMKill", "memorySwap",
		"seccompDefault", "allowedUnsafeSysctls", "registryPullQPS", "registryBurst", "serializeImagePulls", "maxParallelImagePulls", "featureGates",
		"containerLogMaxSize", "containerLogMaxFiles", "containerLogMaxWorkers", "containerLogMonitorInterval",
		"imagePullCredentialsVerificationPolicy", "preloadedImagesVerificationAllowlist",
		"shutdownGracePeriod", "shutdownGracePeriodCriticalPods", "shutdownGracePeriodByPodPriority", "crashLoopBackOff",
	}),
	"status": join(apiClientFields, eventFields, criFields, nodeFields, []string{
		"address", "port", "tlsCertFile", "tlsPrivateKeyFile", "tlsCipherSuites", "tlsCurvePreferences", "tlsMinVersion", "serverTLSBootstrap",
		"authentication", "authorization", "streamingConnectionIdleTimeout", "nodeStatusUpdateFrequency", "nodeStatusReportFrequency",
		"nodeLeaseDurationSeconds", "nodeStatusMaxImages", "registerNode", "registerWithTaints", "enableDebuggingHandlers", "healthzPort", "healthzBindAddress",
		"enableSystemLogHandler", "enableSystemLogQuery", "shutdownGracePeriod", "shutdownGracePeriodByPodPriority",
	}),
	"volumes": join(apiClientFields, eventFields, criFields, []string{"syncFrequency"}),
	"eviction": join(criFields, nodeFields, []string{
		"cgroupRoot", "cgroupDriver", "kernelMemcgNotification", "localStorageCapacityIsolation",
		"evictionSoft", "evictionSoftGracePeriod", "evictionPressureTransitionPeriod", "evictionMaxPodGracePeriod", "evictionMinimumReclaim",
	}),
}

// Live are the fields of Uses a service applies to a running process, by service.
var Live = map[string][]string{
	"podsync":  {"containerLogMaxSize", "containerLogMaxFiles", "containerLogMaxWorkers", "containerLogMonitorInterval"},
	"eviction": {"evictionHard", "evictionSoft", "evictionSoftGracePeriod", "evictionPressureTransitionPeriod", "evictionMaxPodGracePeriod", "evictionMinimumReclaim", "localStorageCapacityIsolation"},
}

func join(lists ...[]string) []string {
	var out []string
	for _, l := range lists {
		for _, f := range l {
			if !slices.Contains(out, f) {
				out = append(out, f)
			}
		}
	}
	return out
}

// Changed names what differs between two generations: the KubeletConfiguration's
// top-level fields (JSON names), FieldNode and FieldPaths.
func Changed(old, cur *Config) []string {
	var out []string
	a, b := topLevel(old.Raw), topLevel(cur.Raw)
	for name := range a {
		if !bytes.Equal(a[name], b[name]) {
			out = append(out, name)
		}
	}
	for name := range b {
		if _, ok := a[name]; !ok {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	if !proto.Equal(old.Node, cur.Node) {
		out = append(out, FieldNode)
	}
	if !proto.Equal(old.Paths, cur.Paths) {
		out = append(out, FieldPaths)
	}
	return out
}

// topLevel is a KubeletConfiguration's JSON by field, each value in a canonical form.
func topLevel(raw []byte) map[string][]byte {
	var m map[string]any
	_ = json.Unmarshal(raw, &m)
	out := make(map[string][]byte, len(m))
	for k, v := range m {
		b, _ := json.Marshal(v) // maps marshal with sorted keys
		out[k] = b
	}
	return out
}

// Recorder keeps the generation a process runs and any newer one pending a restart (the
// fields it changes that need one), for the process's GetInfo: daemon.Daemon is one.
type Recorder interface {
	RecordConfig(generation, pending uint64, pendingFields []string)
}

// Follower keeps one service on the configuration unitlet-config serves.
type Follower struct {
	// Service is the service's short name, a key of Uses.
	Service string
	// SocketDir is where the bus sockets are.
	SocketDir string
	// Apply takes a new generation whose changes are all Live for the service; nil when
	// the service applies nothing live. An error keeps the generation in force.
	Apply func(*Config) error
	// Record is told the generation in force and any pending one.
	Record Recorder
	Log    *slog.Logger
	// supervised overrides restart.Supervised in tests.
	supervised func() bool
}

// Run follows the configuration from started, the generation the process began with,
// until ctx ends. A new generation that changes none of the service's fields is taken as
// is; one whose changes the service applies live goes to Apply; any other ends Run with
// a *restart.Error when systemd supervises the process (it stops cleanly and starts
// again with the new configuration), and otherwise is reported as pending, for someone to
// restart the service.
func (f *Follower) Run(ctx context.Context, started *Config) error {
	uses, ok := Uses[f.Service]
	if !ok {
		return fmt.Errorf("nodeconfig: no field list for service %q", f.Service)
	}
	supervised := f.supervised
	if supervised == nil {
		supervised = restart.Supervised
	}
	cur := started
	f.Record.RecordConfig(cur.Generation, 0, nil)
	conn, err := bus.Dial(f.SocketDir, "config")
	if err != nil {
		return err
	}
	defer conn.Close()
	client := configv1.NewConfigServiceClient(conn)
	open := func(ctx context.Context, after uint64) (bus.Stream[*configv1.WatchConfigResponse], error) {
		return client.WatchConfig(ctx, &configv1.WatchConfigRequest{AfterGeneration: after})
	}
	err = bus.Resume(ctx, open,
		func(r *configv1.WatchConfigResponse) uint64 { return r.GetConfig().GetGeneration() },
		func(r *configv1.WatchConfigResponse) error {
			next, err := Decode(r.GetConfig())
			if err != nil {
				f.Log.Error("a new node configuration does not decode; the one in force stays", "generation", r.GetConfig().GetGeneration(), "err", err)
				return nil
			}
			if next.Generation == cur.Generation {
				return nil
			}
			var mine, atStart []string
			for _, field := range Changed(cur, next) {
				if field == FieldNode || field == FieldPaths || slices.Contains(uses, field) {
					mine = append(mine, field)
					if !slices.Contains(Live[f.Service], field) {
						atStart = append(atStart, field)
					}
				}
			}
			switch {
			case len(mine) == 0:
			case len(atStart) > 0:
				reason := fmt.Sprintf("configuration generation %d changes %s, which %s applies at start", next.Generation, strings.Join(atStart, ", "), f.Service)
				if supervised() {
					return &restart.Error{Reason: reason}
				}
				f.Log.Warn(reason+"; restart the service to apply it", "generation", cur.Generation)
				f.Record.RecordConfig(cur.Generation, next.Generation, atStart)
				return nil
			case f.Apply == nil:
				return fmt.Errorf("nodeconfig: %s lists live fields but applies none", f.Service)
			default:
				if err := f.Apply(next); err != nil {
					f.Log.Error("the new node configuration was not applied; the one in force stays", "generation", next.Generation, "fields", mine, "err", err)
					return nil
				}
				f.Log.Info("node configuration applied", "generation", next.Generation, "fields", mine)
			}
			cur = next
			f.Record.RecordConfig(cur.Generation, 0, nil)
			return nil
		},
		bus.ResumeOptions{After: started.Generation})
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// Follow is the loop that keeps service on the configuration from started, for
// daemon.Go: see Follower. apply takes the service's live changes (nil: it has none).
func Follow(record Recorder, service, socketDir string, started *Config, apply func(*Config) error, log *slog.Logger) func(context.Context) error {
	f := &Follower{Service: service, SocketDir: socketDir, Apply: apply, Record: record, Log: log.With("component", "configuration")}
	return func(ctx context.Context) error { return f.Run(ctx, started) }
}
