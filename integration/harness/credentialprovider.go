package harness

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletconfigv1 "k8s.io/kubelet/config/v1"
	credentialproviderv1 "k8s.io/kubelet/pkg/apis/credentialprovider/v1"
	"sigs.k8s.io/yaml"
)

// ImageCredentialProvider is the harness's credential provider plugin on a node
// (integration/credentialplugin), named in a CredentialProviderConfig the harness writes.
type ImageCredentialProvider struct {
	// CacheDuration is the config's defaultCacheDuration and the cacheDuration of the
	// plugin's answers, e.g. 30s.
	CacheDuration string `json:"cacheDuration"`
}

// Where the plugin and its configuration live in a node machine: unitlet-config's
// --image-credential-provider-bin-dir and --image-credential-provider-config.
const (
	CredentialPluginName            = "unitlet-test-credential-provider"
	machineCredentialProviderBinDir = "/usr/local/lib/unitlet/credential-providers"
	machineCredentialProviderConfig = "/etc/unitlet/credential-providers.yaml"
)

// credentialPluginImages is the path, under the registry's host, of the images the plugin
// gives credentials for (its matchImages): RegistryAccess.PluginBusybox is there,
// RegistryAccess.Busybox is not, so pods pulling that one still need a pull secret.
const credentialPluginImages = "/plugin"

// credentialProviderDir is where the node's plugin records its runs: a host directory
// bound into the machine at the same path, which podsync's unit may write.
func (h *Harness) credentialProviderDir(node string) string {
	return filepath.Join(h.nodeDir(node), "credential-provider")
}

func (h *Harness) credentialPluginRuns(node string) string {
	return filepath.Join(h.credentialProviderDir(node), "runs")
}

// CredentialProviderRuns are the images node's credential provider plugin was run for,
// oldest first, one per run.
func (h *Harness) CredentialProviderRuns(node string) ([]string, error) {
	b, err := os.ReadFile(h.credentialPluginRuns(node))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("the credential provider plugin's runs on %s: %w", node, err)
	}
	return strings.Fields(string(b)), nil
}

// credentialProviderFiles builds the plugin for node n and writes its configuration: the
// registry's account for the images under credentialPluginImages, cached by registry.
func (h *Harness) credentialProviderFiles(n Node) (plugin, config []byte, err error) {
	cp := n.ImageCredentialProvider
	ttl, err := time.ParseDuration(cp.CacheDuration)
	if err != nil {
		return nil, nil, fmt.Errorf("imageCredentialProvider.cacheDuration: %w", err)
	}
	reg, err := h.Registry()
	if err != nil {
		return nil, nil, err
	}
	dir := h.credentialProviderDir(n.Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, err
	}
	// Each boot of the machine counts afresh.
	if err := os.Remove(h.credentialPluginRuns(n.Name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, nil, err
	}
	bin := filepath.Join(dir, CredentialPluginName)
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, "./credentialplugin")
	cmd.Dir = filepath.Join(h.repo, "integration")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, nil, fmt.Errorf("build the credential provider plugin: %v\n%s", err, out)
	}
	if plugin, err = os.ReadFile(bin); err != nil {
		return nil, nil, err
	}
	cfg := kubeletconfigv1.CredentialProviderConfig{
		TypeMeta: metav1.TypeMeta{APIVersion: kubeletconfigv1.SchemeGroupVersion.String(), Kind: "CredentialProviderConfig"},
		Providers: []kubeletconfigv1.CredentialProvider{{
			Name:                 CredentialPluginName,
			APIVersion:           credentialproviderv1.SchemeGroupVersion.String(),
			MatchImages:          []string{reg.Host + credentialPluginImages},
			DefaultCacheDuration: &metav1.Duration{Duration: ttl},
			Env: []kubeletconfigv1.ExecEnvVar{
				{Name: "REGISTRY", Value: reg.Host},
				{Name: "REGISTRY_USER", Value: reg.User},
				{Name: "REGISTRY_PASSWORD", Value: reg.Password},
				{Name: "CACHE_DURATION", Value: ttl.String()},
				{Name: "INVOCATIONS_FILE", Value: h.credentialPluginRuns(n.Name)},
			},
		}},
	}
	y, err := yaml.Marshal(&cfg)
	if err != nil {
		return nil, nil, err
	}
	return plugin, append([]byte("# Written by unitlet-harness: the harness's credential provider plugin for its registry.\n"), y...), nil
}

// machineCredentialPlugin is the plugin's path in the machine.
var machineCredentialPlugin = path.Join(machineCredentialProviderBinDir, CredentialPluginName)
