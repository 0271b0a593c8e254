package kubeletenv

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
)

// Variables are the variables of an environment file that hold kubelet flags, in the
// order the kubelet's unit (kubeadm's 10-kubeadm.conf) puts them on its command line: a
// later flag wins over an earlier one.
var Variables = []string{"KUBELET_KUBEADM_ARGS", "KUBELET_EXTRA_ARGS"}

// Flag is one kubelet flag of an environment file, under unitlet-config's name.
type Flag struct {
	// Name is unitlet-config's flag, without the dashes.
	Name  string
	Value string
}

// Supported maps each kubelet flag that an environment file may hold to unitlet-config's
// flag of the same meaning. Every one has the kubelet's name: the table says which exist.
var Supported = map[string]string{
	"config":                            "config",
	"config-dir":                        "config-dir",
	"kubeconfig":                        "kubeconfig",
	"bootstrap-kubeconfig":              "bootstrap-kubeconfig",
	"cert-dir":                          "cert-dir",
	"root-dir":                          "root-dir",
	"hostname-override":                 "hostname-override",
	"node-ip":                           "node-ip",
	"node-labels":                       "node-labels",
	"register-with-taints":              "register-with-taints",
	"container-runtime-endpoint":        "container-runtime-endpoint",
	"pod-manifest-path":                 "pod-manifest-path",
	"max-pods":                          "max-pods",
	"cluster-dns":                       "cluster-dns",
	"cluster-domain":                    "cluster-domain",
	"image-credential-provider-config":  "image-credential-provider-config",
	"image-credential-provider-bin-dir": "image-credential-provider-bin-dir",
}

// Refused are kubelet flags that kubeadm writes, or wrote for older kubelets, and that
// unitlet-config refuses, each with the reason and what to do instead.
var Refused = map[string]string{
	"pod-infra-container-image": "the kubelet v1.36 has no such flag either: the pod sandbox image is the runtime's (containerd's sandbox_image); `kubeadm upgrade node` removes it from kubeadm-flags.env",
	"container-runtime":         "removed from the kubelet (v1.27): every runtime is a CRI endpoint, --container-runtime-endpoint",
	"network-plugin":            "removed from the kubelet (v1.24): the container runtime sets up the pod network (CNI)",
	"cgroup-driver":             "set cgroupDriver in the KubeletConfiguration (kubeadm writes it to /var/lib/kubelet/config.yaml)",
	"provider-id":               "set providerID in the KubeletConfiguration",
	"v":                         "unitlet's services log at UNITLET_LOG_LEVEL (debug, info, warn, error), set in a drop-in of their units",
}

// Read returns the kubelet flags of the environment file at path, under unitlet-config's
// names, in command-line order (Variables). A missing file holds none, as for systemd's
// EnvironmentFile=-PATH: kubeadm writes kubeadm-flags.env only when it joins the node.
// A flag unitlet-config does not have fails, naming the file, the variable and the flag.
func Read(path string) ([]Flag, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read kubelet environment file: %w", err)
	}
	flags, err := Parse(string(data))
	if err != nil {
		return nil, fmt.Errorf("kubelet environment file %s: %w", path, err)
	}
	return flags, nil
}

// Parse returns the kubelet flags of an environment file's content (see Read).
func Parse(data string) ([]Flag, error) {
	vars, err := parseEnvFile(data)
	if err != nil {
		return nil, err
	}
	var all []Flag
	for _, name := range Variables {
		value, ok := vars[name]
		if !ok {
			continue
		}
		flags, err := parseArgs(words(value))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		all = append(all, flags...)
	}
	return all, nil
}

// parseArgs maps a kubelet command line, --name=value or --name value (every flag it
// accepts takes a value), to unitlet-config's flags.
func parseArgs(args []string) ([]Flag, error) {
	var flags []Flag
	for i := 0; i < len(args); i++ {
		arg := args[i]
		body, ok := strings.CutPrefix(arg, "--")
		if !ok {
			body, ok = strings.CutPrefix(arg, "-")
			if !ok || body == "" {
				return nil, fmt.Errorf("%q: not a flag (want --name=value)", arg)
			}
		}
		name, value, hasValue := strings.Cut(body, "=")
		if name == "" {
			return nil, fmt.Errorf("%q: not a flag (want --name=value)", arg)
		}
		if reason, refused := Refused[name]; refused {
			return nil, fmt.Errorf("--%s: not supported by unitlet: %s", name, reason)
		}
		target, ok := Supported[name]
		if !ok {
			return nil, fmt.Errorf("--%s: not supported by unitlet: unitlet-config has no such flag (its flags: README.md, \"unitlet-config\")", name)
		}
		if !strings.HasPrefix(arg, "--") {
			return nil, fmt.Errorf("%q: write --%s", arg, name)
		}
		if !hasValue {
			if i+1 >= len(args) {
				return nil, fmt.Errorf("--%s: no value", name)
			}
			i++
			value = args[i]
		}
		flags = append(flags, Flag{Name: target, Value: value})
	}
	return flags, nil
}
