package criconfig

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestManagedHostsFile(t *testing.T) {
	const localhost = "# Kubernetes-managed hosts file.\n" +
		"127.0.0.1\tlocalhost\n" +
		"::1\tlocalhost ip6-localhost ip6-loopback\n" +
		"fe00::0\tip6-localnet\n" +
		"fe00::0\tip6-mcastprefix\n" +
		"fe00::1\tip6-allnodes\n" +
		"fe00::2\tip6-allrouters\n"
	aliases := []corev1.HostAlias{
		{IP: "123.45.67.89", Hostnames: []string{"foo", "bar", "baz"}},
		{IP: "456.78.90.123", Hostnames: []string{"park", "doo", "boo"}},
	}
	tests := []struct {
		name             string
		ips              []string
		hostname, domain string
		aliases          []corev1.HostAlias
		want             string
	}{
		{"one IP", []string{"203.0.113.1"}, "podFoo", "", nil, localhost + "203.0.113.1\tpodFoo\n"},
		{"domain puts the FQDN first", []string{"203.0.113.1"}, "podFoo", "domainFoo", nil,
			localhost + "203.0.113.1\tpodFoo.domainFoo\tpodFoo\n"},
		{"dual stack: a line per IP", []string{"203.0.113.1", "fd00::6"}, "podFoo", "domainFoo", nil,
			localhost + "203.0.113.1\tpodFoo.domainFoo\tpodFoo\nfd00::6\tpodFoo.domainFoo\tpodFoo\n"},
		{"hostAliases after a blank line", []string{"203.0.113.1"}, "podFoo", "", aliases,
			localhost + "203.0.113.1\tpodFoo\n" +
				"\n# Entries added by HostAliases.\n" +
				"123.45.67.89\tfoo\tbar\tbaz\n" +
				"456.78.90.123\tpark\tdoo\tboo\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := string(ManagedHostsFile(tt.ips, tt.hostname, tt.domain, tt.aliases)); got != tt.want {
				t.Errorf("got\n%q\nwant\n%q", got, tt.want)
			}
		})
	}
}

func TestHostNetworkHostsFile(t *testing.T) {
	node := "127.0.0.1\tlocalhost\n10.0.0.5\tnode-1\n"
	got := string(HostNetworkHostsFile([]byte(node), nil))
	if want := "# Kubernetes-managed hosts file (host network).\n" + node; got != want {
		t.Errorf("without aliases: got %q, want %q", got, want)
	}
	got = string(HostNetworkHostsFile([]byte(node), []corev1.HostAlias{{IP: "10.1.1.1", Hostnames: []string{"db"}}}))
	if want := "# Kubernetes-managed hosts file (host network).\n" + node + "\n# Entries added by HostAliases.\n10.1.1.1\tdb\n"; got != want {
		t.Errorf("with aliases: got %q, want %q", got, want)
	}
}

func TestMountsEtcHosts(t *testing.T) {
	own := &corev1.Container{Name: "c", VolumeMounts: []corev1.VolumeMount{{Name: "v", MountPath: "/etc/hosts"}}}
	plain := &corev1.Container{Name: "c", VolumeMounts: []corev1.VolumeMount{{Name: "v", MountPath: "/data"}}}
	podNet := &corev1.Pod{}
	hostNet := &corev1.Pod{Spec: corev1.PodSpec{HostNetwork: true}}
	tests := []struct {
		name string
		pod  *corev1.Pod
		c    *corev1.Container
		ips  []string
		want bool
	}{
		{"pod network with an IP", podNet, plain, []string{"10.88.0.2"}, true},
		{"pod network without an IP yet", podNet, plain, nil, false},
		{"host network", hostNet, plain, nil, true},
		{"container mounts its own /etc/hosts", podNet, own, []string{"10.88.0.2"}, false},
		{"host network, container mounts its own", hostNet, own, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := MountsEtcHosts(tt.pod, tt.c, tt.ips); got != tt.want {
				t.Errorf("MountsEtcHosts = %v, want %v", got, tt.want)
			}
		})
	}
}
