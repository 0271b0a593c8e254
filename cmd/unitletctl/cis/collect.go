package cis

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"

	configv1 "github.com/unitlet/unitlet/proto/unitlet/config/v1"
	"github.com/unitlet/unitlet/shared/nodeconfig"
)

// System is the node as Collect reads it; Host is the node Collect runs on.
type System interface {
	// NodeConfig is the configuration unitlet-config serves.
	NodeConfig(ctx context.Context) (*configv1.NodeConfig, error)
	// Systemctl runs systemctl with args and returns its output.
	Systemctl(ctx context.Context, args ...string) (string, error)
	// Stat is path as stat sees it, following symbolic links.
	Stat(path string) File
	ReadFile(path string) ([]byte, error)
	// RegularFiles are the regular files in dir (not following symbolic links).
	RegularFiles(dir string) ([]string, error)
	// Container is the container the node runs in (systemd-detect-virt --container), "".
	Container(ctx context.Context) string
	// ProbeNodeAPI asks the node API at address as a client (see NodeAPI).
	ProbeNodeAPI(ctx context.Context, address string) NodeAPI
	// ListeningTCP are the local addresses of the TCP sockets process pid listens on.
	ListeningTCP(pid int) ([]string, error)
	// ProbeHTTP asks address for each of paths with no credentials, over TLS when the
	// listener speaks it.
	ProbeHTTP(ctx context.Context, address string, paths []string) HTTPProbe
}

// protectedPages are what a client without credentials must not get from any listener of
// the node agent: the kubelet serves them on the node API alone, after authentication and
// authorization. unitlet's services have served /metrics, /metrics/probes and /configz
// on their own listeners; the rest are the node API's.
var protectedPages = []string{
	"/metrics", "/metrics/probes", "/metrics/cadvisor", "/metrics/resource", "/configz",
	"/pods", "/runningpods/", "/stats/summary", "/spec", "/logs/", "/debug/pprof/",
}

// proxyKubeconfigPaths are where kube-proxy's kubeconfig usually is.
var proxyKubeconfigPaths = []string{
	"/etc/kubernetes/proxy.conf",
	"/etc/kubernetes/kube-proxy.conf",
	"/var/lib/kube-proxy/kubeconfig.conf",
	"/var/lib/kube-proxy/kubeconfig",
	"/etc/kubernetes/kubelet/kube-proxy.kubeconfig",
}

