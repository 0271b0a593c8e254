// Package config is unitlet-config: it owns the node's configuration. It loads the
// KubeletConfiguration file, its drop-ins, the environment and the flags, works out the
// node's identity, and serves the result to the other services over the bus, with a
// generation number that survives restarts. It reloads on SIGHUP and when the files change;
// an invalid change leaves the configuration in effect as it is and is reported. A start
// whose configuration does not load fails: it exits, as the kubelet does.
package config

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	configv1 "github.com/unitlet/unitlet/proto/unitlet/config/v1"
	"github.com/unitlet/unitlet/services/config/kubeletconfig"
	"github.com/unitlet/unitlet/shared/checkpoint"
	"github.com/unitlet/unitlet/shared/payload"
	"github.com/unitlet/unitlet/shared/watch"
)

// Triggers of a load.
const (
	TriggerStart      = "start"
	TriggerSignal     = "signal"
	TriggerFileChange = "file-change"
)

// generationCheckpoint remembers the last generation and its hash across restarts.
const generationCheckpoint = "config-generation"

// retiredLastGoodCheckpoint is where earlier releases kept the last configuration that
// loaded, which a start whose files did not load served instead. Nothing reads it any
// more; a start that loads deletes it, as it holds the whole configuration, secrets
// included.
const retiredLastGoodCheckpoint = "config-last-good"

type generationState struct {
	Generation uint64 `json:"generation"`
	Hash       string `json:"hash"`
}

// Service holds the configuration in effect and the result of the last load.
type Service struct {
	opts  *Options
	host  hostEnv
	log   *slog.Logger
	store *checkpoint.Store
	now   func() time.Time

	mu      sync.Mutex // serialises loads; guards current and status
	current *configv1.NodeConfig
	status  *configv1.ReloadStatus
	hub     *watch.Hub[*configv1.NodeConfig]

	// recorder records failed loads on the Node (events.go); nil until the node's
	// credentials are there, and on a standalone node.
	recorder eventRecorder

	reloadOK      prometheus.Gauge
	reloadSuccess prometheus.Gauge
	generation    prometheus.Gauge
	reloads       *prometheus.CounterVec

	// onGeneration is told each generation that takes effect (OnGeneration).
	onGeneration func(uint64)
}

// NewService loads the configuration for the first time. When it does not load, the error
// is the user's to fix and the process exits 2 with it, naming the file (or flag) and the
// field, as the kubelet exits on a configuration it cannot load; the machine's own trouble
// (an I/O error, a full disk) exits 1 and systemd tries again (daemon.ConfigError).
//
// No earlier configuration stands in. One that loaded before from the same bytes is the
// same configuration, so the only loads of unchanged files that fail are those the
// kubelet would refuse too: the host changed under them (swap turned on with failSwapOn,
// a kernel tunable protectKernelDefaults guards, cgroup v1) or a newer unitlet refuses a
// value the older one took. Serving the old one would keep a configuration this unitlet
// does not accept, and an operator's edit (say, webhook authorization with one refused
// value beside it) would leave the node on the more permissive one without a word.
func NewService(o *Options, store *checkpoint.Store, reg prometheus.Registerer, log *slog.Logger) (*Service, error) {
	return newService(o, store, reg, log, realHost)
}

