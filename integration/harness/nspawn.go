package harness

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The nspawn backend boots a node as a systemd-nspawn machine: a Debian tree with systemd
// as PID 1 and unitlet installed as a package would install it (binaries in /usr/bin,
// the units of systemd/, the sysusers.d file, /etc/unitlet/config.yaml, unitlet.target
// enabled), so the units themselves are under test: socket activation, restarts, limits.
//
//   - The tree comes from debootstrap, built once into the cache (1 to 3 minutes) and
//     shared read-only by every machine: each machine's root is an overlayfs mount under
//     the node's directory (lower: the cached tree, upper: the node's changes), made fresh
//     at each start and unmounted by Down with everything else under the stack's directory.
//   - The machine shares the host's network (no --private-network): it reaches the control
//     plane on 127.0.0.1 as a process node does, and the ports its services listen on are
//     the host's (unitlet-config's /healthz on 127.0.0.1:10271), so a stack has at most one
//     nspawn node.
//   - The machine's /run/unitlet is the host directory NodeSocketDir, so host-side tests dial
//     its bus sockets as they dial a process node's.
//   - The stack's containerd runs on the host, so every path podsync hands it is the same on
//     both sides: the node's root dir (pod directories, termination-message files), pod log
//     and manifest directories are host directories bound into the machine at their own
//     path, and a drop-in per unit (unitDropIn) points the services at them and opens them
//     in the units' sandbox; the shipped units are installed unchanged. The node's client
//     certificate and kubeconfig are in /etc/unitlet.
//   - It is ready when its systemd has finished booting with no failed unit ("running";
//     "degraded" fails with the failed units named) and every service of the node answers
//     its health check over the socket, which socket-activates it.
//   - Down stops it by PID: systemd-nspawn turns SIGTERM into an orderly poweroff.

const (
	// debianSuite is the release the machines run.
	debianSuite = "bookworm"
	// nspawnTreeRecipe is the revision of the tree's recipe (the debootstrap command and
	// what is done to the tree after it): change it when the recipe changes.
	nspawnTreeRecipe = "r1"
	// nspawnPath is the PATH of commands run in a machine.
	nspawnPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
)

// unitFileMode is the mode of unitlet's unit files and drop-ins on a node: root's alone, as
// the CIS Kubernetes Benchmark asks of the kubelet's (4.1.1); systemd reads them as root.
const unitFileMode = 0o600

// nspawnPackages are installed into the tree besides minbase: systemd as init, D-Bus for
// systemctl, procps for the units' ExecReload=/bin/kill.
var nspawnPackages = []string{"systemd", "systemd-sysv", "dbus", "procps"}

// NspawnTreeDir is the cached machine tree.
func NspawnTreeDir() string {
	return filepath.Join(CacheDir(), "nspawn-"+debianSuite+"-"+nspawnTreeRecipe)
}

// hasBackend reports whether any node of the stack uses backend.
func (h *Harness) hasBackend(backend string) bool {
	for _, n := range h.stack.Nodes {
		if n.Backend == backend {
			return true
		}
	}
	return false
}

// nodeBackend is the backend of the named node, "" when the stack has no such node.
func (h *Harness) nodeBackend(name string) string {
	for _, n := range h.stack.Nodes {
		if n.Name == name {
			return n.Backend
		}
	}
	return ""
}

// ensureNspawnTree builds the machine tree into the cache unless it is there.
func (h *Harness) ensureNspawnTree() (string, error) {
	return h.ensureTree(NspawnTreeDir(), "the nspawn machine tree", "1 to 3 minutes", nspawnPackages, nil)
}

