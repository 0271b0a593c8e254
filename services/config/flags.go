package config

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/spf13/pflag"

	"github.com/unitlet/unitlet/services/config/kubeletconfig"
	"github.com/unitlet/unitlet/services/config/kubeletenv"
	"github.com/unitlet/unitlet/shared/envconfig"
)

// Options are unitlet-config's command line, with the kubelet's flag names. Every flag can
// also be set as UNITLET_<NAME> in the environment (--node-ip: UNITLET_NODE_IP); a flag on
// the command line wins over the variable.
type Options struct {
	ConfigFile          string
	ConfigDir           string
	HostnameOverride    string
	NodeIPs             []string
	Kubeconfig          string
	BootstrapKubeconfig string
	CertDir             string
	RootDir             string
	NodeLabels          map[string]string
	// ImageCredentialProviderConfig and ImageCredentialProviderBinDir name the kubelet's
	// credential provider plugins; unitlet-podsync runs them.
	ImageCredentialProviderConfig string
	ImageCredentialProviderBinDir string
	// KubeletEnvFiles are environment files in the kubelet unit's format (kubeadm's
	// kubeadm-flags.env, /etc/default/kubelet) whose kubelet flags apply after the
	// command line's, as they would on the kubelet's (services/config/kubeletenv).
	KubeletEnvFiles []string

	// Overrides are the flags and variables that set KubeletConfiguration fields, as merge
	// patches: the environment's first, then the command line's.
	Overrides []kubeletconfig.Override
}

// configField is a flag that sets a field of the KubeletConfiguration.
type configField struct {
	flag  string
	field string
	value func(fs *pflag.FlagSet) (any, error)
}

var configFields = []configField{
	{"max-pods", "maxPods", func(fs *pflag.FlagSet) (any, error) { return fs.GetInt32("max-pods") }},
	{"container-runtime-endpoint", "containerRuntimeEndpoint", stringFlag("container-runtime-endpoint")},
	{"pod-manifest-path", "staticPodPath", stringFlag("pod-manifest-path")},
	{"cluster-domain", "clusterDomain", stringFlag("cluster-domain")},
	{"cluster-dns", "clusterDNS", func(fs *pflag.FlagSet) (any, error) { return fs.GetStringSlice("cluster-dns") }},
	{"register-with-taints", "registerWithTaints", taintsFlag},
}

func stringFlag(name string) func(fs *pflag.FlagSet) (any, error) {
	return func(fs *pflag.FlagSet) (any, error) { return fs.GetString(name) }
}

// bindFlags binds unitlet-config's flags to o.
func bindFlags(fs *pflag.FlagSet, o *Options) {
	fs.StringVar(&o.ConfigFile, "config", "", "the KubeletConfiguration file (kubelet.config.k8s.io/v1beta1, YAML or JSON)")
	fs.StringVar(&o.ConfigDir, "config-dir", "", "a directory of *.conf KubeletConfiguration drop-ins, merged over --config in lexical order")
	fs.StringVar(&o.HostnameOverride, "hostname-override", "", "the node name to use instead of the hostname")
	fs.StringSliceVar(&o.NodeIPs, "node-ip", nil, "the node's IP addresses, comma-separated, at most one per family (default: the address of the default route's interface)")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "the kubeconfig with the node's credentials for the API server")
	fs.StringVar(&o.BootstrapKubeconfig, "bootstrap-kubeconfig", "", "the kubeconfig for TLS bootstrapping, used when --kubeconfig is missing or invalid")
	fs.StringVar(&o.CertDir, "cert-dir", "", "where the node's certificates and keys live (default: <root-dir>/pki)")
	fs.StringVar(&o.RootDir, "root-dir", "/var/lib/unitlet", "the node agent's state directory")
	fs.StringToStringVar(&o.NodeLabels, "node-labels", nil, "labels to register the node with, key=value,...")
	fs.StringVar(&o.ImageCredentialProviderConfig, "image-credential-provider-config", "", "the CredentialProviderConfig file (kubelet.config.k8s.io/v1) of the image credential provider plugins")
	fs.StringVar(&o.ImageCredentialProviderBinDir, "image-credential-provider-bin-dir", "", "the directory of the image credential provider plugins")
	fs.StringArrayVar(&o.KubeletEnvFiles, "kubelet-env-file", nil, "an environment file of the kubelet's unit (kubeadm's /var/lib/kubelet/kubeadm-flags.env, /etc/default/kubelet): its KUBELET_KUBEADM_ARGS and KUBELET_EXTRA_ARGS flags apply after the command line's; repeatable; a missing file holds none")
	fs.Int32("max-pods", 0, "maximum number of pods on the node (config field maxPods)")
	fs.String("container-runtime-endpoint", "", "the CRI socket, unix:///path (config field containerRuntimeEndpoint)")
	fs.String("pod-manifest-path", "", "the directory of static pod manifests (config field staticPodPath)")
	fs.String("cluster-domain", "", "the cluster's DNS domain (config field clusterDomain)")
	fs.StringSlice("cluster-dns", nil, "DNS server IPs for pods, comma-separated (config field clusterDNS)")
	fs.String("register-with-taints", "", "taints to register the node with, key=value:Effect,... (config field registerWithTaints)")
}

