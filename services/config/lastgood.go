package config

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	configv1 "github.com/unitlet/unitlet/proto/unitlet/config/v1"
	"github.com/unitlet/unitlet/shared/checkpoint"
)

// lastGoodCheckpoint keeps the last configuration that loaded, with the file paths it was
// loaded from: a restart whose files do not load serves it instead of leaving the node
// without a configuration.
const lastGoodCheckpoint = "config-last-good"

type lastGood struct {
	ConfigFile string `json:"configFile"`
	ConfigDir  string `json:"configDir"`
	// Config is the NodeConfig, protobuf-encoded.
	Config []byte `json:"config"`
}

// saveLastGood records cfg as loaded from o's files.
func saveLastGood(store *checkpoint.Store, o *Options, cfg *configv1.NodeConfig) error {
	b, err := proto.Marshal(cfg)
	if err != nil {
		return err
	}
	if err := store.WriteJSON(lastGoodCheckpoint, lastGood{ConfigFile: o.ConfigFile, ConfigDir: o.ConfigDir, Config: b}); err != nil {
		return fmt.Errorf("record the last good configuration: %w", err)
	}
	return nil
}

// loadLastGood returns the last good configuration when it was loaded from the same
// --config and --config-dir, with the same node paths, as o names now; otherwise an error
// that says why it cannot stand in.
func loadLastGood(store *checkpoint.Store, o *Options) (*configv1.NodeConfig, error) {
	var lg lastGood
	if err := store.ReadJSON(lastGoodCheckpoint, &lg); err != nil {
		if errors.Is(err, checkpoint.ErrNotFound) {
			return nil, errors.New("no configuration has loaded on this node before")
		}
		return nil, fmt.Errorf("the last good configuration is unusable: %w", err)
	}
	if lg.ConfigFile != o.ConfigFile || lg.ConfigDir != o.ConfigDir {
		return nil, fmt.Errorf("the last good configuration came from --config %q --config-dir %q, not these", lg.ConfigFile, lg.ConfigDir)
	}
	cfg := &configv1.NodeConfig{}
	if err := proto.Unmarshal(lg.Config, cfg); err != nil {
		return nil, fmt.Errorf("the last good configuration is unusable: %w", err)
	}
	p := cfg.GetPaths()
	if p.GetKubeconfig() != o.Kubeconfig || p.GetBootstrapKubeconfig() != o.BootstrapKubeconfig || p.GetCertDir() != o.CertDir || p.GetRootDir() != o.RootDir ||
		p.GetImageCredentialProviderConfig() != o.ImageCredentialProviderConfig || p.GetImageCredentialProviderBinDir() != o.ImageCredentialProviderBinDir {
		return nil, errors.New("the last good configuration has other node paths (--kubeconfig, --bootstrap-kubeconfig, --cert-dir, --root-dir, --image-credential-provider-*) than these")
	}
	return cfg, nil
}
