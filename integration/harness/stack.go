// Package harness brings up a local cluster for unitlet: etcd and the Kubernetes control
// plane built from the pinned k8s.io/kubernetes module, a PKI made in Go with TLS
// bootstrapping ready, and node machines running unitlet. It backs the `unitlet-harness`
// command and the integration tests.
package harness

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"
)

// Stack is a stack file: what to bring up.
type Stack struct {
	// Name names the stack; its data lives in <StateRoot>/<Name>.
	Name string `json:"name"`
	// Standalone stacks have no control plane: their nodes run static pods only, with no
	// API server (the kubelet's standalone mode). controlPlane is then ignored.
	Standalone   bool         `json:"standalone"`
	ControlPlane ControlPlane `json:"controlPlane"`
	Runtime      Runtime      `json:"runtime"`
	// Registry, when set, runs a private image registry for the stack's containerd
	// (registry.go).
	Registry *Registry `json:"registry,omitempty"`
	// MetricsServer, when set, runs metrics-server once the nodes are up
	// (metricsserver.go): `kubectl top` and the metrics.k8s.io API.
	MetricsServer *MetricsServer `json:"metricsServer,omitempty"`
	// LocalPathProvisioner, when set, runs local-path-provisioner once the nodes are up
	// (localpath.go): the StorageClass local-path.
	LocalPathProvisioner *LocalPathProvisioner `json:"localPathProvisioner,omitempty"`
	Nodes                []Node                `json:"nodes"`
}

// ControlPlane sets the control plane's ports; everything listens on 127.0.0.1.
type ControlPlane struct {
	APIServerPort int `json:"apiServerPort"`
	// EtcdPort is etcd's client port; its peer port is the next one.
	EtcdPort int `json:"etcdPort"`
	// ControllerManagerPort and SchedulerPort are their secure ports (health); a stack that
	// runs beside another sets its own. Defaults 10257 and 10259.
	ControllerManagerPort int `json:"controllerManagerPort"`
	SchedulerPort         int `json:"schedulerPort"`
	// ServiceCIDR is the range of Service cluster IPs.
	ServiceCIDR string `json:"serviceCIDR"`
}

