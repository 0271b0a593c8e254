package criconfig

import (
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestHostname(t *testing.T) {
	long := strings.Repeat("a", 62) + "-b"
	tests := []struct {
		name       string
		mutate     func(*corev1.Pod, *Options)
		want       string
		wantDomain string
		wantErr    string
	}{
		{"pod name", nil, "web", "", ""},
		{"spec.hostname", func(p *corev1.Pod, _ *Options) { p.Spec.Hostname = "db-0" }, "db-0", "", ""},
		{"subdomain alone keeps short name", func(p *corev1.Pod, _ *Options) { p.Spec.Hostname = "db-0"; p.Spec.Subdomain = "db" },
			"db-0", "db.shop.svc.cluster.local", ""},
		{"FQDN", func(p *corev1.Pod, _ *Options) {
			p.Spec.Hostname = "db-0"
			p.Spec.Subdomain = "db"
			p.Spec.SetHostnameAsFQDN = ptrTo(true)
		}, "db-0.db.shop.svc.cluster.local", "db.shop.svc.cluster.local", ""},
		{"FQDN without subdomain is the hostname", func(p *corev1.Pod, _ *Options) { p.Spec.SetHostnameAsFQDN = ptrTo(true) }, "web", "", ""},
		{"FQDN of exactly 64 characters", func(p *corev1.Pod, _ *Options) {
			p.Spec.Hostname = strings.Repeat("h", 64-len(".db.shop.svc.cluster.local"))
			p.Spec.Subdomain = "db"
			p.Spec.SetHostnameAsFQDN = ptrTo(true)
		}, strings.Repeat("h", 64-len(".db.shop.svc.cluster.local")) + ".db.shop.svc.cluster.local", "db.shop.svc.cluster.local", ""},
		{"FQDN too long", func(p *corev1.Pod, _ *Options) {
			p.Spec.Hostname = strings.Repeat("h", 40)
			p.Spec.Subdomain = "db"
			p.Spec.SetHostnameAsFQDN = ptrTo(true)
		}, "", "db.shop.svc.cluster.local",
			"failed to construct FQDN from pod hostname and cluster domain, FQDN " + strings.Repeat("h", 40) + ".db.shop.svc.cluster.local is too long (64 characters is the max, 66 characters requested)"},
		{"long pod name cut at 63 without trailing dash", func(p *corev1.Pod, _ *Options) { p.Name = long }, strings.Repeat("a", 62), "", ""},
		{"invalid hostname", func(p *corev1.Pod, _ *Options) { p.Spec.Hostname = "Not_Valid" }, "", "", `pod Hostname "Not_Valid" is not a valid DNS label: `},
		{"invalid subdomain", func(p *corev1.Pod, _ *Options) { p.Spec.Subdomain = "a.b" }, "", "", `pod Subdomain "a.b" is not a valid DNS label: `},
		{"hostnameOverride wins and has no domain", func(p *corev1.Pod, _ *Options) {
			p.Spec.HostnameOverride = ptrTo("custom.host")
			p.Spec.Hostname = "x"
			p.Spec.Subdomain = "db"
			p.Spec.SetHostnameAsFQDN = ptrTo(true)
		}, "custom.host", "", ""},
		{"hostnameOverride ignored with the gate off", func(p *corev1.Pod, o *Options) {
			p.Spec.HostnameOverride = ptrTo("custom.host")
			o.IgnoreHostnameOverride = true
		}, "web", "", ""},
		{"invalid hostnameOverride", func(p *corev1.Pod, _ *Options) { p.Spec.HostnameOverride = ptrTo("Bad_Name") }, "", "",
			`pod HostnameOverride "Bad_Name" is not a valid DNS subdomain: `},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := testPod()
			o := Options{ClusterDomain: "cluster.local"}
			if tt.mutate != nil {
				tt.mutate(pod, &o)
			}
			got, err := Hostname(pod, o)
			if tt.wantErr != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want it to start with %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("Hostname = %q, %v; want %q", got, err, tt.want)
			}
			if _, domain, _ := HostnameAndDomain(pod, o); domain != tt.wantDomain {
				t.Errorf("domain = %q, want %q", domain, tt.wantDomain)
			}
		})
	}
}

