package harness

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/unitlet/unitlet/shared/bus"
)

// nodeDir is a node machine's files: config, state, sockets, credentials.
func (h *Harness) nodeDir(node string) string { return filepath.Join(h.paths.root, "nodes", node) }

// NodeManifestDir is a process node's staticPodPath.
func (h *Harness) NodeManifestDir(node string) string {
	return filepath.Join(h.nodeDir(node), "manifests")
}

// NodeSocketDir is where a node's bus sockets are: a process node's, or the directory an
// nspawn machine's /run/unitlet is bound to.
func (h *Harness) NodeSocketDir(node string) string { return filepath.Join(h.nodeDir(node), "run") }

// nodeComponents are the unitlet services of a process-backend node, the machine of an
// nspawn-backend node, or the kubelet of a kubelet-backend node.
func (h *Harness) nodeComponents(n Node, f *controlPlaneFiles) []component {
	switch n.Backend {
	case "nspawn":
		out := []component{h.nspawnComponent(n, f)}
		for _, svc := range n.HostServices {
			out = append(out, h.hostService(n, svc))
		}
		return out
	case "kubelet":
		return []component{h.kubeletComponent(n, f)}
	case "vm":
		return []component{h.vmComponent(n, f)}
	}
	dir := h.nodeDir(n.Name)
	var out []component
	for _, svc := range n.Services {
		name := n.Name + "/unitlet-" + svc
		out = append(out, component{
			name: name,
			start: func() (*proc, error) {
				if err := h.prepareNode(n, f); err != nil {
					return nil, err
				}
				env := []string{"UNITLET_SOCKET_DIR=" + h.NodeSocketDir(n.Name), "UNITLET_LOG_LEVEL=debug"}
				if m := metricsEnv(n, svc, h.NodeSocketDir(n.Name)); m != "" {
					env = append(env, m)
				}
				if n.CertificateLifetime != "" && (svc == "config" || svc == "certs") {
					env = append(env, "UNITLET_CERTIFICATE_LIFETIME="+n.CertificateLifetime)
				}
				if svc == "podsync" {
					// The node's container log links, not the host's /var/log/containers.
					env = append(env, "UNITLET_CONTAINER_LOG_LINK_DIR="+filepath.Join(dir, "log-links"))
				}
				bin := filepath.Join(h.binDir(), "unitlet-"+svc)
				if svc != "config" {
					// The other services read everything from unitlet-config.
					return startProcess(h.paths.logs, n.Name+"-unitlet-"+svc, env, bin)
				}
				args := []string{
					"--config=" + filepath.Join(dir, "config.yaml"), "--config-dir=" + filepath.Join(dir, "config.d"),
					"--root-dir=" + h.nodeRootDir(n.Name), "--hostname-override=" + n.Name,
				}
				if !h.stack.Standalone {
					// A standalone node is one without --kubeconfig.
					args = append(args, "--kubeconfig="+filepath.Join(dir, "kubeconfig"), "--bootstrap-kubeconfig="+h.BootstrapKubeconfig())
				}
				if n.Bootstrap {
					// A node that bootstraps starts without a kubeconfig, each time the
					// harness starts its config: the test is the bootstrap.
					_ = os.RemoveAll(filepath.Join(dir, "kubeconfig"))
				}
				return startProcess(h.paths.logs, n.Name+"-unitlet-"+svc, env, bin, args...)
			},
			ready: func(ctx context.Context) error { return serving(ctx, h.NodeSocketDir(n.Name), svc) },
		})
	}
	return out
}

// hostService runs one of an nspawn node's services as a host process beside the machine,
// on the machine's bus sockets (its /run/unitlet is NodeSocketDir). It reads the
// configuration from the machine's unitlet-config, whose paths are the same on both sides.
func (h *Harness) hostService(n Node, svc string) component {
	return h.hostServiceFrom(n, svc, filepath.Join(h.binDir(), "unitlet-"+svc))
}