// complete turns the config-field flags into overrides (fromEnv tells the variables from
// the command line), makes paths absolute and fills the defaults that depend on other flags.
func (o *Options) complete(fs *pflag.FlagSet, fromEnv func(flag string) bool) error {
	fromFile, err := applyKubeletEnvFiles(fs, o.KubeletEnvFiles)
	if err != nil {
		return err
	}
	envPatch, envNames := map[string]any{}, []string{}
	flagPatch, flagNames := map[string]any{}, []string{}
	filePatches, fileNames := map[string]map[string]any{}, map[string][]string{}
	for _, cf := range configFields {
		f := fs.Lookup(cf.flag)
		if !f.Changed {
			continue
		}
		v, verr := cf.value(fs)
		if verr != nil {
			return fmt.Errorf("--%s: %v", cf.flag, verr)
		}
		switch file := fromFile[cf.flag]; {
		case file != "":
			if filePatches[file] == nil {
				filePatches[file] = map[string]any{}
			}
			filePatches[file][cf.field] = v
			fileNames[file] = append(fileNames[file], "--"+cf.flag)
		case fromEnv(cf.flag):
			envPatch[cf.field] = v
			envNames = append(envNames, envconfig.Name(cf.flag))
		default:
			flagPatch[cf.field] = v
			flagNames = append(flagNames, "--"+cf.flag)
		}
	}
	if len(envPatch) > 0 {
		sort.Strings(envNames)
		o.Overrides = append(o.Overrides, kubeletconfig.Override{Kind: kubeletconfig.SourceEnvironment, Name: strings.Join(envNames, ","), Patch: envPatch})
	}
	if len(flagPatch) > 0 {
		sort.Strings(flagNames)
		o.Overrides = append(o.Overrides, kubeletconfig.Override{Kind: kubeletconfig.SourceFlags, Name: strings.Join(flagNames, ","), Patch: flagPatch})
	}
	// The flags of each kubelet environment file are a source of their own, named by the
	// file (unitletctl config then says which file set a field). Each field comes from one
	// source only: the last file that set its flag, which won on the command line too.
	for _, file := range o.KubeletEnvFiles {
		if patch := filePatches[file]; len(patch) > 0 {
			sort.Strings(fileNames[file])
			o.Overrides = append(o.Overrides, kubeletconfig.Override{Kind: kubeletconfig.SourceFlags, Name: strings.Join(fileNames[file], ",") + " (" + file + ")", Patch: patch})
			delete(filePatches, file)
		}
	}
	for _, p := range []struct {
		flag string
		path *string
	}{
		{"config", &o.ConfigFile}, {"config-dir", &o.ConfigDir}, {"kubeconfig", &o.Kubeconfig},
		{"bootstrap-kubeconfig", &o.BootstrapKubeconfig}, {"cert-dir", &o.CertDir}, {"root-dir", &o.RootDir},
		{"image-credential-provider-config", &o.ImageCredentialProviderConfig}, {"image-credential-provider-bin-dir", &o.ImageCredentialProviderBinDir},
	} {
		if *p.path == "" {
			continue
		}
		abs, err := filepath.Abs(*p.path)
		if err != nil {
			return fmt.Errorf("--%s=%q: %v", p.flag, *p.path, err)
		}
		*p.path = abs
	}
	if o.RootDir == "" {
		return fmt.Errorf("--root-dir: must not be empty")
	}
	if o.CertDir == "" {
		o.CertDir = filepath.Join(o.RootDir, "pki")
	}
	if (o.ImageCredentialProviderConfig == "") != (o.ImageCredentialProviderBinDir == "") {
		return fmt.Errorf("--image-credential-provider-config and --image-credential-provider-bin-dir: set both or neither")
	}
	if o.BootstrapKubeconfig != "" && o.Kubeconfig == "" {
		return fmt.Errorf("--bootstrap-kubeconfig needs --kubeconfig: the file TLS bootstrap writes the node's credentials to")
	}
	return nil
}