// ensureTree builds a Debian tree with packages into dir (in the cache) unless it is
// there, and checks it with check (when not nil) before putting it in place. It returns
// what it did, for the step's line.
func (h *Harness) ensureTree(dir, what, takes string, packages []string, check func(tmp string) error) (string, error) {
	done := func() bool {
		_, err := os.Stat(filepath.Join(dir, "usr", "lib", "os-release"))
		return err == nil
	}
	if done() {
		return " (cached in " + dir + ")", nil
	}
	if _, err := exec.LookPath("debootstrap"); err != nil {
		return "", errors.New("debootstrap is missing: apt-get install -y debootstrap (or make prereqs)")
	}
	if err := os.MkdirAll(CacheDir(), 0o755); err != nil {
		return "", err
	}
	// One build at a time: a second harness waits for the first and then finds the tree.
	lock, err := os.OpenFile(dir+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("lock %s: %w", lock.Name(), err)
	}
	if done() {
		return " (built by another harness, in " + dir + ")", nil
	}
	// Build beside it and rename, so that a tree in place is always complete. An interrupted
	// debootstrap leaves /proc and /sys mounted in its target.
	tmp := dir + ".tmp"
	if err := h.unmountUnder(tmp); err != nil {
		return "", err
	}
	if err := os.RemoveAll(tmp); err != nil {
		return "", err
	}
	mirror := debianMirror()
	logPath := dir + ".log"
	fmt.Fprintf(h.out, "building %s: debootstrap %s from %s (first time: %s; log %s)\n", what, debianSuite, mirror, takes, logPath)
	if err := h.debootstrap(tmp, mirror, logPath, packages); err != nil {
		_ = h.unmountUnder(tmp)
		return "", err
	}
	// The downloaded packages are not needed in the machines (~100 MB).
	debs, _ := filepath.Glob(filepath.Join(tmp, "var", "cache", "apt", "archives", "*.deb"))
	for _, d := range debs {
		if err := os.Remove(d); err != nil {
			return "", err
		}
	}
	if err := h.unmountUnder(tmp); err != nil {
		return "", err
	}
	if check != nil {
		if err := check(tmp); err != nil {
			return "", err
		}
	}
	if err := os.Rename(tmp, dir); err != nil {
		return "", err
	}
	return " (built into " + dir + ")", nil
}

// debootstrapDetail matches debootstrap's lines about one package; the rest are its phases.
var debootstrapDetail = regexp.MustCompile(`^I: (Retrieving|Validating|Extracting|Unpacking|Configuring) \S+( \S+|\.\.\.)$`)

// debootstrap runs debootstrap into dir with packages besides minbase, its output into
// logPath, and its phases to h.out.
func (h *Harness) debootstrap(dir, mirror, logPath string, packages []string) error {
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command("debootstrap", "--variant=minbase", "--include="+strings.Join(packages, ","), debianSuite, dir, mirror)
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start debootstrap: %w", err)
	}
	start := time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(logf, line)
			if !debootstrapDetail.MatchString(line) {
				fmt.Fprintf(h.out, "  [%5s] debootstrap: %s\n", time.Since(start).Round(time.Second), line)
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	err = cmd.Wait()
	pw.Close()
	<-done
	if err != nil {
		return fmt.Errorf("debootstrap %s into %s: %v; the end of its log (%s):\n%s", debianSuite, dir, err, logPath, tail(logPath, 15))
	}
	return nil
}

// debianMirror is $UNITLET_DEBIAN_MIRROR, else the mirror this machine's apt uses for
// debianSuite, else deb.debian.org.
func debianMirror() string {
	if m := os.Getenv("UNITLET_DEBIAN_MIRROR"); m != "" {
		return m
	}
	files, _ := filepath.Glob("/etc/apt/sources.list.d/*")
	files = append([]string{"/etc/apt/sources.list"}, files...)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var m string
		switch {
		case strings.HasSuffix(f, ".sources"):
			m = mirrorFromDeb822(string(b), debianSuite)
		case strings.HasSuffix(f, ".list") || f == "/etc/apt/sources.list":
			m = mirrorFromList(string(b), debianSuite)
		}
		if m != "" {
			return m
		}
	}
	return "http://deb.debian.org/debian"
}

