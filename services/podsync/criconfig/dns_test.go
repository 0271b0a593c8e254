package criconfig

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestPodDNS(t *testing.T) {
	dir := t.TempDir()
	resolv := filepath.Join(dir, "resolv.conf")
	if err := os.WriteFile(resolv, []byte(`# host resolver
nameserver 10.0.0.2
nameserver 10.0.0.3
search old.example
search corp.example lab.example. .
options ndots:2 timeout:1
options ndots:3
`), 0o644); err != nil {
		t.Fatal(err)
	}
	o := Options{ClusterDNS: []string{"10.96.0.10"}, ClusterDomain: "cluster.local", ResolvConf: resolv, NodeIPs: []string{"192.168.1.5"}}
	clusterSearch := []string{"shop.svc.cluster.local", "svc.cluster.local", "cluster.local", "corp.example", "lab.example"}
	host := &runtimeapi.DNSConfig{
		Servers:  []string{"10.0.0.2", "10.0.0.3"},
		Searches: []string{"corp.example", "lab.example"},
		Options:  []string{"ndots:3", "timeout:1"},
	}

	tests := []struct {
		name   string
		mutate func(*corev1.Pod, *Options)
		want   *runtimeapi.DNSConfig
	}{
		{"ClusterFirst", nil, &runtimeapi.DNSConfig{
			Servers: []string{"10.96.0.10"}, Searches: clusterSearch, Options: []string{"ndots:5"}}},
		{"ClusterFirst on host network is Default", func(p *corev1.Pod, _ *Options) { p.Spec.HostNetwork = true }, host},
		{"ClusterFirstWithHostNet", func(p *corev1.Pod, _ *Options) {
			p.Spec.HostNetwork = true
			p.Spec.DNSPolicy = corev1.DNSClusterFirstWithHostNet
		}, &runtimeapi.DNSConfig{Servers: []string{"10.96.0.10"}, Searches: clusterSearch, Options: []string{"ndots:5"}}},
		{"ClusterFirst without cluster DNS falls back to Default", func(_ *corev1.Pod, o *Options) { o.ClusterDNS = nil }, host},
		{"ClusterFirst without cluster domain keeps host searches", func(_ *corev1.Pod, o *Options) { o.ClusterDomain = "" },
			&runtimeapi.DNSConfig{Servers: []string{"10.96.0.10"}, Searches: []string{"corp.example", "lab.example"}, Options: []string{"ndots:5"}}},
		{"Default", func(p *corev1.Pod, _ *Options) { p.Spec.DNSPolicy = corev1.DNSDefault }, host},
		{"Default without resolv.conf points at the node", func(p *corev1.Pod, o *Options) {
			p.Spec.DNSPolicy = corev1.DNSDefault
			o.ResolvConf = ""
			o.NodeIPs = []string{"192.168.1.5", "fd00::5"}
		}, &runtimeapi.DNSConfig{Servers: []string{"127.0.0.1", "::1"}, Searches: []string{"."}}},
		{"None uses only dnsConfig", func(p *corev1.Pod, _ *Options) {
			p.Spec.DNSPolicy = corev1.DNSNone
			p.Spec.DNSConfig = &corev1.PodDNSConfig{
				Nameservers: []string{"1.1.1.1"},
				Searches:    []string{"a.example"},
				Options:     []corev1.PodDNSConfigOption{{Name: "ndots", Value: ptrTo("1")}, {Name: "edns0"}},
			}
		}, &runtimeapi.DNSConfig{Servers: []string{"1.1.1.1"}, Searches: []string{"a.example"}, Options: []string{"ndots:1", "edns0"}}},
		{"ClusterFirst merges dnsConfig", func(p *corev1.Pod, _ *Options) {
			p.Spec.DNSConfig = &corev1.PodDNSConfig{
				Nameservers: []string{"10.96.0.10", "1.1.1.1"},
				Searches:    []string{"cluster.local", "extra.example"},
				Options:     []corev1.PodDNSConfigOption{{Name: "ndots", Value: ptrTo("2")}, {Name: "single-request"}},
			}
		}, &runtimeapi.DNSConfig{
			Servers:  []string{"10.96.0.10", "1.1.1.1"},
			Searches: append(slices.Clone(clusterSearch), "extra.example"),
			Options:  []string{"ndots:2", "single-request"},
		}},
		{"nameservers cut to three", func(p *corev1.Pod, _ *Options) {
			p.Spec.DNSConfig = &corev1.PodDNSConfig{Nameservers: []string{"1.1.1.1", "2.2.2.2", "3.3.3.3"}}
		}, &runtimeapi.DNSConfig{Servers: []string{"10.96.0.10", "1.1.1.1", "2.2.2.2"}, Searches: clusterSearch, Options: []string{"ndots:5"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := testPod()
			opts := o
			if tt.mutate != nil {
				tt.mutate(pod, &opts)
			}
			got, err := podDNS(pod, opts)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(norm(got), norm(tt.want)) {
				t.Errorf("podDNS =\n %v\nwant\n %v", got, tt.want)
			}
		})
	}
}

// norm makes nil and empty slices compare equal.
func norm(c *runtimeapi.DNSConfig) [3][]string {
	f := func(s []string) []string {
		if len(s) == 0 {
			return nil
		}
		return s
	}
	return [3][]string{f(c.Servers), f(c.Searches), f(c.Options)}
}

func TestPodDNSErrors(t *testing.T) {
	pod := testPod()
	if _, err := podDNS(pod, Options{ClusterDNS: []string{"10.96.0.10"}, ResolvConf: "/nonexistent/resolv.conf"}); err == nil {
		t.Error("missing resolv.conf: no error")
	}
	pod.Spec.DNSPolicy = "Bogus"
	if _, err := podDNS(pod, Options{}); err == nil || !strings.Contains(err.Error(), "spec.dnsPolicy") {
		t.Errorf("bad policy: err = %v", err)
	}
}

func TestFitSearches(t *testing.T) {
	long := strings.Repeat("a", 254)
	var many []string
	for i := range 40 {
		many = append(many, strings.Repeat("d", 60)+string(rune('a'+i%26)))
	}
	tests := []struct {
		name string
		in   []string
		want int
	}{
		{"short list kept", []string{"a", "b"}, 2},
		{"over-long domain dropped", []string{"a", long, "b"}, 2},
		// 32 paths of 61 characters are 1983 characters with spaces: within 2048.
		{"cut to 32 paths", many, 32},
	}
	for _, tt := range tests {
		got := fitSearches(slices.Clone(tt.in))
		if len(got) != tt.want {
			t.Errorf("%s: %d searches, want %d", tt.name, len(got), tt.want)
		}
		if n := len(strings.Join(got, " ")); n > maxDNSSearchListChars {
			t.Errorf("%s: search line %d characters", tt.name, n)
		}
	}
	var wide []string
	for range 30 {
		wide = append(wide, strings.Repeat("w", 100))
	}
	if got := fitSearches(wide); len(got) != 20 {
		t.Errorf("line-length cut: %d searches, want 20", len(got))
	}
}
