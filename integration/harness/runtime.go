package harness

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Runtime is the stack's container runtime.
type Runtime struct {
	// Kind is "containerd", or empty for none.
	Kind string `json:"kind"`
	// Version picks the containerd: empty (or "1.6") for the machine's, Debian 12's 1.6.20
	// package; "2" for ContainerdVersion, built from its Go module into the cache
	// (integration/tools/containerd) and run with runc RuncVersion, built from its module
	// (integration/tools/runc).
	Version string `json:"version"`
	// PodSubnet is the bridge network's range for pod IPs.
	PodSubnet string `json:"podSubnet"`
}

// Containerd2 is Runtime.Version for the containerd built from its module.
const Containerd2 = "2"

// containerdBinaries are the containerd, ctr and runc shim the stack runs: the machine's
// (on PATH; Shim empty: containerd finds Debian's next to it) or the module's build.
func (h *Harness) containerdBinaries() (*Containerd, error) {
	if h.stack.Runtime.Version == Containerd2 {
		return EnsureContainerd(h.repo, h.out)
	}
	return &Containerd{Containerd: "containerd", Ctr: "ctr"}, nil
}

// ctr runs the stack's containerd's ctr in the k8s.io namespace.
func (h *Harness) ctr(ctx context.Context, args ...string) *exec.Cmd {
	bin := "ctr"
	if h.stack.Runtime.Version == Containerd2 {
		bin = filepath.Join(Containerd2Dir(), "ctr")
	}
	return exec.CommandContext(ctx, bin, append([]string{"--address", h.ContainerdSocket(), "-n", "k8s.io"}, args...)...)
}

// ContainerdSocket is the CRI endpoint of the stack's containerd.
func (h *Harness) ContainerdSocket() string {
	return filepath.Join(h.paths.root, "containerd", "containerd.sock")
}

// RuntimeEndpoint is ContainerdSocket as a CRI endpoint URL.
func (h *Harness) RuntimeEndpoint() string { return "unix://" + h.ContainerdSocket() }

// TestRuntimeHandler is a second runtime handler of the stack's containerd, for
// RuntimeClasses: runc again, but keeping its containers' state under TestRuntimeRoot
// instead of runc's default root, so a test can tell which handler ran a sandbox.
const TestRuntimeHandler = "runc-test"

// TestRuntimeRoot is the runc state root of TestRuntimeHandler: a sandbox or container it
// runs has a directory <root>/k8s.io/<id> while it exists.
func (h *Harness) TestRuntimeRoot() string {
	return filepath.Join(h.paths.root, "containerd", "runc-test")
}

// containerdConfig gives the stack's containerd its own root, state and sockets, so that it
// never meets a containerd the machine runs, and the settings these machines need. bins are
// the containerd binaries: a shim and runc of their own (containerd 2.x), or none.
func (h *Harness) containerdConfig(bins *Containerd) (string, error) {
	dir := filepath.Join(h.paths.root, "containerd")
	// A user namespace's root (a host ID from 65536 up) must be able to pass through every
	// directory down to its sandbox's rootfs: the stack's root and the runtime's own are
	// traversable by all, as /var/lib/containerd is (other directories of the stack keep
	// 0700, e.g. the PKI's).
	for _, d := range []string{h.paths.root, dir} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			return "", err
		}
		if err := os.Chmod(d, 0o711); err != nil {
			return "", err
		}
	}
	cni := filepath.Join(dir, "cni")
	if err := os.MkdirAll(cni, 0o755); err != nil {
		return "", err
	}
	subnet := h.stack.Runtime.PodSubnet
	conflist := fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "unitlet-%[1]s",
  "plugins": [
    {"type": "bridge", "bridge": "ul-%[2]s", "isGateway": true, "ipMasq": false, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "%[3]s"}]], "routes": [{"dst": "0.0.0.0/0"}],
              "dataDir": "%[4]s"}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`, h.stack.Name, shortName(h.stack.Name), subnet, filepath.Join(dir, "ipam"))
	if err := os.WriteFile(filepath.Join(cni, "10-unitlet.conflist"), []byte(conflist), 0o644); err != nil {
		return "", err
	}
	s := containerdSettings{
		Root: filepath.Join(dir, "root"), State: filepath.Join(dir, "state"), Socket: h.ContainerdSocket(),
		TTRPC: filepath.Join(dir, "containerd.sock.ttrpc"), Debug: filepath.Join(dir, "debug.sock"),
		Sandbox: PauseImage, CNIConf: cni, TestHandler: TestRuntimeHandler, TestRoot: h.TestRuntimeRoot(),
		Hosts: h.hostsDir(), Shim: bins.Shim, Runc: bins.Runc,
	}
	config := s.v2()
	if h.stack.Runtime.Version == Containerd2 {
		config = s.v3()
	}
	path := filepath.Join(dir, "config.toml")
	return path, os.WriteFile(path, []byte(config), 0o644)
}

// containerdSettings are what the stack's containerd config says, in either format.
type containerdSettings struct {
	Root, State, Socket, TTRPC, Debug string
	Sandbox                           string // the sandbox (pause) image
	CNIConf                           string
	TestHandler, TestRoot             string // the second runc handler and its runc root
	Hosts                             string // registry hosts directory
	Shim                              string // the runc shim's path, or empty
	Runc                              string // the runc binary's path (v3 only)
}

// header is the part both formats share: own root, state and sockets, no metrics listener.
func (s containerdSettings) header(version int) string {
	return fmt.Sprintf(`version = %d