// mirrorFromDeb822 is the first URI of a deb822 sources file's stanza of type deb that
// serves suite.
func mirrorFromDeb822(text, suite string) string {
	for _, stanza := range strings.Split(text, "\n\n") {
		fields := map[string][]string{}
		for _, line := range strings.Split(stanza, "\n") {
			if strings.HasPrefix(line, "#") {
				continue
			}
			k, v, ok := strings.Cut(line, ":")
			if ok && !strings.HasPrefix(k, " ") {
				fields[strings.ToLower(strings.TrimSpace(k))] = strings.Fields(v)
			}
		}
		if !contains(fields["types"], "deb") || !contains(fields["suites"], suite) || len(fields["uris"]) == 0 {
			continue
		}
		return fields["uris"][0]
	}
	return ""
}

// mirrorFromList is the URI of a one-line-style sources file's first deb line for suite.
func mirrorFromList(text, suite string) string {
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || f[0] != "deb" {
			continue
		}
		f = f[1:]
		if strings.HasPrefix(f[0], "[") {
			for len(f) > 0 && !strings.HasSuffix(f[0], "]") {
				f = f[1:]
			}
			if len(f) > 0 {
				f = f[1:]
			}
		}
		if len(f) >= 2 && f[1] == suite {
			return f[0]
		}
	}
	return ""
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// machineDir holds a node machine's root: the overlay's upper and work dirs and its mount.
func (h *Harness) machineDir(node string) string { return filepath.Join(h.nodeDir(node), "machine") }

// nspawnComponent is a node booted as a systemd-nspawn machine.
func (h *Harness) nspawnComponent(n Node, f *controlPlaneFiles) component {
	return component{
		name: n.Name + "/nspawn",
		start: func() (*proc, error) {
			for _, tool := range []struct{ cmd, pkg string }{{"systemd-nspawn", "systemd-container"}, {"nsenter", "util-linux"}} {
				if _, err := exec.LookPath(tool.cmd); err != nil {
					return nil, fmt.Errorf("%s is missing: apt-get install -y %s (or make prereqs)", tool.cmd, tool.pkg)
				}
			}
			if err := ensureNspawnRunDir(); err != nil {
				return nil, err
			}
			root, err := h.prepareMachine(n, f)
			if err != nil {
				return nil, fmt.Errorf("prepare the machine of %s: %w", n.Name, err)
			}
			args := []string{
				"--directory=" + root, "--machine=" + n.Name,
				// No systemd on the host to register with or to make a scope.
				"--register=no", "--keep-unit",
				"--boot", "--console=read-only", "--link-journal=no", "--setenv=SYSTEMD_COLORS=0",
				"--bind=" + h.NodeSocketDir(n.Name) + ":/run/unitlet",
			}
			// The runtime runs on the host and is handed these paths (log files, the
			// termination-message files it mounts into containers): the same path in both.
			for _, d := range h.nodeSharedDirs(n.Name) {
				args = append(args, "--bind="+d+":"+d)
			}
			if n.ImageCredentialProvider != nil {
				d := h.credentialProviderDir(n.Name)
				args = append(args, "--bind="+d+":"+d)
			}
			if n.Kubeadm {
				binds, err := h.kubeadmBinds(n)
				if err != nil {
					return nil, err
				}
				args = append(args, binds...)
			}
			// The host's cgroup hierarchies, where the stack's containerd makes the pods'
			// cgroups: podsync in the machine makes their parents there (the machine's own
			// /sys/fs/cgroup is read-only on a cgroup v1 host).
			args = append(args, "--bind="+hostCgroupMount+":"+machineHostCgroupMount)
			if h.stack.Runtime.Kind == "containerd" {
				// The config's containerRuntimeEndpoint names the stack's containerd socket:
				// its directory appears at the same path, without containerd's own mounts.
				d := filepath.Dir(h.ContainerdSocket())
				args = append(args, "--bind="+d+":"+d+":norbind")
			}
			return startProcess(h.paths.logs, n.Name+"-nspawn", nil, "systemd-nspawn", args...)
		},
		ready: func(ctx context.Context) error {
			pid1, err := h.machinePID1(n.Name)
			if err != nil {
				return err
			}
			if err := machineBooted(ctx, pid1); err != nil {
				return err
			}
			if n.Kubeadm {
				// Installed at boot, not started: kubeadm join starts it.
				return nil
			}
			for _, svc := range n.Services {
				if err := serving(ctx, h.NodeSocketDir(n.Name), svc); err != nil {
					return fmt.Errorf("unitlet-%s: %w", svc, err)
				}
			}
			return nil
		},
	}
}