// hostServiceFrom is hostService running the binary bin (another build's, for the
// mixed-version tests).
func (h *Harness) hostServiceFrom(n Node, svc, bin string) component {
	return component{
		name: n.Name + "/unitlet-" + svc,
		start: func() (*proc, error) {
			return startProcess(h.paths.logs, n.Name+"-unitlet-"+svc, h.hostServiceEnv(n, svc), bin)
		},
		ready: func(ctx context.Context) error { return serving(ctx, h.NodeSocketDir(n.Name), svc) },
	}
}

// hostServiceEnv is the environment of a host service of n beyond the harness's own.
func (h *Harness) hostServiceEnv(n Node, svc string) []string {
	env := []string{"UNITLET_SOCKET_DIR=" + h.NodeSocketDir(n.Name), "UNITLET_LOG_LEVEL=debug"}
	if m := metricsEnv(n, svc, h.NodeSocketDir(n.Name)); m != "" {
		env = append(env, m)
	}
	return env
}

// prepareNode writes the node's configuration and credentials.
func (h *Harness) prepareNode(n Node, f *controlPlaneFiles) error {
	dir := h.nodeDir(n.Name)
	for _, d := range []string{filepath.Join(dir, "config.d"), h.NodeSocketDir(n.Name)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	endpoint := ""
	if h.stack.Runtime.Kind == "containerd" {
		endpoint = h.RuntimeEndpoint()
	}
	cfg, err := h.nodeDirsConfig(n)
	if err != nil {
		return err
	}
	cfg = nodeConfig(n, f.ca.CertFile, endpoint, h.stack.Standalone) + cfg
	if err := os.WriteFile(filepath.Join(dir, "config.yaml"), []byte(cfg), 0o644); err != nil {
		return err
	}
	if h.stack.Standalone {
		return nil // no API server: no credentials, so podsync runs static pods only
	}
	if n.Bootstrap {
		return nil // only the bootstrap token: unitlet-config writes the kubeconfig
	}
	cert, key, err := h.nodeClientCert(n, f)
	if err != nil {
		return err
	}
	return writeKubeconfig(filepath.Join(dir, "kubeconfig"), h.APIServerURL(), f.ca.CertFile, "system:node:"+n.Name, cert, key, "")
}

// nodeRootDir is the node's --root-dir: its lock, checkpoints, and the pod directories
// whose termination-message files the runtime mounts into containers.
func (h *Harness) nodeRootDir(node string) string { return filepath.Join(h.nodeDir(node), "state") }

// nodePodLogsDir is the node's podLogsDir, where the runtime writes the containers' logs.
func (h *Harness) nodePodLogsDir(node string) string {
	return filepath.Join(h.nodeDir(node), "pod-logs")
}

// mountRootDirFS loop-mounts an ext4 filesystem of n.RootDirSize on the node's root dir,
// made once in the node's directory (a sparse file). The mount goes with the stack (down
// unmounts everything under its directory; the loop device clears itself).
func (h *Harness) mountRootDirFS(n Node) error {
	dir := h.nodeRootDir(n.Name)
	if mounted, err := isMountPoint(dir); err != nil || mounted {
		return err
	}
	q := resource.MustParse(n.RootDirSize)
	img := filepath.Join(h.nodeDir(n.Name), "root-dir.ext4")
	if _, err := os.Stat(img); errors.Is(err, fs.ErrNotExist) {
		f, err := os.Create(img)
		if err != nil {
			return err
		}
		err = f.Truncate(q.Value())
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("the root dir's filesystem image %s: %w", img, err)
		}
		if out, err := exec.Command("mkfs.ext4", "-q", "-F", "-m", "0", img).CombinedOutput(); err != nil {
			return fmt.Errorf("mkfs.ext4 %s (package e2fsprogs): %v: %s", img, err, out)
		}
	}
	if out, err := exec.Command("mount", "-o", "loop", img, dir).CombinedOutput(); err != nil {
		return fmt.Errorf("mount %s on the node's root dir %s: %v: %s", img, dir, err, out)
	}
	fmt.Fprintf(h.out, "node %s: root dir on its own %s filesystem (%s)\n", n.Name, n.RootDirSize, img)
	return nil
}

// isMountPoint tells whether dir is a mount point (of this mount namespace).
func isMountPoint(dir string) (bool, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == dir {
			return true, nil
		}
	}
	return false, nil
}