func newService(o *Options, store *checkpoint.Store, reg prometheus.Registerer, log *slog.Logger, host hostEnv) (*Service, error) {
	s := &Service{
		opts:  o,
		host:  host,
		log:   log,
		store: store,
		now:   time.Now,
		reloadOK: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "unitlet_config_last_reload_successful",
			Help: "1 if the last load of the configuration succeeded, 0 if it failed and the configuration in effect stays.",
		}),
		reloadSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "unitlet_config_last_reload_success_timestamp_seconds",
			Help: "When the configuration was last loaded successfully, in seconds since the epoch.",
		}),
		generation: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "unitlet_config_generation",
			Help: "The generation of the configuration in effect.",
		}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "unitlet_config_reloads_total",
			Help: "Loads of the configuration, by trigger and result.",
		}, []string{"trigger", "result"}),
	}
	if reg != nil {
		reg.MustRegister(s.reloadOK, s.reloadSuccess, s.generation, s.reloads)
	}
	cfg, warnings, err := s.build()
	s.status = &configv1.ReloadStatus{Trigger: TriggerStart, LastAttemptTime: timestamppb.New(s.now())}
	if err != nil {
		s.reloads.WithLabelValues(TriggerStart, "failure").Inc()
		return nil, err
	}
	for _, w := range warnings {
		log.Warn(w)
	}
	var prev generationState
	if err := store.ReadJSON(generationCheckpoint, &prev); err != nil && !errors.Is(err, checkpoint.ErrNotFound) {
		// A corrupt checkpoint was set aside; numbering starts over, which subscribers
		// handle as they handle any restart (they receive a snapshot).
		log.Warn("the generation checkpoint is unusable; numbering starts over", "err", err)
		prev = generationState{}
	}
	gen := prev.Generation
	if cfg.Hash != prev.Hash || gen == 0 {
		gen++
		if err := store.WriteJSON(generationCheckpoint, generationState{Generation: gen, Hash: cfg.Hash}); err != nil {
			// The configuration is good and served all the same (a full disk must not
			// keep the node without one); the next start numbers from the last recorded
			// generation, which subscribers take as any restart (a snapshot).
			log.Warn("the configuration is in effect but its generation is not recorded", "generation", gen, "err", err)
		}
	}
	cfg.Generation = gen
	if err := store.Delete(retiredLastGoodCheckpoint); err != nil {
		log.Warn("remove the retired last-good checkpoint", "err", err)
	}
	s.current = cfg
	s.hub = watch.NewHub(gen, 0, func() *configv1.NodeConfig { return s.current })
	s.succeeded(TriggerStart)
	log.Info("configuration loaded", "generation", gen, "node", cfg.Node.GetName(), "sources", len(cfg.Sources))
	return s, nil
}

// Reload loads the configuration again. A valid configuration that differs from the one in
// effect becomes the next generation; an invalid one leaves the one in effect (the other
// services go on with it) and is reported in the reload status (unitletctl status, the
// node's /healthz), an event on the Node, the metrics and the log. It does not fail the
// health check: the watchdog would restart unitlet-config, and a start with these files
// stops (NewService), taking the configuration from the services for an edit that never
// took effect.
func (s *Service) Reload(trigger string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.status.LastAttemptTime = timestamppb.New(s.now())
	s.status.Trigger = trigger
	cfg, warnings, err := s.build()
	if err != nil {
		s.failed(trigger, err)
		return err
	}
	for _, w := range warnings {
		s.log.Warn(w)
	}
	if cfg.Hash == s.current.Hash {
		s.succeeded(trigger)
		s.log.Info("configuration reloaded; unchanged", "trigger", trigger, "generation", s.current.Generation)
		return nil
	}
	next := s.hub.Seq() + 1
	if err := s.store.WriteJSON(generationCheckpoint, generationState{Generation: next, Hash: cfg.Hash}); err != nil {
		err = fmt.Errorf("record the generation: %w", err)
		s.failed(trigger, err)
		return err
	}
	s.hub.Publish(func(seq uint64) *configv1.NodeConfig {
		cfg.Generation = seq
		s.current = cfg
		return cfg
	})
	s.succeeded(trigger)
	s.log.Info("configuration reloaded", "trigger", trigger, "generation", cfg.Generation)
	return nil
}

func (s *Service) succeeded(trigger string) {
	now := s.now()
	if s.failing() {
		s.recordLoaded()
	}
	s.status.LastReloadSuccessful = true
	s.status.LastSuccessTime = timestamppb.New(now)
	s.status.LastError, s.status.LastErrorFile, s.status.LastErrorField = "", "", ""
	s.status.Generation = s.current.Generation
	s.reloadOK.Set(1)
	s.reloadSuccess.Set(float64(now.UnixNano()) / 1e9)
	s.generation.Set(float64(s.current.Generation))
	if s.onGeneration != nil {
		s.onGeneration(s.current.Generation)
	}
	s.reloads.WithLabelValues(trigger, "success").Inc()
}

// OnGeneration calls f with the generation in effect now and whenever another takes
// effect (for the daemon's GetInfo, which reports the generation unitlet-config serves).
func (s *Service) OnGeneration(f func(generation uint64)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onGeneration = f
	f(s.current.Generation)
}

func (s *Service) failed(trigger string, err error) {
	s.status.LastReloadSuccessful = false
	s.status.LastError = err.Error()
	s.status.LastErrorFile, s.status.LastErrorField = "", ""
	var ke *kubeletconfig.Error
	if errors.As(err, &ke) {
		s.status.LastErrorFile, s.status.LastErrorField = ke.File, ke.Field
	}
	s.reloadOK.Set(0)
	s.reloads.WithLabelValues(trigger, "failure").Inc()
	s.log.Error("configuration reload failed; the configuration in effect stays, and unitlet-config will not start again until the files load",
		"trigger", trigger, "err", err.Error(), "generation", s.current.Generation)
	s.recordInvalid()
}