// ensureNspawnRunDir mounts a tmpfs on /run/systemd/nspawn, where systemd-nspawn keeps its
// locks and mount propagation directories, unless one is there: /run is no tmpfs on these
// machines, and systemd-nspawn refuses to remove its directories from a disk file system
// ("Attempted to remove disk file system ..."), leaving them behind. It stays mounted:
// every stack shares it.
func ensureNspawnRunDir() error {
	const dir = "/run/systemd/nspawn"
	if mounted(dir) {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "mode=0755"); err != nil {
		return fmt.Errorf("mount a tmpfs on %s: %w", dir, err)
	}
	return nil
}

// mounted reports whether something is mounted on dir.
func mounted(dir string) bool {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == dir {
			return true
		}
	}
	return false
}

// prepareMachine makes the node's machine root afresh, an overlay over the cached tree, and
// installs unitlet into it. It returns the root.
func (h *Harness) prepareMachine(n Node, f *controlPlaneFiles) (string, error) {
	dir := h.machineDir(n.Name)
	// A machine that was stopped leaves its overlay mounted.
	if err := h.unmountUnder(dir); err != nil {
		return "", err
	}
	if err := os.RemoveAll(dir); err != nil {
		return "", err
	}
	upper, work, root := filepath.Join(dir, "upper"), filepath.Join(dir, "work"), filepath.Join(dir, "rootfs")
	for _, d := range []string{upper, work, root, h.NodeSocketDir(n.Name)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return "", err
		}
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", NspawnTreeDir(), upper, work)
	if err := syscall.Mount("overlay", root, "overlay", 0, opts); err != nil {
		return "", fmt.Errorf("mount the overlay on %s (%s): %w", root, opts, err)
	}

	machineID := make([]byte, 16)
	if _, err := rand.Read(machineID); err != nil {
		return "", err
	}
	if n.Kubeadm {
		// unitlet from its packages, for kubeadm to configure and start (kubeadmnode.go).
		return root, h.prepareKubeadmMachine(n, root, machineID)
	}
	ca, err := os.ReadFile(f.ca.CertFile)
	if err != nil {
		return "", err
	}
	const caPath = "/etc/unitlet/pki/ca.crt"
	endpoint := ""
	if h.stack.Runtime.Kind == "containerd" {
		endpoint = h.RuntimeEndpoint()
	}
	dirsConfig, err := h.nodeDirsConfig(n)
	if err != nil {
		return "", err
	}
	files := []machineFile{
		{path: "/etc/hostname", mode: 0o644, data: []byte(n.Name + "\n")},
		{path: "/etc/machine-id", mode: 0o444, data: []byte(hex.EncodeToString(machineID) + "\n")},
		{path: "/usr/bin/unitletctl", mode: 0o755, from: filepath.Join(h.binDir(), "unitletctl")},
		{path: "/usr/lib/sysusers.d/unitlet.conf", mode: 0o644, from: filepath.Join(h.repo, "deploy", "sysusers.d", "unitlet.conf")},
		// The client CA and the configuration root's alone (CIS 4.1.7, 4.1.9).
		{path: caPath, mode: 0o600, data: ca},
		{path: "/etc/unitlet/config.yaml", mode: 0o600, data: []byte(nodeConfig(n, caPath, endpoint, h.stack.Standalone) + dirsConfig)},
	}
	for _, svc := range n.Services {
		files = append(files, machineFile{path: "/usr/bin/unitlet-" + svc, mode: 0o755, from: filepath.Join(h.binDir(), "unitlet-"+svc)})
		files = append(files, machineFile{path: "/etc/systemd/system/unitlet-" + svc + ".service.d/harness.conf", mode: unitFileMode, data: []byte(h.unitDropIn(n, svc))})
	}
	if n.ImageCredentialProvider != nil {
		plugin, config, err := h.credentialProviderFiles(n)
		if err != nil {
			return "", err
		}
		files = append(files,
			machineFile{path: machineCredentialPlugin, mode: 0o755, data: plugin},
			// It holds the registry's password, as the configuration root's other files.
			machineFile{path: machineCredentialProviderConfig, mode: 0o600, data: config})
	}
	switch {
	case h.stack.Standalone:
	case n.Bootstrap:
		// The bootstrap token alone: unitlet-config in the machine writes the kubeconfig.
		if err := h.writeNodeBootstrapCredentials(n, f); err != nil {
			return "", err
		}
	default:
		// The node's credentials, as the kubelet's kubeconfig after TLS bootstrapping, in a
		// directory bound at its host path: the node's host services read them too.
		if err := h.writeNodeCredentials(n, f); err != nil {
			return "", err
		}
	}
	units, err := filepath.Glob(filepath.Join(h.repo, "systemd", "*"))
	if err != nil {
		return "", err
	}
	for _, u := range units {
		// The target and the units of the node's services: a unit whose binary is not
		// installed would restart forever.
		base := strings.TrimSuffix(filepath.Base(u), filepath.Ext(u))
		switch ext := filepath.Ext(u); {
		case ext == ".target", (ext == ".service" || ext == ".socket") && slices.Contains(n.Services, strings.TrimPrefix(base, "unitlet-")):
			files = append(files, machineFile{path: "/etc/systemd/system/" + filepath.Base(u), mode: unitFileMode, from: u})
		}
	}
	if err := writeMachineFiles(root, files); err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Join(root, "etc", "unitlet", "config.d"), 0o755); err != nil {
		return "", err
	}
	// systemctl enable unitlet.target: its [Install] says WantedBy=multi-user.target.
	wants := filepath.Join(root, "etc", "systemd", "system", "multi-user.target.wants")
	if err := os.MkdirAll(wants, 0o755); err != nil {
		return "", err
	}
	if err := os.Symlink("/etc/systemd/system/unitlet.target", filepath.Join(wants, "unitlet.target")); err != nil {
		return "", err
	}
	return root, nil
}