// nodeSharedDirs are the node's directories that the node's services and the host (the
// stack's containerd, the tests) both use by the same path; an nspawn machine has them
// bound at that path.
func (h *Harness) nodeSharedDirs(node string) []string {
	return []string{h.nodeRootDir(node), h.nodePodLogsDir(node), h.NodeManifestDir(node), h.nodeCredsDir(node)}
}

// nodeCredsDir holds an nspawn node's kubeconfig and client certificate.
func (h *Harness) nodeCredsDir(node string) string { return filepath.Join(h.nodeDir(node), "creds") }

// nodeKubeconfig is an nspawn node's kubeconfig (--kubeconfig), in nodeCredsDir.
func (h *Harness) nodeKubeconfig(node string) string {
	return filepath.Join(h.nodeCredsDir(node), "kubeconfig")
}

// hostCgroupMount is where the host's cgroup hierarchies are mounted.
const hostCgroupMount = "/sys/fs/cgroup"

// NodeCgroupRoot is the cgroupRoot of a node that shares the host's cgroups with other
// nodes and stacks (process and nspawn nodes): its own, so that each node's podsync keeps
// only its own kubepods tree.
func (h *Harness) NodeCgroupRoot(node string) string {
	return "/unitlet-" + h.stack.Name + "-" + node
}

// ensureHostCgroup makes cgroup path (cgroupfs notation) in every hierarchy under mount,
// as an operator makes a node's cgroupRoot before its agent starts: each v1 controller's
// directory, or the v2 hierarchy. A v1 cpuset cgroup gets its parent's CPUs and memory
// nodes, without which no process could join it.
func ensureHostCgroup(mount, path string) error {
	if _, err := os.Stat(filepath.Join(mount, "cgroup.controllers")); err == nil {
		return os.MkdirAll(filepath.Join(mount, path), 0o755)
	}
	entries, err := os.ReadDir(mount)
	if err != nil {
		return fmt.Errorf("cgroup hierarchies: %w", err)
	}
	for _, e := range entries {
		dir := filepath.Join(mount, e.Name())
		if _, err := os.Stat(filepath.Join(dir, "cgroup.procs")); err != nil {
			continue // not a hierarchy (a link such as cpu,cpuacct, or a file)
		}
		target := filepath.Join(dir, path)
		if err := os.MkdirAll(target, 0o755); err != nil {
			return fmt.Errorf("make the node's cgroup root: %w", err)
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			cur, err := os.ReadFile(filepath.Join(target, f))
			if err != nil || strings.TrimSpace(string(cur)) != "" {
				continue
			}
			parent, err := os.ReadFile(filepath.Join(dir, f))
			if err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(target, f), parent, 0o644); err != nil {
				return fmt.Errorf("make the node's cgroup root: %s: %w", f, err)
			}
		}
	}
	return nil
}

// nodeDirsConfig makes the node's shared directories and returns the configuration lines
// that point at them: static pods from the node's manifests directory, pod logs under the
// node's directory (not the host's /var/log/pods: several nodes share the host); and the
// node API's port.
func (h *Harness) nodeDirsConfig(n Node) (string, error) {
	for _, d := range h.nodeSharedDirs(n.Name) {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return "", err
		}
	}
	if n.RootDirSize != "" {
		if err := h.mountRootDirFS(n); err != nil {
			return "", err
		}
	}
	root := h.NodeCgroupRoot(n.Name)
	if err := ensureHostCgroup(hostCgroupMount, root); err != nil {
		return "", err
	}
	cfg := "staticPodPath: " + h.NodeManifestDir(n.Name) + "\n" +
		"podLogsDir: " + h.nodePodLogsDir(n.Name) + "\n" +
		"fileCheckFrequency: 20s\n" +
		"cgroupRoot: " + root + "\n"
	if n.NodeAPIPort != 0 {
		// A stack beside another moves /healthz too: two below the node API, as the
		// kubelet's 10248 is to 10250.
		cfg += fmt.Sprintf("port: %d\nhealthzPort: %d\n", n.NodeAPIPort, n.NodeAPIPort-2)
	}
	return cfg, nil
}

