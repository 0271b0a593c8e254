package harness

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// A kubeadm node (Node.Kubeadm) is an nspawn machine set up as an administrator sets up a
// host before `kubeadm join` (docs/install.md, "kubeadm"): unitlet's packages, the
// unitlet-kubeadm package among them, installed with apt at boot by
// unitlet-harness-install.service, and kubeadm in /usr/bin. The harness adds what only this
// harness needs, as it does on its other nspawn nodes: a drop-in per unit that opens the
// node's host directories (shared with the stack's containerd on the host) in the units'
// sandbox and points the services at the host's cgroups, and /etc/default/kubelet giving
// unitlet-config the node's root dir there (KUBELET_EXTRA_ARGS=--root-dir, which it reads
// as the kubelet's unit does). Nothing is configured or started: kubeadm join writes
// config.yaml, kubeadm-flags.env and bootstrap-kubelet.conf and restarts kubelet.service.
// The KubeletConfiguration fields this machine needs are KubeadmKubeletConfig's, for the
// kubelet-config ConfigMap that kubeadm's upload-config phase makes.

// kubeadmDebName is the package that gives kubeadm its kubelet.service.
const kubeadmDebName = "unitlet-kubeadm"

// checkKubeadmNode checks a kubeadm node of stack s.
func checkKubeadmNode(s *Stack, n Node) error {
	switch {
	case n.Backend != "nspawn":
		return fmt.Errorf("backend %q: only an nspawn node installs unitlet for kubeadm", n.Backend)
	case s.Standalone || s.Runtime.Kind != "containerd":
		return errors.New("a kubeadm node joins the stack's control plane and runs its pods on the stack's containerd: the stack needs both")
	case !slices.Equal(slices.Sorted(slices.Values(n.Services)), slices.Sorted(slices.Values(knownServices))):
		return fmt.Errorf("services %v: a kubeadm node installs the unitlet meta-package, which brings every service: list all of %s", n.Services, strings.Join(knownServices, ", "))
	case n.Bootstrap || n.CertificateLifetime != "" || n.ServerTLSBootstrap || n.MaxPods != 0 || n.KubeletConfig != "" ||
		n.NodeAPIPort != 0 || n.ImageCredentialProvider != nil || len(n.HostServices) > 0 || len(n.Metrics) > 0:
		return errors.New("kubeadm writes the node's configuration and credentials: leave bootstrap, certificateLifetime, serverTLSBootstrap, maxPods, kubeletConfig, nodeAPIPort, imageCredentialProvider, hostServices and metrics unset (the test's kubeadm configuration sets what it needs)")
	}
	return nil
}

// kubeadmMachineDebDir is where a kubeadm node's machine carries unitlet's packages.
const kubeadmMachineDebDir = "/var/cache/unitlet-harness/debs"

// kubeadmInstallScript installs unitlet's packages as docs/install.md's kubeadm section does
// (`apt install ./dist/unitlet*.deb`), and starts nothing. Recommends are left out: the
// runtime they name (containerd) is the stack's, on the host, and the machine has no
// package lists to take it from.
const kubeadmInstallScript = `#!/bin/sh
# Written by unitlet-harness: install unitlet from its Debian packages for kubeadm.
set -eu
cd ` + kubeadmMachineDebDir + `
DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ./*.deb
`

// kubeadmNodeDebs are the packages of a kubeadm node: a vm node's (vmDebs: each holding
// the binary the stack runs) and unitlet-kubeadm.
func (h *Harness) kubeadmNodeDebs(n Node) ([]string, error) {
	debs, err := h.vmDebs(n)
	if err != nil {
		return nil, err
	}
	dist := DistDir(h.repo)
	found, err := filepath.Glob(filepath.Join(dist, kubeadmDebName+"_*.deb"))
	if err != nil {
		return nil, err
	}
	if len(found) != 1 {
		return nil, fmt.Errorf("%s: %d packages %s_*.deb, want one: run `make deb` (kubeadm node %s installs it)", dist, len(found), kubeadmDebName, n.Name)
	}
	return append(debs, found[0]), nil
}

