package config

import (
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/component-helpers/node/util/sysctl"
	v1beta1 "k8s.io/kubelet/config/v1beta1"
	kubeletapis "k8s.io/kubelet/pkg/apis"

	configv1 "github.com/unitlet/unitlet/proto/unitlet/config/v1"
)

// The well-known labels every node registers with.
const (
	labelHostname = "kubernetes.io/hostname"
	labelOS       = "kubernetes.io/os"
	labelArch     = "kubernetes.io/arch"
)

// hostEnv is what identity reads from the machine; tests replace it.
type hostEnv struct {
	hostname    func() (string, error)
	defaultIPv4 func() (netip.Addr, error)
	// sysctl reads a kernel tunable by its /proc/sys name ("vm/overcommit_memory").
	sysctl func(name string) (int, error)
	// swaps lists the active swap areas; cgroupV2 tells the cgroup version.
	swaps    func() ([]string, error)
	cgroupV2 func() (bool, error)
}

var realHost = hostEnv{
	hostname: os.Hostname,
	sysctl:   sysctl.New().GetSysctl,
	swaps:    activeSwaps,
	cgroupV2: unifiedCgroups,
	defaultIPv4: func() (netip.Addr, error) {
		ip, err := utilnet.ChooseHostInterface()
		if err != nil {
			return netip.Addr{}, err
		}
		a, ok := netip.AddrFromSlice(ip)
		if !ok {
			return netip.Addr{}, fmt.Errorf("interface address %v is not an IP", ip)
		}
		return a.Unmap(), nil
	},
}

// nodeIdentity works out what the node registers as. Errors name the flag at fault and are
// the user's to fix; a machine without a default route gives no IP and a warning instead.
func nodeIdentity(o *Options, kc *v1beta1.KubeletConfiguration, h hostEnv) (*configv1.NodeIdentity, []string, error) {
	var warnings []string
	hostname, err := h.hostname()
	if err != nil {
		return nil, nil, fmt.Errorf("read the hostname: %v", err)
	}
	name, source := hostname, "the hostname"
	if o.HostnameOverride != "" {
		name, source = o.HostnameOverride, "--hostname-override"
	}
	name = strings.ToLower(strings.TrimSpace(name))
	if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
		return nil, nil, fmt.Errorf("%s: node name %q is not a valid DNS-1123 subdomain: %s", source, name, strings.Join(msgs, "; "))
	}

	ips, err := nodeIPs(o.NodeIPs)
	if err != nil {
		return nil, nil, err
	}
	if len(ips) == 0 {
		ip, err := h.defaultIPv4()
		if err != nil {
			warnings = append(warnings, fmt.Sprintf("no node IP: --node-ip is not set and the default route's interface has no usable address (%v)", err))
		} else {
			ips = []string{ip.String()}
		}
	}

	labels := map[string]string{
		labelHostname: name,
		labelOS:       runtime.GOOS,
		labelArch:     runtime.GOARCH,
	}
	keys := make([]string, 0, len(o.NodeLabels))
	for k := range o.NodeLabels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if err := checkLabelNamespaces(keys); err != nil {
		return nil, nil, err
	}
	for _, k := range keys {
		v := o.NodeLabels[k]
		if msgs := validation.IsQualifiedName(k); len(msgs) > 0 {
			return nil, nil, fmt.Errorf("--node-labels: key %q: %s", k, strings.Join(msgs, "; "))
		}
		if msgs := validation.IsValidLabelValue(v); len(msgs) > 0 {
			return nil, nil, fmt.Errorf("--node-labels: value %q of %q: %s", v, k, strings.Join(msgs, "; "))
		}
		labels[k] = v
	}

	var taints []*configv1.Taint
	for _, t := range kc.RegisterWithTaints {
		taints = append(taints, taintProto(t))
	}
	return &configv1.NodeIdentity{Name: name, Hostname: hostname, Ips: ips, Labels: labels, Taints: taints}, warnings, nil
}

// checkLabelNamespaces refuses, as the kubelet does at start, --node-labels in the
// kubernetes.io and k8s.io namespaces (and their subdomains) other than those a kubelet
// may set on its own Node: the NodeRestriction admission plugin would refuse the node's
// registration with them, and labels such as node-role.kubernetes.io/* are the cluster
// administrator's to give. keys are sorted; every refused one is named.
func checkLabelNamespaces(keys []string) error {
	var refused []string
	for _, k := range keys {
		if kubernetesNamespace(k) && !kubeletapis.IsKubeletLabel(k) {
			refused = append(refused, k)
		}
	}
	if len(refused) == 0 {
		return nil
	}
	return fmt.Errorf("--node-labels: labels in the 'kubernetes.io' or 'k8s.io' namespaces the kubelet may not set: %s; such labels must begin with an allowed prefix (%s) or be one of %s (a label such as node-role.kubernetes.io/<role> is for the cluster's administrator to give: kubectl label node)",
		strings.Join(refused, ", "), strings.Join(kubeletapis.KubeletLabelNamespaces(), ", "), strings.Join(kubeletapis.KubeletLabels(), ", "))
}

// kubernetesNamespace reports whether a label key's prefix is kubernetes.io, k8s.io or a
// subdomain of either.
func kubernetesNamespace(key string) bool {
	prefix, _, ok := strings.Cut(key, "/")
	if !ok {
		return false
	}
	for _, ns := range []string{"kubernetes.io", "k8s.io"} {
		if prefix == ns || strings.HasSuffix(prefix, "."+ns) {
			return true
		}
	}
	return false
}

func taintProto(t v1.Taint) *configv1.Taint {
	return &configv1.Taint{Key: t.Key, Value: t.Value, Effect: string(t.Effect)}
}

// nodeIPs checks --node-ip: IP addresses, at most one per family, not unspecified.
func nodeIPs(in []string) ([]string, error) {
	var out []string
	seen := map[bool]string{}
	for _, s := range in {
		s = strings.TrimSpace(s)
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("--node-ip: %q is not an IP address", s)
		}
		a = a.Unmap()
		if a.IsUnspecified() {
			return nil, fmt.Errorf("--node-ip: %s is unspecified; name one of the node's addresses", s)
		}
		if other, dup := seen[a.Is4()]; dup {
			return nil, fmt.Errorf("--node-ip: %s and %s are of the same family; give at most one IPv4 and one IPv6 address", other, s)
		}
		seen[a.Is4()] = s
		out = append(out, a.String())
	}
	return out, nil
}