// Node is a node machine.
type Node struct {
	Name string `json:"name"`
	// Backend is "process": unitlet binaries as host processes; or "nspawn": a Debian
	// machine booted by systemd-nspawn with systemd as PID 1 running unitlet's units (see
	// nspawn.go). nspawn machines share the host's network, so a stack has at most one.
	// Or "vm": a qemu virtual machine with its own kernel (cgroup v2: the units' limits are
	// enforced), containerd, mounts and network, running every service (see vm.go); the
	// machine has one core of emulation, so a stack has at most one.
	// Or "kubelet": the real kubelet of KubernetesVersion, to measure unitlet against
	// (kubelet.go); it listens on fixed ports, so a stack has at most one, and it runs no
	// unitlet services. It shares the stack's containerd and stops pods it did not start,
	// as podsync does: with a podsync node in the same stack, run one of them at a time
	// (StopNode, StartNode).
	Backend string `json:"backend"`
	// Services are the unitlet services the node runs, e.g. [config].
	Services []string `json:"services"`
	// Metrics gives services a metrics listener (UNITLET_METRICS_ADDR or _SOCKET): a process node's
	// environment, an nspawn or vm node's unit drop-in (its units set their own loopback
	// addresses otherwise). host:port serves /healthz alone; unix:NAME is a socket NAME in
	// the node's socket directory that serves /metrics and the service's pages too (see
	// metrics.go; ServicePage reads it), e.g. {podsync: "unix:podsync-metrics.sock"}.
	Metrics map[string]string `json:"metrics,omitempty"`
	// NodeAPIPort is the port of unitlet-status's node API (the config's port); 0 means the
	// kubelet's 10250. A stack that runs beside another sets its own; /healthz then moves
	// to two below it (healthzPort).
	NodeAPIPort int `json:"nodeAPIPort,omitempty"`
	// HostServices are services of an nspawn node run as host processes beside the machine:
	// unitlet-volumes, whose tmpfs mounts the stack's containerd (on the host) must see, and
	// a machine's mounts never reach the host. On a real node there is one mount namespace
	// and the unit runs them all.
	HostServices []string `json:"hostServices,omitempty"`
	// Bootstrap starts the node with no credentials but the stack's bootstrap token:
	// unitlet-config makes its client certificate by TLS bootstrapping, as a new node
	// joining a cluster does. A process node bootstraps each time its config starts; an
	// nspawn machine keeps what it bootstrapped across its restarts, as a real node keeps
	// its kubeconfig across reboots; a vm node boots from its image each time, so it
	// bootstraps at every boot.
	Bootstrap bool `json:"bootstrap,omitempty"`
	// CertificateLifetime is the lifetime the node's CSRs ask for
	// (UNITLET_CERTIFICATE_LIFETIME for config and certs), e.g. 10m, the shortest the API
	// server accepts: certificates then expire, and are rotated, within a test run.
	CertificateLifetime string `json:"certificateLifetime,omitempty"`
	// ServerTLSBootstrap sets the node's serverTLSBootstrap: unitlet-certs requests the
	// node API's serving certificate, and the stack runs an approver for it (the
	// controller-manager never approves kubelet-serving CSRs).
	ServerTLSBootstrap bool `json:"serverTLSBootstrap,omitempty"`
	// MaxPods sets the node's maxPods; 0 leaves the kubelet's default, 110.
	MaxPods int `json:"maxPods,omitempty"`
	// KubeletConfig is KubeletConfiguration YAML added to the node's configuration, e.g.
	// "podPidsLimit: 64".
	KubeletConfig string `json:"kubeletConfig,omitempty"`
	// ImageCredentialProvider runs the kubelet's credential provider plugins on an nspawn
	// node with podsync: unitlet-config gets --image-credential-provider-config and
	// --image-credential-provider-bin-dir, naming the harness's plugin
	// (integration/credentialplugin), which gives the stack registry's account for
	// RegistryAccess.PluginBusybox (credentialprovider.go).
	ImageCredentialProvider *ImageCredentialProvider `json:"imageCredentialProvider,omitempty"`
	// Kubeadm makes an nspawn node one that `kubeadm join` sets up (kubeadmnode.go): the
	// machine installs unitlet from DistDir's Debian packages at boot (every service,
	// unitletctl, unitlet and unitlet-kubeadm, whose kubelet.service kubeadm drives), has
	// kubeadm (EnsureKubeadm) in /usr/bin, and the harness neither configures nor starts
	// unitlet in it: no /etc/unitlet/config.yaml, credentials or unitlet.target of the
	// harness's. kubeadm writes the node's files and starts it (integration/kubeadmtest).
	// The configuration is kubeadm's, so the node's configuration fields stay unset.
	Kubeadm bool `json:"kubeadm,omitempty"`
	// RootDirSize puts the node's root dir (its checkpoints, pod directories, emptyDirs and
	// credentials) on a filesystem of its own of this size, e.g. 256Mi: an ext4 image in
	// the node's directory, loop-mounted, so that a test can fill it to 100 % without
	// touching the host's disk (integration/faultstest).
	RootDirSize string `json:"rootDirSize,omitempty"`
}