// prepareKubeadmMachine puts into the machine root root of kubeadm node n its identity,
// unitlet's packages and what installs them at boot, kubeadm, and the harness's drop-ins.
func (h *Harness) prepareKubeadmMachine(n Node, root string, machineID []byte) error {
	debs, err := h.kubeadmNodeDebs(n)
	if err != nil {
		return err
	}
	kubeadm := KubeadmBinary()
	if _, err := os.Stat(kubeadm); err != nil {
		return fmt.Errorf("kubeadm for node %s: %w (unitlet-harness build, or make harness-binaries, builds it)", n.Name, err)
	}
	// The node's host directories and cgroup root, as for the other nspawn nodes.
	if _, err := h.nodeDirsConfig(n); err != nil {
		return err
	}
	files := []machineFile{
		{path: "/etc/hostname", mode: 0o644, data: []byte(n.Name + "\n")},
		// As Debian's installer writes it (the debootstrap tree has none): a host-network
		// pod's containers get this file, kubeadm init's static pods among them.
		{path: "/etc/hosts", mode: 0o644, data: []byte("127.0.0.1\tlocalhost\n127.0.1.1\t" + n.Name + "\n\n::1\tlocalhost ip6-localhost ip6-loopback\nff02::1\tip6-allnodes\nff02::2\tip6-allrouters\n")},
		{path: "/etc/machine-id", mode: 0o444, data: []byte(fmt.Sprintf("%x\n", machineID))},
		{path: "/usr/bin/kubeadm", mode: 0o755, from: kubeadm},
		{path: "/usr/local/sbin/unitlet-harness-install", mode: 0o755, data: []byte(kubeadmInstallScript)},
		{path: "/etc/systemd/system/" + VMInstallUnit, mode: 0o644, data: []byte(vmOneshotUnit("install unitlet from its Debian packages for kubeadm",
			"After=local-fs.target\n", "/usr/local/sbin/unitlet-harness-install"))},
		// The kubelet's own file for an administrator's flags, which unitlet-kubeadm's
		// drop-in reads (--kubelet-env-file=/etc/default/kubelet).
		{path: "/etc/default/kubelet", mode: 0o644, data: []byte("# Written by unitlet-harness: the node's root dir, which the stack's containerd shares.\n" +
			"KUBELET_EXTRA_ARGS=--root-dir=" + h.nodeRootDir(n.Name) + "\n")},
	}
	for _, deb := range debs {
		files = append(files, machineFile{path: kubeadmMachineDebDir + "/" + filepath.Base(deb), mode: 0o644, from: deb})
	}
	for _, svc := range n.Services {
		files = append(files, machineFile{path: "/etc/systemd/system/unitlet-" + svc + ".service.d/harness.conf", mode: unitFileMode, data: []byte(h.unitDropIn(n, svc))})
	}
	if err := writeMachineFiles(root, files); err != nil {
		return err
	}
	wants := filepath.Join(root, "etc", "systemd", "system", "multi-user.target.wants")
	if err := os.MkdirAll(wants, 0o755); err != nil {
		return err
	}
	return os.Symlink("/etc/systemd/system/"+VMInstallUnit, filepath.Join(wants, VMInstallUnit))
}

// KubeadmKubeletConfig is the KubeletConfiguration YAML (fields only, no kind) that kubeadm
// node node needs on this harness, to go into the KubeletConfiguration document of
// kubeadm's configuration: the cgroupfs driver and the node's cgroup root on these
// machines' cgroup v1, swap left on, and the node's pod log directory on the host, where
// the stack's containerd writes the logs. Static pods stay in kubeadm's
// /etc/kubernetes/manifests in the machine. Unlike the other nspawn nodes it runs
// unitlet-eviction (the unitlet package brings it), on the host's disk, which every stack
// and build shares: the disk thresholds are lowered from the kubelet's defaults (at 15%
// imagefs.available the node took DiskPressure, its taint kept pods off, and the node-level
// reclaim removed the stack's test images), and images are never collected (they cannot be
// pulled again), as on the bench stacks.
func (h *Harness) KubeadmKubeletConfig(node string) (string, error) {
	i := slices.IndexFunc(h.stack.Nodes, func(n Node) bool { return n.Name == node && n.Kubeadm })
	if i < 0 {
		return "", fmt.Errorf("stack %s has no kubeadm node %s", h.stack.Name, node)
	}
	dirs, err := h.nodeDirsConfig(h.stack.Nodes[i])
	if err != nil {
		return "", err
	}
	cfg := "cgroupDriver: cgroupfs\nfailCgroupV1: false\nfailSwapOn: false\n" +
		"evictionHard: {memory.available: 100Mi, nodefs.available: 1%, nodefs.inodesFree: 1%, imagefs.available: 1%, imagefs.inodesFree: 1%}\n" +
		"imageGCHighThresholdPercent: 100\nimageGCLowThresholdPercent: 99\n"
	for _, line := range strings.SplitAfter(dirs, "\n") {
		if !strings.HasPrefix(line, "staticPodPath:") {
			cfg += line
		}
	}
	return cfg, nil
}

// KubeadmEtcKubernetes is the host directory that kubeadm node node's machine has as its
// /etc/kubernetes, and at this same path too. kubeadm writes its files there (kubeconfigs,
// the PKI, the static pods' manifests); a control plane that kubeadm init runs as static
// pods on the stack's containerd, on the host, mounts its hostPath volumes from the host:
// the test points those that name /etc/kubernetes at this directory (kubeadmtest).
func (h *Harness) KubeadmEtcKubernetes(node string) string {
	return filepath.Join(h.nodeDir(node), "etc-kubernetes")
}

// KubeadmEtcdDataDir is the etcd data directory (ClusterConfiguration etcd.local.dataDir)
// for `kubeadm init` on kubeadm node node: a host directory bound into its machine at the
// same path, as the etcd static pod mounts it from the host.
func (h *Harness) KubeadmEtcdDataDir(node string) string {
	return filepath.Join(h.nodeDir(node), "etcd")
}

// kubeadmBinds are systemd-nspawn's --bind arguments of kubeadm node n (see
// KubeadmEtcKubernetes), its directories made.
func (h *Harness) kubeadmBinds(n Node) ([]string, error) {
	etc, data := h.KubeadmEtcKubernetes(n.Name), h.KubeadmEtcdDataDir(n.Name)
	for _, d := range []string{etc, data} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	return []string{"--bind=" + etc + ":/etc/kubernetes", "--bind=" + etc + ":" + etc, "--bind=" + data + ":" + data}, nil
}

// NodeRootDir is the node's --root-dir on the host, where an nspawn node's machine has it
// bound at the same path: pod directories and the state of unitlet-config.
func (h *Harness) NodeRootDir(node string) string { return h.nodeRootDir(node) }

// AgentRootDir is the root dir of node's agent: the kubelet's own for a kubelet node,
// else unitlet's (NodeRootDir).
func (h *Harness) AgentRootDir(node string) string {
	for _, n := range h.stack.Nodes {
		if n.Name == node && n.Backend == "kubelet" {
			return filepath.Join(h.kubeletDir(node), "root")
		}
	}
	return h.nodeRootDir(node)
}