root = %q
state = %q

[grpc]
  address = %q
[ttrpc]
  address = %q
[debug]
  address = %q
[metrics]
  address = ""
`, version, s.Root, s.State, s.Socket, s.TTRPC, s.Debug)
}

// v2 is the config for containerd 1.6 (config version 2: one CRI plugin).
func (s containerdSettings) v2() string {
	return s.header(2) + fmt.Sprintf(`
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[1]q
  # Processes here lack CAP_SYS_RESOURCE: a negative oom_score_adj fails every sandbox.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.%[4]s]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.%[4]s.options]
        Root = %[3]q
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = %[2]q
  # Registry hosts, one directory each with its hosts.toml (the stack's registry's CA).
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = %[5]q
`, s.Sandbox, s.CNIConf, s.TestRoot, s.TestHandler, s.Hosts)
}

// v3 is the config for containerd 2.x (config version 3): the CRI plugin is split into
// images (snapshotter, the pinned sandbox image, registries) and runtime (handlers, CNI);
// each handler names the shim to run, so that no other containerd's shim on PATH is used.
func (s containerdSettings) v3() string {
	return s.header(3) + fmt.Sprintf(`
[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = %[1]q
  # Registry hosts, one directory each with its hosts.toml (the stack's registry's CA).
  [plugins.'io.containerd.cri.v1.images'.registry]
    config_path = %[5]q

[plugins.'io.containerd.cri.v1.runtime']
  # Processes here lack CAP_SYS_RESOURCE: a negative oom_score_adj fails every sandbox.
  restrict_oom_score_adj = true
  # The harness's host has cgroup v1, which containerd 2.2 and later warn about in a status
  # condition: that one is the machine's, not this config's. Any other deprecation (of a
  # config field here) still fails the runtime's readiness.
  ignore_deprecation_warnings = ["io.containerd.deprecation/cgroup-v1"]
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      runtime_path = %[6]q
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = %[7]q
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.%[4]s]
      runtime_type = "io.containerd.runc.v2"
      runtime_path = %[6]q
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.%[4]s.options]
        Root = %[3]q
        BinaryName = %[7]q
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = %[2]q
`, s.Sandbox, s.CNIConf, s.TestRoot, s.TestHandler, s.Hosts, s.Shim, s.Runc)
}

// shortName fits a bridge name's 15 characters.
func shortName(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	return s
}

// flushNeighbours forgets the host's ARP entries for the pod subnet. IPAM hands out the
// same addresses again in a new stack (its state goes with the old one); a stale entry
// holding the MAC of an earlier pod's veth makes the host's traffic to the new pod (HTTP
// and TCP probes, tests) vanish for seconds until the kernel re-resolves it.
func (h *Harness) flushNeighbours() {
	if out, err := exec.Command("ip", "-4", "neigh", "flush", "to", h.stack.Runtime.PodSubnet).CombinedOutput(); err != nil {
		fmt.Fprintf(h.out, "could not flush the ARP entries of %s: %v %s\n", h.stack.Runtime.PodSubnet, err, out)
	}
}

func (h *Harness) containerd() component {
	return component{
		name: "containerd",
		start: func() (*proc, error) {
			// runc and the CNI plugins are the machine's whichever containerd runs them.
			tools := []struct{ cmd, pkg string }{{"runc", "runc"}, {"/usr/lib/cni/bridge", "containernetworking-plugins"}}
			if h.stack.Runtime.Version != Containerd2 {
				tools = append(tools, struct{ cmd, pkg string }{"containerd", "containerd"})
			}
			for _, tool := range tools {
				if _, err := exec.LookPath(tool.cmd); err != nil {
					return nil, fmt.Errorf("%s is missing: apt-get install -y %s (or make prereqs)", tool.cmd, tool.pkg)
				}
			}
			bins, err := h.containerdBinaries()
			if err != nil {
				return nil, err
			}
			cfg, err := h.containerdConfig(bins)
			if err != nil {
				return nil, err
			}
			h.flushNeighbours()
			var env []string
			if bins.Dir != "" {
				// Its own shim first for anything that looks one up by name.
				env = []string{"PATH=" + bins.Dir + string(os.PathListSeparator) + os.Getenv("PATH")}
			}
			return startProcess(h.paths.logs, "containerd", env, bins.Containerd, "--config", cfg)
		},
		ready: func(ctx context.Context) error {
			rt, err := h.CRI()
			if err != nil {
				return err
			}
			defer rt.Close()
			st, err := rt.Runtime.Status(ctx, &runtimeapi.StatusRequest{})
			if err != nil {
				return err
			}
			for _, c := range st.GetStatus().GetConditions() {
				if !c.Status {
					return fmt.Errorf("runtime condition %s: %s", c.Type, c.Message)
				}
			}
			return nil
		},
	}
}

// importImages builds the test images and imports them into the stack's containerd.
func (h *Harness) importImages(ctx context.Context) (string, error) {
	tars, err := h.buildImages()
	if err != nil {
		return "", err
	}
	var refs []string
	for ref, tar := range tars {
		cmd := h.ctr(ctx, "images", "import", "--no-unpack=false", tar)
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("import %s: %v\n%s", ref, err, out)
		}
		refs = append(refs, ref)
	}
	return " (" + strings.Join(refs, ", ") + ")", nil
}

// CRIClient talks CRI to the stack's containerd.
type CRIClient struct {
	conn    *grpc.ClientConn
	Runtime runtimeapi.RuntimeServiceClient
	Images  runtimeapi.ImageServiceClient
}

// Close closes the connection.
func (c *CRIClient) Close() error { return c.conn.Close() }

// CRI connects to the stack's containerd over CRI v1.
func (h *Harness) CRI() (*CRIClient, error) {
	conn, err := grpc.NewClient("unix://"+h.ContainerdSocket(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{MinConnectTimeout: 2 * time.Second}))
	if err != nil {
		return nil, err
	}
	return &CRIClient{conn: conn, Runtime: runtimeapi.NewRuntimeServiceClient(conn), Images: runtimeapi.NewImageServiceClient(conn)}, nil
}

// removeAllPods stops and removes every pod sandbox of the stack's containerd.
func (h *Harness) removeAllPods(ctx context.Context) error {
	rt, err := h.CRI()
	if err != nil {
		return err
	}
	defer rt.Close()
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	pods, err := rt.Runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return err
	}
	for _, p := range pods.GetItems() {
		if _, err := rt.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: p.Id}); err != nil {
			return fmt.Errorf("stop pod %s: %w", p.GetMetadata().GetName(), err)
		}
		if _, err := rt.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: p.Id}); err != nil {
			return fmt.Errorf("remove pod %s: %w", p.GetMetadata().GetName(), err)
		}
		fmt.Fprintf(h.out, "removed pod %s/%s\n", p.GetMetadata().GetNamespace(), p.GetMetadata().GetName())
	}
	return nil
}

// killShims kills containerd shims left behind by the stack's containerd (they outlive it
// by design), with whatever they run.
func (h *Harness) killShims() {
	for _, pid := range h.shimPIDs() {
		p := &proc{Name: "containerd-shim", PID: pid}
		_ = p.stop(5 * time.Second)
		fmt.Fprintf(h.out, "stopped a containerd shim (pid %d)\n", pid)
	}
}

// ShimExecutables are the programs the live shims of the stack's containerd run. A shim
// forks before it runs runc, so a process found by its shim command line may have become
// runc by the time its executable is read: the command line is read again after the
// executable, and a process whose command line changed is not a shim.
func (h *Harness) ShimExecutables() []string {
	var out []string
	for _, pid := range h.shimPIDs() {
		if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err == nil && h.isShim(pid) {
			out = append(out, exe)
		}
	}
	return out
}

// shimPIDs are the live shims of the stack's containerd.
func (h *Harness) shimPIDs() []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid := 0
		if _, err := fmt.Sscan(e.Name(), &pid); err != nil || pid <= 1 {
			continue
		}
		if h.isShim(pid) && (&proc{PID: pid}).alive() {
			pids = append(pids, pid)
		}
	}
	return pids
}

// isShim is whether process pid's command line is a shim's of the stack's containerd.
func (h *Harness) isShim(pid int) bool {
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	args := strings.Split(string(cmdline), "\x00")
	return strings.Contains(args[0], "containerd-shim") && strings.Contains(string(cmdline), h.ContainerdSocket())
}