// machineFile is a file put into a machine's root.
type machineFile struct {
	path string // in the machine
	mode os.FileMode
	from string // a host file, or
	data []byte // the content
}

// writeMachineFiles writes files into the machine root root, each with its mode whatever
// the umask.
func writeMachineFiles(root string, files []machineFile) error {
	for _, fl := range files {
		data := fl.data
		if fl.from != "" {
			var err error
			if data, err = os.ReadFile(fl.from); err != nil {
				return err
			}
		}
		p := filepath.Join(root, fl.path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		_ = os.Remove(p)
		if err := os.WriteFile(p, data, fl.mode); err != nil {
			return err
		}
		// The mode as given, whatever the umask.
		if err := os.Chmod(p, fl.mode); err != nil {
			return err
		}
	}
	return nil
}

// writeNodeCredentials puts node n's client certificate, key, the cluster CA and a
// kubeconfig using them in its credentials directory.
func (h *Harness) writeNodeCredentials(n Node, f *controlPlaneFiles) error {
	dir := h.nodeCredsDir(n.Name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	cert, key, err := h.nodeClientCert(n, f)
	if err != nil {
		return err
	}
	for src, dst := range map[string]string{cert: "node-client.crt", key: "node-client.key", f.ca.CertFile: "ca.crt"} {
		b, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, dst), b, 0o600); err != nil {
			return err
		}
	}
	return writeKubeconfig(h.nodeKubeconfig(n.Name), h.APIServerURL(), filepath.Join(dir, "ca.crt"), "system:node:"+n.Name,
		filepath.Join(dir, "node-client.crt"), filepath.Join(dir, "node-client.key"), "")
}