// applyKubeletEnvFiles sets the flags of each kubelet environment file, in order, over
// those already set, as the kubelet's unit puts them after its fixed flags: a later value
// wins, --node-labels merge and --cluster-dns adds up, as on the kubelet's command line,
// and --node-ip, a single flag of the kubelet's, is replaced. It returns the flags it set,
// each with the last file that set it. A flag unitlet-config does not have fails, naming
// the file (fail closed).
func applyKubeletEnvFiles(fs *pflag.FlagSet, paths []string) (map[string]string, error) {
	set := map[string]string{}
	for _, path := range paths {
		flags, err := kubeletenv.Read(path)
		if err != nil {
			return nil, fmt.Errorf("--kubelet-env-file: %w", err)
		}
		for _, f := range flags {
			flag := fs.Lookup(f.Name)
			if flag == nil {
				return nil, fmt.Errorf("--kubelet-env-file: kubelet environment file %s: --%s: unitlet-config has no such flag", path, f.Name)
			}
			var err error
			if sv, ok := flag.Value.(pflag.SliceValue); ok && f.Name == "node-ip" {
				err = sv.Replace(strings.Split(f.Value, ","))
				flag.Changed = true
			} else {
				err = fs.Set(f.Name, f.Value)
			}
			if err != nil {
				return nil, fmt.Errorf("--kubelet-env-file: kubelet environment file %s: --%s=%q: %v", path, f.Name, f.Value, err)
			}
			set[f.Name] = path
		}
	}
	return set, nil
}

// checkKubeconfig fails closed on credentials: a --kubeconfig that is set must exist
// unless TLS bootstrap is to write it (--bootstrap-kubeconfig), as the kubelet requires. A
// standalone node is one with no --kubeconfig at all, never one whose file is missing.
func (o *Options) checkKubeconfig() error {
	if o.Kubeconfig == "" || o.BootstrapKubeconfig != "" {
		return nil
	}
	if _, err := os.Stat(o.Kubeconfig); err != nil {
		return fmt.Errorf("--kubeconfig %s: %w: put the node's credentials there, set --bootstrap-kubeconfig to have TLS bootstrap write them, or leave --kubeconfig unset for a standalone node", o.Kubeconfig, err)
	}
	return nil
}

// taintsFlag parses --register-with-taints, key=value:Effect or key:Effect, comma-separated,
// into the registerWithTaints field's JSON form.
func taintsFlag(fs *pflag.FlagSet) (any, error) {
	s, err := fs.GetString("register-with-taints")
	if err != nil {
		return nil, err
	}
	taints := []map[string]any{}
	for _, spec := range strings.Split(s, ",") {
		spec = strings.TrimSpace(spec)
		if spec == "" {
			continue
		}
		kv, effect, ok := strings.Cut(spec, ":")
		if !ok || effect == "" {
			return nil, fmt.Errorf("taint %q: want key=value:Effect or key:Effect", spec)
		}
		t := map[string]any{"effect": effect}
		key, value, hasValue := strings.Cut(kv, "=")
		t["key"] = key
		if hasValue {
			t["value"] = value
		}
		taints = append(taints, t)
	}
	return taints, nil
}
