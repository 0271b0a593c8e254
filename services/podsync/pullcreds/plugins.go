package pullcreds

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	kubeletconfigv1 "k8s.io/kubelet/config/v1"
	credentialproviderv1 "k8s.io/kubelet/pkg/apis/credentialprovider/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/yaml"
)

// pluginTimeout bounds one run of a plugin, as the kubelet's.
const pluginTimeout = time.Minute

// Plugins are the kubelet's credential provider plugins: executables in a directory that
// answer a CredentialProviderRequest on stdin with a CredentialProviderResponse on stdout
// (credentialprovider.kubelet.k8s.io/v1), for the images their matchImages name.
type Plugins struct {
	plugins []*plugin
}

type plugin struct {
	cfg   kubeletconfigv1.CredentialProvider
	path  string
	clock clock.Clock
	log   *slog.Logger

	mu    sync.Mutex
	cache map[string]cached
}

type cached struct {
	locations map[string]Auth
	expires   time.Time
}

// NodePlugins are the node's plugins: none when no configuration file is named (no
// --image-credential-provider-config), else LoadPlugins's, whose error stops the start as
// the kubelet's does.
func NodePlugins(configFile, binDir string, clk clock.Clock, log *slog.Logger) (*Plugins, error) {
	if configFile == "" {
		return &Plugins{}, nil
	}
	return LoadPlugins(configFile, binDir, clk, log)
}

// LoadPlugins reads the CredentialProviderConfig file (--image-credential-provider-config)
// and checks it and the plugins in binDir (--image-credential-provider-bin-dir) as the
// kubelet does at start. Every error names the file and, where one is at fault, the field.
func LoadPlugins(configFile, binDir string, clk clock.Clock, log *slog.Logger) (*Plugins, error) {
	raw, err := os.ReadFile(configFile)
	if err != nil {
		return nil, fmt.Errorf("image credential provider config: %w", err)
	}
	doc, err := yaml.YAMLToJSONStrict(raw)
	if err != nil {
		return nil, fmt.Errorf("image credential provider config %s: %v", configFile, err)
	}
	var cfg kubeletconfigv1.CredentialProviderConfig
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cfg); err != nil {
		return nil, fmt.Errorf("image credential provider config %s: %v", configFile, err)
	}
	if errs := validateConfig(&cfg); len(errs) > 0 {
		return nil, fmt.Errorf("image credential provider config %s: %v", configFile, errs.ToAggregate())
	}
	if binDir == "" {
		return nil, fmt.Errorf("image credential provider config %s: --image-credential-provider-bin-dir is not set: the directory of the plugins it names", configFile)
	}
	ps := &Plugins{}
	for i, p := range cfg.Providers {
		path := filepath.Join(binDir, p.Name)
		if st, err := os.Stat(path); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			return nil, fmt.Errorf("image credential provider config %s: providers[%d].name: no executable %s in --image-credential-provider-bin-dir", configFile, i, path)
		}
		ps.plugins = append(ps.plugins, &plugin{cfg: p, path: path, clock: clk, log: log.With("plugin", p.Name), cache: map[string]cached{}})
	}
	return ps, nil
}

// validateConfig checks cfg with the kubelet's rules; tokenAttributes (service account
// tokens for plugins) is not supported here and is refused, not ignored.
func validateConfig(cfg *kubeletconfigv1.CredentialProviderConfig) field.ErrorList {
	var errs field.ErrorList
	want := kubeletconfigv1.SchemeGroupVersion.String()
	if cfg.APIVersion != want || cfg.Kind != "CredentialProviderConfig" {
		errs = append(errs, field.NotSupported(field.NewPath("apiVersion"), cfg.APIVersion+", kind "+cfg.Kind, []string{want + ", kind CredentialProviderConfig"}))
	}
	if len(cfg.Providers) == 0 {
		errs = append(errs, field.Required(field.NewPath("providers"), "at least 1 item in plugins is required"))
	}
	seen := map[string]bool{}
	for i, p := range cfg.Providers {
		path := field.NewPath("providers").Index(i)
		switch {
		case p.Name == "":
			errs = append(errs, field.Required(path.Child("name"), ""))
		case strings.ContainsAny(p.Name, "/ ") || p.Name == "." || p.Name == "..":
			errs = append(errs, field.Invalid(path.Child("name"), p.Name, "a plugin's file name: no '/', no spaces, not '.' or '..'"))
		case seen[p.Name]:
			errs = append(errs, field.Duplicate(path.Child("name"), p.Name))
		}
		seen[p.Name] = true
		if v := credentialproviderv1.SchemeGroupVersion.String(); p.APIVersion != v {
			errs = append(errs, field.NotSupported(path.Child("apiVersion"), p.APIVersion, []string{v}))
		}
		if len(p.MatchImages) == 0 {
			errs = append(errs, field.Required(path.Child("matchImages"), "at least 1 item in matchImages is required"))
		}
		for j, m := range p.MatchImages {
			if !validLocation(m) {
				errs = append(errs, field.Invalid(path.Child("matchImages").Index(j), m, "not a registry host[:port][/path]"))
			}
		}
		if p.DefaultCacheDuration == nil {
			errs = append(errs, field.Required(path.Child("defaultCacheDuration"), ""))
		} else if p.DefaultCacheDuration.Duration < 0 {
			errs = append(errs, field.Invalid(path.Child("defaultCacheDuration"), p.DefaultCacheDuration.Duration.String(), "must be greater than or equal to 0"))
		}
		if p.TokenAttributes != nil {
			errs = append(errs, field.Forbidden(path.Child("tokenAttributes"), "service account tokens for credential providers are not supported by unitlet"))
		}
		for j, e := range p.Env {
			if e.Name == "" {
				errs = append(errs, field.Required(path.Child("env").Index(j).Child("name"), ""))
			}
		}
	}
	return errs
}