// writeNodeBootstrapCredentials puts the cluster CA and a bootstrap kubeconfig with the
// stack's bootstrap token in node n's credentials directory. A kubeconfig that an earlier
// boot of the machine bootstrapped stays, as on a rebooted node.
func (h *Harness) writeNodeBootstrapCredentials(n Node, f *controlPlaneFiles) error {
	dir := h.nodeCredsDir(n.Name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	ca, err := os.ReadFile(f.ca.CertFile)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), ca, 0o600); err != nil {
		return err
	}
	token, err := h.bootstrapToken()
	if err != nil {
		return err
	}
	return writeKubeconfig(h.nodeBootstrapKubeconfig(n.Name), h.APIServerURL(), filepath.Join(dir, "ca.crt"), "kubelet-bootstrap", "", "", token)
}

// nodeBootstrapKubeconfig is a bootstrapping nspawn node's --bootstrap-kubeconfig.
func (h *Harness) nodeBootstrapKubeconfig(node string) string {
	return filepath.Join(h.nodeCredsDir(node), "bootstrap.kubeconfig")
}

// machineHostCgroupMount is where an nspawn machine sees the host's cgroup hierarchies.
const machineHostCgroupMount = "/run/unitlet-host-cgroup"

// unitDropIn is the harness's drop-in for the unit of service svc in node n's machine. The
// shipped units stay as they are; the drop-in points the service at the node's directories
// on the host (bound into the machine at the same path, see nspawnComponent) and lets it
// reach them through its sandbox, gives it the harness's settings, and copies its log to
// the machine's console, which is the nspawn component's log.
func (h *Harness) unitDropIn(n Node, svc string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Written by unitlet-harness for node %s.\n[Service]\n", n.Name)
	b.WriteString("Environment=UNITLET_LOG_LEVEL=debug\n")
	b.WriteString(metricsDropIn(n, svc))
	rw := h.nodeRootDir(n.Name)
	// A kubeadm node's unitlet-config runs with the kubelet's command line under kubeadm
	// (unitlet-kubeadm's drop-in) and its root dir from /etc/default/kubelet.
	if svc == "config" && !n.Kubeadm {
		fmt.Fprintf(&b, "Environment=UNITLET_ROOT_DIR=%s\n", h.nodeRootDir(n.Name))
		if !h.stack.Standalone {
			fmt.Fprintf(&b, "Environment=UNITLET_KUBECONFIG=%s\n", h.nodeKubeconfig(n.Name))
		}
		if n.ImageCredentialProvider != nil {
			fmt.Fprintf(&b, "Environment=UNITLET_IMAGE_CREDENTIAL_PROVIDER_CONFIG=%s\n", machineCredentialProviderConfig)
			fmt.Fprintf(&b, "Environment=UNITLET_IMAGE_CREDENTIAL_PROVIDER_BIN_DIR=%s\n", machineCredentialProviderBinDir)
		}
		if n.Bootstrap {
			// TLS bootstrap writes the kubeconfig beside the bootstrap kubeconfig.
			fmt.Fprintf(&b, "Environment=UNITLET_BOOTSTRAP_KUBECONFIG=%s\n", h.nodeBootstrapKubeconfig(n.Name))
			rw += " " + h.nodeCredsDir(n.Name)
		}
	}
	if n.CertificateLifetime != "" && (svc == "config" || svc == "certs") {
		fmt.Fprintf(&b, "Environment=UNITLET_CERTIFICATE_LIFETIME=%s\n", n.CertificateLifetime)
	}
	// The node's directories are under the stack's directory, by default in /var/tmp, which
	// PrivateTmp= would replace with an empty one; ProtectSystem=strict makes them read-only.
	b.WriteString("PrivateTmp=no\n")
	// Every service may write the root dir, as the units' StateDirectory=; podsync makes the
	// pods' log directories too.
	if svc == "podsync" {
		rw += " " + h.nodePodLogsDir(n.Name) + " " + machineHostCgroupMount
		if n.ImageCredentialProvider != nil {
			// The plugin podsync runs records its runs there.
			rw += " " + h.credentialProviderDir(n.Name)
		}
	}
	// The pods' cgroups are the host's, where the stack's containerd makes them: podsync
	// makes their parents there, eviction and status (the summary, /metrics/cadvisor) read
	// them (read-only, as their units have the machine's own /sys/fs/cgroup).
	if svc == "podsync" || svc == "eviction" || svc == "status" {
		fmt.Fprintf(&b, "Environment=UNITLET_CGROUP_MOUNT=%s\n", machineHostCgroupMount)
	}
	if svc == "status" {
		// In an nspawn machine, journalctl run under ProtectKernelTunables= or
		// ProtectControlGroups= (each alone, tried one by one) lists the journal's units
		// but reads no entry ("-- No entries --"), so the node log query
		// (TestNodeLogQuery*) could not be tested here under the shipped unit's sandbox.
		// On a real kernel the shipped unit reads the journal as it is
		// (vmtest's TestJournalReadableUnderTheStatusUnitsSandbox).
		b.WriteString("ProtectKernelTunables=no\nProtectControlGroups=no\n")
	}
	fmt.Fprintf(&b, "ReadWritePaths=%s\n", rw)
	b.WriteString("StandardOutput=journal+console\nStandardError=journal+console\n")
	return b.String()
}