// Collect reads the node through sys. What cannot be read is returned as problems; the
// checks that need it then fail.
func Collect(ctx context.Context, sys System) (*Node, []string) {
	n := &Node{Files: map[string]File{}, Sysctls: map[string]string{}}
	var problems []string
	problem := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }

	// The configuration in effect.
	if nc, err := sys.NodeConfig(ctx); err != nil {
		problem("the configuration from unitlet-config: %v", err)
	} else if c, err := nodeconfig.Decode(nc); err != nil {
		problem("%v", err)
	} else {
		n.Config = c.KubeletConfiguration
		n.Name, n.Hostname = c.Node.GetName(), c.Node.GetHostname()
		n.Kubeconfig, n.BootstrapKubeconfig, n.CertDir = c.Paths.GetKubeconfig(), c.Paths.GetBootstrapKubeconfig(), c.Paths.GetCertDir()
		for _, s := range nc.GetSources() {
			if k := s.GetKind(); k == configv1.SourceKind_SOURCE_KIND_FILE || k == configv1.SourceKind_SOURCE_KIND_DROP_IN {
				n.ConfigFiles = append(n.ConfigFiles, s.GetName())
			}
		}
	}

	// The units of unitlet.target.
	units, err := collectUnits(ctx, sys)
	if err != nil {
		problem("the units of unitlet.target: %v", err)
	}
	n.Units = units
	for _, u := range units {
		if u.Name == "unitlet-config.service" {
			n.ConfigProcess = configProcess(ctx, sys, u)
		}
	}
	if n.ConfigProcess.From == "" {
		problem("unitlet-config.service is not loaded: its command line is unknown")
	}

	// The files the kubeconfig names, the cert dir's, kube-proxy's.
	if n.Kubeconfig != "" {
		files, err := kubeconfigFiles(sys, n.Kubeconfig)
		if err != nil {
			problem("the files named by %s: %v", n.Kubeconfig, err)
		}
		n.KubeconfigFiles = files
	}
	if n.CertDir != "" {
		files, err := sys.RegularFiles(n.CertDir)
		if err != nil {
			problem("the cert dir: %v", err)
		}
		n.CertDirFiles = files
	}
	for _, p := range proxyKubeconfigPaths {
		if sys.Stat(p).Exists {
			n.ProxyKubeconfigs = append(n.ProxyKubeconfigs, p)
		}
	}

	// Every file a check looks at, stat once.
	paths := append(append(append(append(unitFiles(n), n.ConfigFiles...), n.KubeconfigFiles...), n.CertDirFiles...), n.ProxyKubeconfigs...)
	paths = append(paths, n.Kubeconfig, n.BootstrapKubeconfig)
	if n.Config != nil {
		paths = append(paths, n.Config.Authentication.X509.ClientCAFile, n.Config.TLSCertFile, n.Config.TLSPrivateKeyFile)
	}
	for _, p := range paths {
		if p != "" {
			n.Files[p] = sys.Stat(p)
		}
	}

	n.Container = sys.Container(ctx)
	for k := range kernelDefaults {
		b, err := sys.ReadFile(filepath.Join("/proc/sys", strings.ReplaceAll(k, ".", "/")))
		if err != nil {
			problem("sysctl %s: %v", k, err)
			continue
		}
		n.Sysctls[k] = strings.TrimSpace(string(b))
	}

	if n.Config != nil {
		n.NodeAPI = sys.ProbeNodeAPI(ctx, nodeAPIAddress(n.Config.Address, n.Config.Port))
	} else {
		n.NodeAPI = NodeAPI{Err: "the configuration is unknown"}
	}

	// Every TCP socket of every running service of unitlet.target, asked without credentials.
	for _, u := range units {
		if !strings.HasSuffix(u.Name, ".service") || u.MainPID <= 0 {
			continue
		}
		addrs, err := sys.ListeningTCP(u.MainPID)
		if err != nil {
			problem("the TCP sockets of %s (pid %d): %v", u.Name, u.MainPID, err)
			n.Listeners = append(n.Listeners, Listener{Unit: u.Name, PID: u.MainPID, Probe: HTTPProbe{Err: "its sockets could not be read: " + err.Error()}})
			continue
		}
		for _, a := range addrs {
			n.Listeners = append(n.Listeners, Listener{Unit: u.Name, PID: u.MainPID, Address: a, Probe: sys.ProbeHTTP(ctx, dialAddress(a), protectedPages)})
		}
	}
	return n, problems
}

// dialAddress is the address a client on the node dials for a socket bound to addr:
// loopback when it listens on every address.
func dialAddress(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return addr
	}
	return nodeAPIAddress(host, int32(p))
}

// nodeAPIAddress is the address a client on the node dials for the node API bound to
// address:port: loopback when it listens on every address.
func nodeAPIAddress(address string, port int32) string {
	if port == 0 {
		port = 10250
	}
	ip := net.ParseIP(address)
	switch {
	case address == "" || (ip != nil && ip.IsUnspecified() && ip.To4() != nil):
		address = "127.0.0.1"
	case ip != nil && ip.IsUnspecified():
		address = "::1"
	}
	return net.JoinHostPort(address, strconv.Itoa(int(port)))
}

// unitProps are the properties read of each unit.
var unitProps = []string{"Id", "FragmentPath", "DropInPaths", "ActiveState", "MainPID"}