// nodeClientCert is the node's client certificate for the API server (system:node:<name>
// in system:nodes, as the kubelet's after TLS bootstrapping), in the node's directory.
func (h *Harness) nodeClientCert(n Node, f *controlPlaneFiles) (certFile, keyFile string, err error) {
	return f.ca.issue(h.nodeDir(n.Name), "node-client", certSpec{cn: "system:node:" + n.Name, orgs: []string{"system:nodes"}, client: true})
}

// nodeConfig is the KubeletConfiguration of node n: caFile is the cluster CA's path on the
// node, endpoint the CRI endpoint ("" for none). A standalone node has no API server to
// review tokens and access: as a standalone kubelet, webhook authentication is off and
// authorization AlwaysAllow, or unitlet-status does not start.
func nodeConfig(n Node, caFile, endpoint string, standalone bool) string {
	cfg := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# Written by unitlet-harness for node %s.
clusterDomain: cluster.local
clusterDNS: [10.0.0.10]
authentication:
  x509:
    clientCAFile: %s
`, n.Name, caFile)
	if standalone {
		cfg += "  webhook:\n    enabled: false\nauthorization:\n  mode: AlwaysAllow\n"
	}
	cfg += "# These machines have cgroup v1.\nfailCgroupV1: false\n"
	if endpoint != "" {
		cfg += "containerRuntimeEndpoint: " + endpoint + "\n"
	}
	if n.Backend != "vm" {
		// Host processes and nspawn machines share the host's kernel: its swap is not the
		// tests' to change (the vm has none, and keeps unitlet's default).
		cfg += "failSwapOn: false\n"
	}
	if n.ServerTLSBootstrap {
		cfg += "serverTLSBootstrap: true\n"
	}
	if n.MaxPods != 0 {
		cfg += fmt.Sprintf("maxPods: %d\n", n.MaxPods)
	}
	if n.KubeletConfig != "" {
		cfg += "# The stack file's kubeletConfig for the node.\n" + strings.TrimRight(n.KubeletConfig, "\n") + "\n"
	}
	return cfg
}

// serving checks a unitlet service's health over its bus socket.
func serving(ctx context.Context, socketDir, service string) error {
	conn, err := bus.Dial(socketDir, service)
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return err
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("unitlet-%s: %s", service, resp.GetStatus())
	}
	return nil
}

// Exec runs a command on a node, as it would run there: for the process backend, on the
// host with the node's UNITLET_SOCKET_DIR and the unitlet binaries first on PATH; for the
// nspawn backend, inside the machine as root (nsenter into its init's namespaces).
func (h *Harness) Exec(node string, args []string) *exec.Cmd {
	switch h.nodeBackend(node) {
	case "nspawn":
		return h.execInMachine(node, args)
	case "vm":
		return h.execInVM(node, args)
	}
	bin := args[0]
	if own := filepath.Join(h.binDir(), bin); filepath.Base(bin) == bin {
		if _, err := os.Stat(own); err == nil {
			bin = own
		}
	}
	cmd := exec.Command(bin, args[1:]...)
	cmd.Env = append(os.Environ(), "UNITLET_SOCKET_DIR="+h.NodeSocketDir(node), "PATH="+h.binDir()+":"+os.Getenv("PATH"))
	return cmd
}

// HasNode reports whether the stack declares the node.
func (h *Harness) HasNode(name string) bool {
	for _, n := range h.stack.Nodes {
		if n.Name == name {
			return true
		}
	}
	return false
}

// NodeCredentials are the node's --kubeconfig and --cert-dir (the default, <root-dir>/pki)
// as its unitlet-config sees them.
func (h *Harness) NodeCredentials(node string) (kubeconfig, certDir string) {
	certDir = filepath.Join(h.nodeRootDir(node), "pki")
	for _, n := range h.stack.Nodes {
		if n.Name == node && n.Backend == "nspawn" {
			return h.nodeKubeconfig(node), certDir
		}
	}
	return filepath.Join(h.nodeDir(node), "kubeconfig"), certDir
}