func TestSandboxConfig(t *testing.T) {
	o := Options{ClusterDNS: []string{"10.96.0.10"}, ClusterDomain: "cluster.local", PodLogsDir: "/var/log/pods",
		CgroupParent: func(p *corev1.Pod) string {
			return "/kubepods/" + strings.ToLower(string(QOSClass(p))) + "/pod" + string(p.UID)
		}}
	pod := testPod()
	pod.Spec.SecurityContext = &corev1.PodSecurityContext{
		RunAsUser:          ptrTo(int64(1000)),
		RunAsGroup:         ptrTo(int64(3000)),
		FSGroup:            ptrTo(int64(2000)),
		SupplementalGroups: []int64{4000, 5000},
		Sysctls:            []corev1.Sysctl{{Name: "net.ipv4.ip_unprivileged_port_start", Value: "0"}},
	}
	pod.Spec.Containers[0].Ports = []corev1.ContainerPort{
		{Name: "http", ContainerPort: 80, HostPort: 8080, Protocol: corev1.ProtocolTCP},
		{ContainerPort: 53, HostPort: 5353, Protocol: corev1.ProtocolUDP, HostIP: "127.0.0.1"},
		{Name: "http", ContainerPort: 81, Protocol: corev1.ProtocolTCP}, // repeated name: dropped
	}
	pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{
		Name: "side", Image: "busybox",
		Ports:     []corev1.ContainerPort{{ContainerPort: 9000, Protocol: corev1.ProtocolSCTP}},
		Resources: corev1.ResourceRequirements{Requests: rl("cpu", "250m"), Limits: rl("cpu", "500m", "memory", "128Mi")},
	})
	pod.Spec.Overhead = rl("cpu", "100m", "memory", "32Mi")

	cfg, err := SandboxConfig(pod, 2, o)
	if err != nil {
		t.Fatal(err)
	}
	if m := cfg.Metadata; m.Name != "web" || m.Namespace != "shop" || m.Uid != string(pod.UID) || m.Attempt != 2 {
		t.Errorf("metadata = %v", m)
	}
	if cfg.Hostname != "web" {
		t.Errorf("hostname = %q", cfg.Hostname)
	}
	if want := "/var/log/pods/shop_web_" + string(pod.UID); cfg.LogDirectory != want {
		t.Errorf("log directory = %q, want %q", cfg.LogDirectory, want)
	}
	wantLabels := map[string]string{"app": "web", LabelPodName: "web", LabelPodNamespace: "shop", LabelPodUID: string(pod.UID)}
	if !reflect.DeepEqual(cfg.Labels, wantLabels) {
		t.Errorf("labels = %v", cfg.Labels)
	}
	if !reflect.DeepEqual(cfg.Annotations, pod.Annotations) {
		t.Errorf("annotations = %v", cfg.Annotations)
	}
	wantPorts := []*runtimeapi.PortMapping{
		{Protocol: runtimeapi.Protocol_TCP, ContainerPort: 80, HostPort: 8080},
		{Protocol: runtimeapi.Protocol_UDP, ContainerPort: 53, HostPort: 5353, HostIp: "127.0.0.1"},
		{Protocol: runtimeapi.Protocol_SCTP, ContainerPort: 9000},
	}
	if len(cfg.PortMappings) != len(wantPorts) {
		t.Fatalf("port mappings = %v", cfg.PortMappings)
	}
	for i, p := range cfg.PortMappings {
		w := wantPorts[i]
		if p.Protocol != w.Protocol || p.ContainerPort != w.ContainerPort || p.HostPort != w.HostPort || p.HostIp != w.HostIp {
			t.Errorf("port mapping %d = %v, want %v", i, p, w)
		}
	}
	if cfg.DnsConfig == nil || len(cfg.DnsConfig.Servers) != 1 || cfg.DnsConfig.Servers[0] != "10.96.0.10" {
		t.Errorf("dns = %v", cfg.DnsConfig)
	}

	lc := cfg.Linux
	if want := "/kubepods/burstable/pod" + string(pod.UID); lc.CgroupParent != want {
		t.Errorf("cgroup parent = %q, want %q", lc.CgroupParent, want)
	}
	if lc.Sysctls["net.ipv4.ip_unprivileged_port_start"] != "0" || len(lc.Sysctls) != 1 {
		t.Errorf("sysctls = %v", lc.Sysctls)
	}
	sc := lc.SecurityContext
	if sc.RunAsUser.GetValue() != 1000 || sc.RunAsGroup.GetValue() != 3000 {
		t.Errorf("run as = %v/%v", sc.RunAsUser, sc.RunAsGroup)
	}
	if !reflect.DeepEqual(sc.SupplementalGroups, []int64{2000, 4000, 5000}) {
		t.Errorf("supplemental groups = %v", sc.SupplementalGroups)
	}
	if sc.Seccomp.GetProfileType() != runtimeapi.SecurityProfile_RuntimeDefault {
		t.Errorf("sandbox seccomp = %v", sc.Seccomp)
	}
	if sc.Privileged {
		t.Error("privileged without a privileged container")
	}
	ns := sc.NamespaceOptions
	if ns.Network != runtimeapi.NamespaceMode_POD || ns.Pid != runtimeapi.NamespaceMode_CONTAINER || ns.Ipc != runtimeapi.NamespaceMode_POD {
		t.Errorf("namespaces = %v", ns)
	}
	// Pod resources, summed over containers by component-helpers as the kubelet does:
	// 250m CPU requested -> 256 shares; 500m limit -> 50ms per 100ms; 128Mi limit.
	if r := lc.Resources; r.CpuShares != 256 || r.CpuPeriod != 100000 || r.CpuQuota != 50000 || r.MemoryLimitInBytes != 128<<20 {
		t.Errorf("sandbox resources = %v", lc.Resources)
	}
	if lc.Overhead.CpuShares != 102 || lc.Overhead.CpuQuota != 10000 || lc.Overhead.MemoryLimitInBytes != 32<<20 {
		t.Errorf("overhead = %v", lc.Overhead)
	}
}