var nodeName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// LoadStack reads and checks a stack file. Errors name the file and the field.
func LoadStack(path string) (*Stack, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("stack file: %w", err)
	}
	doc, err := yaml.YAMLToJSONStrict(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	var s Stack
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	if s.Name == "" {
		s.Name = trimExt(filepath.Base(path))
	}
	if s.ControlPlane.APIServerPort == 0 {
		s.ControlPlane.APIServerPort = 6443
	}
	if s.ControlPlane.EtcdPort == 0 {
		s.ControlPlane.EtcdPort = 2379
	}
	if s.ControlPlane.ControllerManagerPort == 0 {
		s.ControlPlane.ControllerManagerPort = 10257
	}
	if s.ControlPlane.SchedulerPort == 0 {
		s.ControlPlane.SchedulerPort = 10259
	}
	if s.ControlPlane.ServiceCIDR == "" {
		s.ControlPlane.ServiceCIDR = "10.0.0.0/24"
	}
	switch s.Runtime.Kind {
	case "", "containerd":
	default:
		return nil, fmt.Errorf("%s: runtime.kind %q: supported: containerd", path, s.Runtime.Kind)
	}
	switch s.Runtime.Version {
	case "", "1.6":
	case Containerd2:
		if s.Runtime.Kind != "containerd" {
			return nil, fmt.Errorf("%s: runtime.version %q: needs runtime.kind containerd", path, s.Runtime.Version)
		}
	default:
		return nil, fmt.Errorf("%s: runtime.version %q: supported: \"1.6\" or empty (the machine's containerd, Debian 12's package) and %q (containerd %s built from its module)",
			path, s.Runtime.Version, Containerd2, ContainerdVersion)
	}
	if s.MetricsServer != nil && (s.Standalone || s.MetricsServer.Port <= 0 || s.MetricsServer.Port > 65535) {
		return nil, fmt.Errorf("%s: metricsServer.port %d: metrics-server needs a control plane and a port of 1 to 65535", path, s.MetricsServer.Port)
	}
	if s.LocalPathProvisioner != nil && s.Standalone {
		return nil, fmt.Errorf("%s: localPathProvisioner: needs a control plane", path)
	}
	if s.Registry != nil && (s.Runtime.Kind != "containerd" || s.Registry.Port <= 0 || s.Registry.Port > 65535) {
		return nil, fmt.Errorf("%s: registry.port %d: a registry needs runtime.kind containerd and a port of 1 to 65535", path, s.Registry.Port)
	}
	if s.Runtime.PodSubnet == "" {
		s.Runtime.PodSubnet = "10.88.0.0/16"
	}
	if !nodeName.MatchString(s.Name) {
		return nil, fmt.Errorf("%s: name %q: use lower-case letters, digits and dashes", path, s.Name)
	}
	seen := map[string]bool{}
	nspawn, podsync, kubelet, vm := 0, 0, 0, 0
	status := 0 // nodes running unitlet-status
	for i, n := range s.Nodes {
		if !nodeName.MatchString(n.Name) || seen[n.Name] {
			return nil, fmt.Errorf("%s: nodes[%d].name %q: want a unique DNS label", path, i, n.Name)
		}
		seen[n.Name] = true
		switch n.Backend {
		case "process":
		case "nspawn":
			if nspawn++; nspawn > 1 {
				return nil, fmt.Errorf("%s: nodes[%d]: a second nspawn node: the machines share the host's network and would listen on the same ports", path, i)
			}
		case "vm":
			if vm++; vm > 1 {
				return nil, fmt.Errorf("%s: nodes[%d]: a second vm node: each emulated machine takes a core; one per stack", path, i)
			}
			if !slices.Equal(slices.Sorted(slices.Values(n.Services)), slices.Sorted(slices.Values(knownServices))) {
				return nil, fmt.Errorf("%s: nodes[%d].services %v: a vm node installs the unitlet meta-package, which brings every service: list all of %s", path, i, n.Services, strings.Join(knownServices, ", "))
			}
			if s.Runtime.Kind != "" {
				return nil, fmt.Errorf("%s: runtime.kind %q: a stack with a vm node has no host runtime (the vm runs its own containerd); leave runtime out", path, s.Runtime.Kind)
			}
		case "kubelet":
			if s.Standalone {
				return nil, fmt.Errorf("%s: nodes[%d]: a kubelet node in a standalone stack: the harness runs the kubelet against its API server only", path, i)
			}
			if kubelet++; kubelet > 1 {
				return nil, fmt.Errorf("%s: nodes[%d]: a second kubelet node: the kubelets would listen on the same ports", path, i)
			}
			if len(n.Services) > 0 {
				return nil, fmt.Errorf("%s: nodes[%d].services: a kubelet node runs the kubelet, no unitlet services", path, i)
			}
		default:
			return nil, fmt.Errorf("%s: nodes[%d].backend %q: supported backends: process, nspawn, vm, kubelet", path, i, n.Backend)
		}
		for j, svc := range n.Services {
			if !slices.Contains(knownServices, svc) {
				return nil, fmt.Errorf("%s: nodes[%d].services[%d] %q: the services that exist so far: %s", path, i, j, svc, strings.Join(knownServices, ", "))
			}
		}
		if slices.Contains(n.Services, "status") {
			if status++; status > 1 {
				return nil, fmt.Errorf("%s: nodes[%d]: a second node with status: the node API of each listens on the host's port 10250", path, i)
			}
		}
		if slices.Contains(n.Services, "podsync") && n.Backend != "vm" {
			if podsync++; podsync > 1 {
				return nil, fmt.Errorf("%s: nodes[%d]: a second node with podsync: the nodes share the stack's containerd, and each podsync stops pods it did not start", path, i)
			}
		}
		for j, svc := range n.HostServices {
			if n.Backend != "nspawn" || svc != "volumes" || slices.Contains(n.Services, svc) {
				return nil, fmt.Errorf("%s: nodes[%d].hostServices[%d] %q: only an nspawn node may run volumes (and only volumes) on the host, and not also in the machine", path, i, j, svc)
			}
		}
		if n.Bootstrap && (n.Backend == "kubelet" || s.Standalone) {
			return nil, fmt.Errorf("%s: nodes[%d].bootstrap: only a unitlet node of a stack with an API server bootstraps", path, i)
		}
		if n.CertificateLifetime != "" {
			d, err := time.ParseDuration(n.CertificateLifetime)
			if err != nil || d < 10*time.Minute {
				return nil, fmt.Errorf("%s: nodes[%d].certificateLifetime %q: want a duration of at least 10m (the shortest the API server accepts), e.g. 10m or 24h", path, i, n.CertificateLifetime)
			}
		}
		if cp := n.ImageCredentialProvider; cp != nil {
			if n.Backend != "nspawn" || !slices.Contains(n.Services, "podsync") || s.Registry == nil {
				return nil, fmt.Errorf("%s: nodes[%d].imageCredentialProvider: only an nspawn node running podsync, in a stack with a registry, runs the harness's credential provider plugin", path, i)
			}
			if d, err := time.ParseDuration(cp.CacheDuration); err != nil || d <= 0 {
				return nil, fmt.Errorf("%s: nodes[%d].imageCredentialProvider.cacheDuration %q: want a positive duration, e.g. 30s", path, i, cp.CacheDuration)
			}
		}
		if n.Kubeadm {
			if err := checkKubeadmNode(&s, n); err != nil {
				return nil, fmt.Errorf("%s: nodes[%d].kubeadm: %v", path, i, err)
			}
		}
		if n.RootDirSize != "" {
			q, err := resource.ParseQuantity(n.RootDirSize)
			if err != nil || q.Value() < 64<<20 || (n.Backend != "process" && n.Backend != "nspawn") {
				return nil, fmt.Errorf("%s: nodes[%d].rootDirSize %q: want a size of at least 64Mi, e.g. 256Mi, on a process or nspawn node (a vm has its own disk)", path, i, n.RootDirSize)
			}
		}
		if err := checkMetrics(n); err != nil {
			return nil, fmt.Errorf("%s: nodes[%d].%v", path, i, err)
		}
		if len(n.Services) > 0 && n.Services[0] != "config" {
			return nil, fmt.Errorf("%s: nodes[%d].services: config must come first (the others read the configuration from it)", path, i)
		}
	}
	return &s, nil
}

// knownServices are the unitlet services a node may run.
var knownServices = []string{"config", "certs", "podsync", "status", "volumes", "eviction"}

func trimExt(name string) string { return name[:len(name)-len(filepath.Ext(name))] }