// collectUnits reads unitlet.target and every unit it wants or that is part of it.
func collectUnits(ctx context.Context, sys System) ([]Unit, error) {
	out, err := sys.Systemctl(ctx, "show", "-p", "Wants", "-p", "ConsistsOf", "-p", "LoadState", "unitlet.target")
	if err != nil {
		return nil, err
	}
	props := parseShow(out)
	if len(props) == 0 || props[0]["LoadState"] != "loaded" {
		return nil, fmt.Errorf("unitlet.target is not loaded")
	}
	names := map[string]bool{"unitlet.target": true}
	for _, k := range []string{"Wants", "ConsistsOf"} {
		for _, u := range strings.Fields(props[0][k]) {
			if strings.HasPrefix(u, "unitlet-") {
				names[u] = true
			}
		}
	}
	args := []string{"show"}
	for _, p := range unitProps {
		args = append(args, "-p", p)
	}
	var sorted []string
	for u := range names {
		sorted = append(sorted, u)
	}
	sort.Strings(sorted)
	out, err = sys.Systemctl(ctx, append(args, sorted...)...)
	if err != nil {
		return nil, err
	}
	var units []Unit
	for _, p := range parseShow(out) {
		u := Unit{Name: p["Id"], FragmentPath: p["FragmentPath"], DropIns: strings.Fields(p["DropInPaths"]), ActiveState: p["ActiveState"]}
		u.MainPID, _ = strconv.Atoi(p["MainPID"])
		if u.FragmentPath == "" {
			// Wanted but not installed: nothing to examine.
			continue
		}
		units = append(units, u)
	}
	return units, nil
}

// parseShow splits systemctl show's output into one map per unit (blocks separated by an
// empty line).
func parseShow(out string) []map[string]string {
	var blocks []map[string]string
	cur := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if strings.TrimSpace(line) == "" {
			if len(cur) > 0 {
				blocks = append(blocks, cur)
				cur = map[string]string{}
			}
			continue
		}
		if k, v, ok := strings.Cut(line, "="); ok {
			cur[k] = v
		}
	}
	if len(cur) > 0 {
		blocks = append(blocks, cur)
	}
	return blocks
}

// configProcess is unitlet-config's command line and environment: the running process's
// when there is one, else what its unit would start.
func configProcess(ctx context.Context, sys System, u Unit) Process {
	if u.MainPID > 0 {
		proc := fmt.Sprintf("/proc/%d", u.MainPID)
		args, aerr := sys.ReadFile(proc + "/cmdline")
		env, eerr := sys.ReadFile(proc + "/environ")
		if aerr == nil && eerr == nil {
			return Process{From: proc, Args: splitNUL(args), Env: splitNUL(env)}
		}
	}
	out, err := sys.Systemctl(ctx, "show", "-p", "ExecStart", "-p", "Environment", u.Name)
	if err != nil {
		return Process{}
	}
	p := parseShow(out)
	if len(p) == 0 {
		return Process{}
	}
	return Process{From: "unit " + u.Name + " (not running)", Args: execStartArgv(p[0]["ExecStart"]), Env: strings.Fields(p[0]["Environment"])}
}

func splitNUL(b []byte) []string {
	var out []string
	for _, s := range strings.Split(string(b), "\x00") {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

// execStartArgv is the argv of systemctl show's ExecStart value
// ("{ path=... ; argv[]=/bin/x --a ; ignore_errors=no ; ... }").
func execStartArgv(v string) []string {
	_, rest, ok := strings.Cut(v, "argv[]=")
	if !ok {
		return nil
	}
	argv, _, _ := strings.Cut(rest, " ;")
	return strings.Fields(argv)
}

// kubeconfigFiles are the files a kubeconfig names: certificate authorities, client
// certificates and keys, relative paths taken from the kubeconfig's directory.
func kubeconfigFiles(sys System, path string) ([]string, error) {
	b, err := sys.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var kc struct {
		Clusters []struct {
			Cluster struct {
				CA string `json:"certificate-authority"`
			} `json:"cluster"`
		} `json:"clusters"`
		Users []struct {
			User struct {
				Cert string `json:"client-certificate"`
				Key  string `json:"client-key"`
			} `json:"user"`
		} `json:"users"`
	}
	if err := yaml.Unmarshal(b, &kc); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	var files []string
	add := func(p string) {
		if p == "" {
			return
		}
		if !filepath.IsAbs(p) {
			p = filepath.Join(filepath.Dir(path), p)
		}
		files = append(files, p)
	}
	for _, c := range kc.Clusters {
		add(c.Cluster.CA)
	}
	for _, u := range kc.Users {
		add(u.User.Cert)
		add(u.User.Key)
	}
	return files, nil
}