func TestSandboxNamespacesAndHostNetwork(t *testing.T) {
	tests := []struct {
		name          string
		mutate        func(*corev1.Pod)
		net, pid, ipc runtimeapi.NamespaceMode
		hostname      string
		privileged    bool
	}{
		{"defaults", nil, runtimeapi.NamespaceMode_POD, runtimeapi.NamespaceMode_CONTAINER, runtimeapi.NamespaceMode_POD, "web", false},
		{"host network keeps node hostname", func(p *corev1.Pod) { p.Spec.HostNetwork = true },
			runtimeapi.NamespaceMode_NODE, runtimeapi.NamespaceMode_CONTAINER, runtimeapi.NamespaceMode_POD, "", false},
		{"host pid and ipc", func(p *corev1.Pod) { p.Spec.HostPID = true; p.Spec.HostIPC = true },
			runtimeapi.NamespaceMode_POD, runtimeapi.NamespaceMode_NODE, runtimeapi.NamespaceMode_NODE, "web", false},
		{"shared process namespace", func(p *corev1.Pod) { p.Spec.ShareProcessNamespace = ptrTo(true) },
			runtimeapi.NamespaceMode_POD, runtimeapi.NamespaceMode_POD, runtimeapi.NamespaceMode_POD, "web", false},
		{"no pod security context", func(p *corev1.Pod) { p.Spec.SecurityContext = nil; p.Spec.HostNetwork = true },
			runtimeapi.NamespaceMode_NODE, runtimeapi.NamespaceMode_CONTAINER, runtimeapi.NamespaceMode_POD, "", false},
		{"privileged init container", func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{Name: "init", SecurityContext: &corev1.SecurityContext{Privileged: ptrTo(true)}}}
		}, runtimeapi.NamespaceMode_POD, runtimeapi.NamespaceMode_CONTAINER, runtimeapi.NamespaceMode_POD, "web", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := testPod()
			if tt.mutate != nil {
				tt.mutate(pod)
			}
			cfg, err := SandboxConfig(pod, 0, Options{ClusterDNS: []string{"10.96.0.10"}})
			if err != nil {
				t.Fatal(err)
			}
			ns := cfg.Linux.SecurityContext.NamespaceOptions
			if ns.Network != tt.net || ns.Pid != tt.pid || ns.Ipc != tt.ipc {
				t.Errorf("namespaces = %v", ns)
			}
			if cfg.Hostname != tt.hostname {
				t.Errorf("hostname = %q, want %q", cfg.Hostname, tt.hostname)
			}
			if cfg.Linux.SecurityContext.Privileged != tt.privileged {
				t.Errorf("privileged = %v", cfg.Linux.SecurityContext.Privileged)
			}
		})
	}
}

// TestSandboxSysctlsDotted: a sysctl written with slashes reaches the runtime in the dotted
// form, as the kubelet converts it (ConvertPodSysctlsVariableToDotsSeparator).
func TestSandboxSysctlsDotted(t *testing.T) {
	pod := testPod()
	pod.Spec.SecurityContext = &corev1.PodSecurityContext{Sysctls: []corev1.Sysctl{{Name: "net/ipv4/ping_group_range", Value: "0 1"}}}
	cfg, err := SandboxConfig(pod, 0, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Linux.Sysctls; len(got) != 1 || got["net.ipv4.ping_group_range"] != "0 1" {
		t.Errorf("sysctls %v, want net.ipv4.ping_group_range", got)
	}
}