// machinePID1 is the host PID of the node machine's init (its systemd).
func (h *Harness) machinePID1(node string) (int, error) {
	p := h.loadState().Procs[node+"/nspawn"]
	if !p.alive() {
		return 0, fmt.Errorf("the machine of node %s is not running", node)
	}
	return containerInit(p.PID)
}

// containerInit is the host PID of the init of the container systemd-nspawn runs as
// nspawnPID: its child that is PID 1 in its own PID namespace.
func containerInit(nspawnPID int) (int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil {
			continue
		}
		var ppid int
		var nspid []string
		for _, line := range strings.Split(string(b), "\n") {
			k, v, _ := strings.Cut(line, ":")
			switch k {
			case "PPid":
				ppid, _ = strconv.Atoi(strings.TrimSpace(v))
			case "NSpid":
				nspid = strings.Fields(v)
			}
		}
		if ppid == nspawnPID && len(nspid) > 1 && nspid[len(nspid)-1] == "1" {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("systemd-nspawn (pid %d) has no container init yet", nspawnPID)
}

// hostPID is the host pid of the process whose pid is pid in the pid namespace of the
// machine whose init is pid1.
func hostPID(pid1, pid int) (int, error) {
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid1))
	if err != nil {
		return 0, err
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	want := strconv.Itoa(pid)
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		if l, err := os.Readlink(filepath.Join("/proc", e.Name(), "ns", "pid")); err != nil || l != ns {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, _ := strings.Cut(line, ":"); k == "NSpid" {
				if f := strings.Fields(v); len(f) > 1 && f[len(f)-1] == want {
					return strconv.Atoi(e.Name())
				}
			}
		}
	}
	return 0, fmt.Errorf("no process is pid %d in the machine of init %d", pid, pid1)
}

// machineBooted checks that the machine's systemd has finished booting with no failed unit.
func machineBooted(ctx context.Context, pid1 int) error {
	out, _ := inMachine(ctx, pid1, "systemctl", "is-system-running").Output()
	switch st := strings.TrimSpace(string(out)); st {
	case "running":
		return nil
	case "degraded":
		failed, _ := inMachine(ctx, pid1, "systemctl", "--failed", "--plain", "--no-legend").Output()
		return fmt.Errorf("the machine's systemd is degraded; failed units:\n%s", failed)
	default:
		return fmt.Errorf("the machine's systemd is %q", st)
	}
}

// inMachine is a command run in every namespace of the machine whose init is pid1, as root,
// with a plain environment.
func inMachine(ctx context.Context, pid1 int, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "nsenter", append([]string{"--target=" + strconv.Itoa(pid1), "--all", "--"}, args...)...)
	cmd.Env = []string{"PATH=" + nspawnPath, "HOME=/root", "LANG=C.UTF-8"}
	return cmd
}

// execInMachine is Exec for an nspawn node: the command runs inside the machine.
func (h *Harness) execInMachine(node string, args []string) *exec.Cmd {
	pid1, err := h.machinePID1(node)
	cmd := inMachine(context.Background(), pid1, args...)
	if err != nil {
		cmd.Err = err
	}
	return cmd
}
