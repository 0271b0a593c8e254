package config

import (
	"errors"
	"net/netip"
	"runtime"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	v1beta1 "k8s.io/kubelet/config/v1beta1"
)

func fakeHost(hostname string, ip string) hostEnv {
	return hostEnv{
		hostname: func() (string, error) { return hostname, nil },
		defaultIPv4: func() (netip.Addr, error) {
			if ip == "" {
				return netip.Addr{}, errors.New("no default route")
			}
			return netip.MustParseAddr(ip), nil
		},
		sysctl:   func(name string) (int, error) { return kernelDefaults[name], nil },
		swaps:    func() ([]string, error) { return nil, nil },
		cgroupV2: func() (bool, error) { return true, nil },
	}
}

func TestNodeIdentity(t *testing.T) {
	o := &Options{NodeLabels: map[string]string{"node-role.example.com/worker": "", "zone": "a"}}
	kc := &v1beta1.KubeletConfiguration{RegisterWithTaints: []v1.Taint{{Key: "k", Value: "v", Effect: v1.TaintEffectNoSchedule}}}
	id, warnings, err := nodeIdentity(o, kc, fakeHost("Worker-1.Example.COM", "10.0.0.5"))
	if err != nil {
		t.Fatal(err)
	}
	if id.Name != "worker-1.example.com" || id.Hostname != "Worker-1.Example.COM" {
		t.Errorf("name %q hostname %q", id.Name, id.Hostname)
	}
	if len(id.Ips) != 1 || id.Ips[0] != "10.0.0.5" || len(warnings) != 0 {
		t.Errorf("ips %v warnings %v", id.Ips, warnings)
	}
	want := map[string]string{
		"kubernetes.io/hostname": "worker-1.example.com", "kubernetes.io/os": runtime.GOOS,
		"kubernetes.io/arch": runtime.GOARCH, "node-role.example.com/worker": "", "zone": "a",
	}
	for k, v := range want {
		if id.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, id.Labels[k], v)
		}
	}
	if len(id.Taints) != 1 || id.Taints[0].Effect != "NoSchedule" {
		t.Errorf("taints %v", id.Taints)
	}
}

func TestNodeIdentityOverridesAndErrors(t *testing.T) {
	kc := &v1beta1.KubeletConfiguration{}
	id, _, err := nodeIdentity(&Options{HostnameOverride: "Node-A", NodeIPs: []string{"2001:db8::1", "192.0.2.7"}}, kc, fakeHost("ignored", "10.0.0.5"))
	if err != nil {
		t.Fatal(err)
	}
	if id.Name != "node-a" || strings.Join(id.Ips, ",") != "2001:db8::1,192.0.2.7" {
		t.Errorf("name %q ips %v", id.Name, id.Ips)
	}
	_, warnings, err := nodeIdentity(&Options{}, kc, fakeHost("host", ""))
	if err != nil || len(warnings) != 1 || !strings.Contains(warnings[0], "no node IP") {
		t.Errorf("no default route: err %v warnings %v", err, warnings)
	}
	bad := []struct {
		o    *Options
		host string
		want string
	}{
		{&Options{HostnameOverride: "bad_name"}, "h", "--hostname-override"},
		{&Options{}, "under_score", "the hostname"},
		{&Options{NodeIPs: []string{"x"}}, "h", "--node-ip"},
		{&Options{NodeIPs: []string{"0.0.0.0"}}, "h", "unspecified"},
		{&Options{NodeIPs: []string{"192.0.2.1", "192.0.2.2"}}, "h", "same family"},
		{&Options{NodeLabels: map[string]string{"bad key!": "v"}}, "h", "--node-labels"},
		{&Options{NodeLabels: map[string]string{"k": "bad value!"}}, "h", "--node-labels"},
	}
	for _, b := range bad {
		if _, _, err := nodeIdentity(b.o, kc, fakeHost(b.host, "10.0.0.1")); err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%+v: error %v, want one naming %s", b.o, err, b.want)
		}
	}
}

// --node-labels in the kubernetes.io and k8s.io namespaces are refused unless a kubelet may
// set them on its own Node (k8s.io/kubelet/pkg/apis.IsKubeletLabel), as the kubelet's
// ValidateKubeletFlags refuses them at start; every refused key is named.
func TestNodeLabelsInKubernetesNamespacesAreRefused(t *testing.T) {
	kc := &v1beta1.KubeletConfiguration{}
	for _, labels := range []map[string]string{
		{"node-role.kubernetes.io/worker": ""},
		{"kubernetes.io/role": "worker"},
		{"k8s.io/x": "y"},
		{"sub.k8s.io/x": "y"},
		{"team.example.com/a": "b", "example.kubernetes.io/x": "y", "node-role.kubernetes.io/control-plane": ""},
	} {
		_, _, err := nodeIdentity(&Options{NodeLabels: labels}, kc, fakeHost("h", "10.0.0.1"))
		if err == nil || !strings.Contains(err.Error(), "--node-labels") || !strings.Contains(err.Error(), "node.kubernetes.io") {
			t.Errorf("%v: error %v, want --node-labels refused naming the allowed prefixes", labels, err)
			continue
		}
		for k := range labels {
			if named := strings.Contains(err.Error(), k); named == strings.HasSuffix(k, "example.com/a") {
				t.Errorf("%v: error %q names %s: %t", labels, err, k, named)
			}
		}
	}
	allowed := map[string]string{
		"node.kubernetes.io/pool":          "a",
		"x.node.kubernetes.io/y":           "b",
		"kubelet.kubernetes.io/z":          "c",
		"topology.kubernetes.io/zone":      "z1",
		"node.kubernetes.io/instance-type": "m5",
		"kubernetes.io/hostname":           "other",
		"beta.kubernetes.io/arch":          "amd64",
		"example.com/kubernetes.io":        "d",
		"notkubernetes.io/x":               "e",
	}
	id, _, err := nodeIdentity(&Options{NodeLabels: allowed}, kc, fakeHost("h", "10.0.0.1"))
	if err != nil {
		t.Fatalf("labels a kubelet may set: %v", err)
	}
	for k, v := range allowed {
		if id.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, id.Labels[k], v)
		}
	}
}