// failing reports whether the last load failed.
func (s *Service) failing() bool {
	return !s.status.LastReloadSuccessful && s.status.LastError != ""
}

// build loads every input into a NodeConfig without a generation.
func (s *Service) build() (*configv1.NodeConfig, []string, error) {
	res, err := kubeletconfig.Load(s.opts.ConfigFile, s.opts.ConfigDir, s.opts.Overrides...)
	if err != nil {
		return nil, nil, err
	}
	node, warnings, err := nodeIdentity(s.opts, res.Config, s.host)
	if err != nil {
		return nil, nil, err
	}
	kernel, err := checkKernelDefaults(s.host.sysctl, res.Config.ProtectKernelDefaults)
	if err != nil {
		return nil, nil, err
	}
	warnings = append(warnings, kernel...)
	if err := checkHost(s.host, res.Config); err != nil {
		return nil, nil, err
	}
	warnings = append(warnings, kubeletconfig.Irrelevant(res.Config)...)
	cfg := &configv1.NodeConfig{
		KubeletConfiguration:       res.JSON,
		KubeletConfigurationSchema: payload.ConfigKubeletConfiguration.Write,
		Node:                       node,
		Paths: &configv1.Paths{
			Kubeconfig:                    s.opts.Kubeconfig,
			BootstrapKubeconfig:           s.opts.BootstrapKubeconfig,
			CertDir:                       s.opts.CertDir,
			RootDir:                       s.opts.RootDir,
			ImageCredentialProviderConfig: s.opts.ImageCredentialProviderConfig,
			ImageCredentialProviderBinDir: s.opts.ImageCredentialProviderBinDir,
		},
		LoadTime: timestamppb.New(s.now()),
	}
	for _, src := range res.Sources {
		cfg.Sources = append(cfg.Sources, &configv1.Source{Kind: sourceKind(src.Kind), Name: src.Name, Sha256: src.SHA256})
	}
	cfg.Hash = hashOf(cfg)
	return cfg, warnings, nil
}

// hashOf digests what the configuration says, not where it came from or when it was read.
// The schema name is left out: a configuration keeps its hash, and so its generation,
// across the upgrade that began to send the name.
func hashOf(cfg *configv1.NodeConfig) string {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(&configv1.NodeConfig{
		KubeletConfiguration: cfg.KubeletConfiguration,
		Node:                 cfg.Node,
		Paths:                cfg.Paths,
	})
	if err != nil {
		panic(fmt.Sprintf("marshal a NodeConfig: %v", err))
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func sourceKind(k kubeletconfig.SourceKind) configv1.SourceKind {
	switch k {
	case kubeletconfig.SourceDefaults:
		return configv1.SourceKind_SOURCE_KIND_DEFAULTS
	case kubeletconfig.SourceFile:
		return configv1.SourceKind_SOURCE_KIND_FILE
	case kubeletconfig.SourceDropIn:
		return configv1.SourceKind_SOURCE_KIND_DROP_IN
	case kubeletconfig.SourceEnvironment:
		return configv1.SourceKind_SOURCE_KIND_ENVIRONMENT
	case kubeletconfig.SourceFlags:
		return configv1.SourceKind_SOURCE_KIND_FLAGS
	}
	return configv1.SourceKind_SOURCE_KIND_UNSPECIFIED
}

// Current is the configuration in effect.
func (s *Service) Current() *configv1.NodeConfig {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.current
}

// Status is the result of the last load.
func (s *Service) Status() *configv1.ReloadStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	return proto.Clone(s.status).(*configv1.ReloadStatus)
}

// Subscribe streams the configuration after generation after.
func (s *Service) Subscribe(after uint64) *watch.Subscription[*configv1.NodeConfig] {
	return s.hub.Subscribe(after)
}

// healthWait is how long the health check waits for a load under way.
const healthWait = 5 * time.Second

// Healthy fails when a load of the configuration holds the service for longer than
// healthWait (a read that hangs on a file system, a lock never given back): the watchdog
// then has systemd restart the service, which loads the files afresh. A failed load is
// not a failed health check (see Reload); it is reported as degraded instead.
func (s *Service) Healthy(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, healthWait)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	start := time.Now()
	for !s.mu.TryLock() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("a load of the configuration has been under way for more than %s (stuck?)", time.Since(start).Round(time.Millisecond))
		case <-tick.C:
		}
	}
	s.mu.Unlock()
	return nil
}