// Lookup asks every plugin whose matchImages match repo (a normalized image name, see
// Repository) for credentials, or takes them from its cache, and returns those of the
// answers' locations that match repo. A plugin that fails is logged and gives nothing, as
// in the kubelet.
func (ps *Plugins) Lookup(ctx context.Context, repo string) []Auth {
	k := &Keyring{}
	for _, p := range ps.plugins {
		if !slices.ContainsFunc(p.cfg.MatchImages, func(m string) bool { return locationMatches(m, repo) }) {
			continue
		}
		locs, err := p.provide(ctx, repo)
		if err != nil {
			p.log.Warn("credential provider plugin failed", "image", repo, "err", err)
			continue
		}
		for loc, a := range locs {
			k.Add(loc, a)
		}
	}
	return k.Lookup(repo)
}

// cacheKeys are the keys an answer for repo may be cached under: by image, by registry,
// or once for all.
func cacheKeys(repo string) []string {
	registry, _, _ := strings.Cut(repo, "/")
	return []string{"image:" + repo, "registry:" + registry, "global"}
}

func (p *plugin) provide(ctx context.Context, repo string) (map[string]Auth, error) {
	now := p.clock.Now()
	p.mu.Lock()
	for _, key := range cacheKeys(repo) {
		if c, ok := p.cache[key]; ok {
			if now.Before(c.expires) {
				p.mu.Unlock()
				return c.locations, nil
			}
			delete(p.cache, key)
		}
	}
	p.mu.Unlock()
	resp, err := p.exec(ctx, repo)
	if err != nil {
		return nil, err
	}
	keys := cacheKeys(repo)
	var key string
	switch resp.CacheKeyType {
	case credentialproviderv1.ImagePluginCacheKeyType:
		key = keys[0]
	case credentialproviderv1.RegistryPluginCacheKeyType:
		key = keys[1]
	case credentialproviderv1.GlobalPluginCacheKeyType:
		key = keys[2]
	default:
		return nil, fmt.Errorf("credential provider plugin did not return a valid cacheKeyType: %q", resp.CacheKeyType)
	}
	locs := make(map[string]Auth, len(resp.Auth))
	for loc, a := range resp.Auth {
		locs[loc] = Auth{Username: a.Username, Password: a.Password}
	}
	ttl := p.cfg.DefaultCacheDuration.Duration
	if resp.CacheDuration != nil {
		ttl = resp.CacheDuration.Duration
	}
	if ttl > 0 {
		p.mu.Lock()
		p.cache[key] = cached{locations: locs, expires: now.Add(ttl)}
		p.mu.Unlock()
	}
	return locs, nil
}

// exec runs the plugin once for repo: the request on stdin, the config's args, the
// node's environment with the config's env over it, a minute at most.
func (p *plugin) exec(ctx context.Context, repo string) (*credentialproviderv1.CredentialProviderResponse, error) {
	req, err := json.Marshal(&credentialproviderv1.CredentialProviderRequest{
		TypeMeta: metav1.TypeMeta{APIVersion: credentialproviderv1.SchemeGroupVersion.String(), Kind: "CredentialProviderRequest"},
		Image:    repo,
	})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, pluginTimeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, p.path, p.cfg.Args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(req), &stdout, &stderr
	cmd.Env = os.Environ()
	for _, e := range p.cfg.Env {
		cmd.Env = append(cmd.Env, e.Name+"="+e.Value)
	}
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return nil, fmt.Errorf("error execing credential provider plugin %s for image %s: %w: %s", p.cfg.Name, repo, err, strings.TrimSpace(stderr.String()))
	}
	var resp credentialproviderv1.CredentialProviderResponse
	dec := json.NewDecoder(&stdout)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&resp); err != nil {
		return nil, fmt.Errorf("credential provider plugin %s: decode its response: %w", p.cfg.Name, err)
	}
	if got, want := resp.APIVersion, credentialproviderv1.SchemeGroupVersion.String(); got != want || resp.Kind != "CredentialProviderResponse" {
		return nil, fmt.Errorf("credential provider plugin %s: response apiVersion %q, kind %q; want %s, CredentialProviderResponse", p.cfg.Name, got, resp.Kind, want)
	}
	return &resp, nil
}

// validLocation reports whether s parses as a keyring location.
func validLocation(s string) bool {
	return s != "" && (&Keyring{}).Add(s, Auth{})
}
