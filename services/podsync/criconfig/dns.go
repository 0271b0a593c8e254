package criconfig

import (
	"bufio"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Limits the API server enforces on a pod's DNS config, applied again to the merged
// result as the kubelet does.
const (
	maxDNSNameservers     = 3
	maxDNSSearchPaths     = 32
	maxDNSSearchListChars = 2048
	maxResolvConfBytes    = 10 << 20
)

// podDNS builds the pod's resolver configuration from its dnsPolicy and dnsConfig.
func podDNS(pod *corev1.Pod, o Options) (*runtimeapi.DNSConfig, error) {
	policy := pod.Spec.DNSPolicy
	switch policy {
	case "", corev1.DNSClusterFirst:
		// ClusterFirst is the API default; on the host network it means Default.
		if pod.Spec.HostNetwork {
			policy = corev1.DNSDefault
		} else {
			policy = corev1.DNSClusterFirst
		}
	case corev1.DNSClusterFirstWithHostNet:
		policy = corev1.DNSClusterFirst
	case corev1.DNSDefault, corev1.DNSNone:
	default:
		return nil, fmt.Errorf("spec.dnsPolicy: unsupported value %q", pod.Spec.DNSPolicy)
	}
	// Without cluster DNS servers, ClusterFirst cannot work: fall back to Default as the
	// kubelet does (it also emits a MissingClusterDNS event; the caller may).
	if policy == corev1.DNSClusterFirst && len(o.ClusterDNS) == 0 {
		policy = corev1.DNSDefault
	}

	cfg := &runtimeapi.DNSConfig{}
	switch policy {
	case corev1.DNSClusterFirst:
		host, err := hostDNS(o.ResolvConf)
		if err != nil {
			return nil, err
		}
		cfg.Servers = append([]string(nil), o.ClusterDNS...)
		cfg.Searches = host.Searches
		if o.ClusterDomain != "" {
			cfg.Searches = dedupe(append([]string{
				pod.Namespace + ".svc." + o.ClusterDomain,
				"svc." + o.ClusterDomain,
				o.ClusterDomain,
			}, host.Searches...))
		}
		cfg.Options = []string{"ndots:5"}
	case corev1.DNSDefault:
		host, err := hostDNS(o.ResolvConf)
		if err != nil {
			return nil, err
		}
		cfg = host
		if o.ResolvConf == "" {
			// No host resolver: point at the node itself, which is what a resolver
			// without nameservers would do.
			for _, ip := range o.NodeIPs {
				if a, err := netip.ParseAddr(ip); err == nil && a.Is6() && !a.Is4In6() {
					cfg.Servers = append(cfg.Servers, "::1")
				} else {
					cfg.Servers = append(cfg.Servers, "127.0.0.1")
				}
			}
			if len(cfg.Servers) == 0 {
				cfg.Servers = []string{"127.0.0.1"}
			}
			cfg.Searches = []string{"."}
		}
	case corev1.DNSNone:
		// Only what spec.dnsConfig says.
	}

	if dc := pod.Spec.DNSConfig; dc != nil {
		cfg.Servers = dedupe(append(cfg.Servers, dc.Nameservers...))
		cfg.Searches = dedupe(append(cfg.Searches, dc.Searches...))
		cfg.Options = mergeDNSOptions(cfg.Options, dc.Options)
	}
	if len(cfg.Servers) > maxDNSNameservers {
		cfg.Servers = cfg.Servers[:maxDNSNameservers]
	}
	cfg.Searches = fitSearches(cfg.Searches)
	return cfg, nil
}

// hostDNS reads the resolver file; an empty path gives an empty config.
func hostDNS(path string) (*runtimeapi.DNSConfig, error) {
	if path == "" {
		return &runtimeapi.DNSConfig{}, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read resolver config: %w", err)
	}
	defer f.Close()
	cfg, err := parseResolvConf(io.LimitReader(f, maxResolvConfBytes))
	if err != nil {
		return nil, fmt.Errorf("parse resolver config %s: %w", path, err)
	}
	return cfg, nil
}

// parseResolvConf reads nameserver lines (they accumulate), the last search line and
// options lines (a later option replaces an earlier one of the same name).
func parseResolvConf(r io.Reader) (*runtimeapi.DNSConfig, error) {
	cfg := &runtimeapi.DNSConfig{Servers: []string{}, Searches: []string{}, Options: []string{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), maxResolvConfBytes)
	line := 0
	for sc.Scan() {
		line++
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		switch fields[0] {
		case "nameserver":
			if len(fields) < 2 {
				return nil, fmt.Errorf("line %d: nameserver without an address", line)
			}
			cfg.Servers = append(cfg.Servers, fields[1])
		case "search":
			cfg.Searches = []string{}
			for _, s := range fields[1:] {
				if s != "." {
					cfg.Searches = append(cfg.Searches, strings.TrimSuffix(s, "."))
				}
			}
		case "options":
			cfg.Options = setOptions(cfg.Options, fields[1:]...)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return cfg, nil
}

func optionName(opt string) string {
	name, _, _ := strings.Cut(opt, ":")
	return name
}

// setOptions adds options, replacing any earlier one of the same name in place.
func setOptions(opts []string, add ...string) []string {
	for _, o := range add {
		replaced := false
		for i := range opts {
			if optionName(opts[i]) == optionName(o) {
				opts[i] = o
				replaced = true
				break
			}
		}
		if !replaced {
			opts = append(opts, o)
		}
	}
	return opts
}

// mergeDNSOptions applies the pod's dnsConfig options over the base ones.
func mergeDNSOptions(base []string, pod []corev1.PodDNSConfigOption) []string {
	out := append([]string{}, base...)
	for _, o := range pod {
		opt := o.Name
		if o.Value != nil && *o.Value != "" {
			opt += ":" + *o.Value
		}
		out = setOptions(out, opt)
	}
	return out
}

// fitSearches drops search domains beyond the resolver limits: past the path count,
// longer than a DNS name, and from the end while the line is too long.
func fitSearches(searches []string) []string {
	if len(searches) > maxDNSSearchPaths {
		searches = searches[:maxDNSSearchPaths]
	}
	out := searches[:0:0]
	for _, s := range searches {
		if len(s) <= validation.DNS1123SubdomainMaxLength {
			out = append(out, s)
		}
	}
	for len(out) > 0 && len(strings.Join(out, " ")) > maxDNSSearchListChars {
		out = out[:len(out)-1]
	}
	return out
}

func dedupe(in []string) []string {
	seen := make(map[string]bool, len(in))
	out := make([]string, 0, len(in))
	for _, s := range in {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}
