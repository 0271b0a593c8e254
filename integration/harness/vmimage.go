package harness

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
)

// A vm node's disk is an ext4 image of a Debian tree with a kernel, containerd, runc and
// the CNI plugins, which installs unitlet from its Debian packages at boot, as an
// administrator would on a new host (docs/install.md). Two caches:
//
//   - the tree (debootstrap, once: a few minutes), CacheDir()/vm-<suite>-<recipe>;
//   - the image, CacheDir()/vm-images/<hash>.img, made from the tree and the node's files
//     (the packages `make deb` built from the stack's binaries, the harness's drop-ins, the
//     node's configuration drop-in, the guest's setup) with `mkfs.ext4 -d` over a read-only
//     overlay of both. Its name is the hash of those files and of vmImageRecipe, so it is
//     made again only when one of them changes.
//
// At boot unitlet-harness-install.service runs `apt-get install ./*.deb` over the packages
// and starts unitlet.target: the binaries, units, sysusers and sysctl files and
// /etc/unitlet/config.yaml are the packages'. The harness adds only what an administrator
// adds: /etc/unitlet/config.d/50-harness.conf, a drop-in per unit
// (/etc/systemd/system/unitlet-<svc>.service.d/harness.conf) and, from the share, the
// credentials.
//
// What differs from one stack to the next (the cluster CA, the node's client certificate,
// its kubeconfig, the test images) is not in the image: the guest reads it from the
// node's 9p share at boot (unitlet-harness-node.service). The VM boots the image with
// snapshot=on, so each boot starts from the image as built and nothing is written to it.

const (
	// vmTreeRecipe is the revision of the vm tree's recipe (vmPackages, what is done to it).
	vmTreeRecipe = "r1"
	// vmImageRecipe is the revision of what vmImageFiles puts into the image and how the
	// image is made.
	vmImageRecipe = "r2"
	// vmImageSize is the size of the (sparse) disk image: room for the images and pods.
	vmImageSize = 4 << 30
	// vmShareTag is the mount tag of the node's 9p share, mounted on vmShareDir.
	vmShareTag = "harness"
	vmShareDir = "/mnt/harness"
	// vmRuntimeEndpoint is the guest's containerd.
	vmRuntimeEndpoint = "unix:///run/containerd/containerd.sock"
	// vmDebDir is where the image carries unitlet's packages.
	vmDebDir = "/var/cache/unitlet-harness/debs"
	// vmConfigDropIn is the node's configuration, over the packaged config.yaml.
	vmConfigDropIn = "/etc/unitlet/config.d/50-harness.conf"
	// VMInstallUnit is the guest's unit that installs the packages and starts unitlet.
	VMInstallUnit = "unitlet-harness-install.service"
)

// vmPackages are installed into the vm tree besides minbase: systemd as init (with udev for
// the virtio-serial port's name), the kernel and its initrd, the runtime.
var vmPackages = []string{
	"systemd", "systemd-sysv", "dbus", "procps", "udev", "kmod", "iproute2",
	"linux-image-amd64", "initramfs-tools",
	"containerd", "runc", "containernetworking-plugins",
}

// VMTreeDir is the cached vm tree.
func VMTreeDir() string {
	return filepath.Join(CacheDir(), "vm-"+debianSuite+"-"+vmTreeRecipe)
}

// ensureVMTree builds the vm tree into the cache unless it is there.
func (h *Harness) ensureVMTree() (string, error) {
	return h.ensureTree(VMTreeDir(), "the vm tree", "3 to 6 minutes", vmPackages, func(tmp string) error {
		_, _, err := vmKernel(tmp)
		return err
	})
}

// vmKernel is the kernel and initrd of a vm tree.
func vmKernel(tree string) (kernel, initrd string, err error) {
	ks, _ := filepath.Glob(filepath.Join(tree, "boot", "vmlinuz-*"))
	is, _ := filepath.Glob(filepath.Join(tree, "boot", "initrd.img-*"))
	if len(ks) == 0 || len(is) == 0 {
		return "", "", fmt.Errorf("the vm tree %s has no kernel or initrd in /boot (linux-image-amd64 and initramfs-tools should have put them there)", tree)
	}
	sort.Strings(ks)
	sort.Strings(is)
	return ks[len(ks)-1], is[len(is)-1], nil
}

// vmFile is a file put into the image.
type vmFile struct {
	path string // in the guest
	mode os.FileMode
	from string // a host file, or
	data []byte // the content, or
	link string // a symlink target
}

// vmImagePath is the image of node n: its name is the hash of its inputs.
func (h *Harness) vmImagePath(n Node) (string, []vmFile, error) {
	files, err := h.vmImageFiles(n)
	if err != nil {
		return "", nil, err
	}
	sum := sha256.New()
	fmt.Fprintf(sum, "recipe %s tree %s\n", vmImageRecipe, VMTreeDir())
	for _, f := range files {
		data := f.data
		if f.from != "" {
			if data, err = os.ReadFile(f.from); err != nil {
				return "", nil, err
			}
		}
		fmt.Fprintf(sum, "%s %o %q %d\n", f.path, f.mode, f.link, len(data))
		sum.Write(data)
	}
	name := hex.EncodeToString(sum.Sum(nil)[:12]) + ".img"
	return filepath.Join(CacheDir(), "vm-images", name), files, nil
}

// ensureVMImage makes node n's disk image unless the cache has one for the same inputs.
func (h *Harness) ensureVMImage(n Node) (string, error) {
	img, files, err := h.vmImagePath(n)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(img); err == nil {
		return img, nil
	}
	for _, tool := range []struct{ cmd, pkg string }{{"mkfs.ext4", "e2fsprogs"}} {
		if _, err := exec.LookPath(tool.cmd); err != nil {
			return "", fmt.Errorf("%s is missing: apt-get install -y %s (or make prereqs)", tool.cmd, tool.pkg)
		}
	}
	dir := filepath.Dir(img)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	work := filepath.Join(h.nodeDir(n.Name), "image")
	if err := h.unmountUnder(work); err != nil {
		return "", err
	}
	if err := os.RemoveAll(work); err != nil {
		return "", err
	}
	staging, root := filepath.Join(work, "files"), filepath.Join(work, "rootfs")
	for _, d := range []string{staging, root} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return "", err
		}
	}
	for _, f := range files {
		p := filepath.Join(staging, f.path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return "", err
		}
		if f.link != "" {
			if err := os.Symlink(f.link, p); err != nil {
				return "", err
			}
			continue
		}
		data := f.data
		if f.from != "" {
			if data, err = os.ReadFile(f.from); err != nil {
				return "", err
			}
		}
		if err := os.WriteFile(p, data, f.mode); err != nil {
			return "", err
		}
		if err := os.Chmod(p, f.mode); err != nil {
			return "", err
		}
	}
	// The node's files over the tree, read-only: mkfs.ext4 copies what it sees.
	opts := "lowerdir=" + staging + ":" + VMTreeDir()
	if err := syscall.Mount("overlay", root, "overlay", syscall.MS_RDONLY, opts); err != nil {
		return "", fmt.Errorf("mount the overlay on %s (%s): %w", root, opts, err)
	}
	defer func() { _ = syscall.Unmount(root, syscall.MNT_DETACH) }()
	tmp := img + ".tmp"
	_ = os.Remove(tmp)
	if err := os.WriteFile(tmp, nil, 0o644); err != nil {
		return "", err
	}
	if err := os.Truncate(tmp, vmImageSize); err != nil {
		return "", err
	}
	out, err := exec.Command("mkfs.ext4", "-q", "-F", "-L", "unitlet-root", "-E", "root_owner=0:0", "-d", root, tmp).CombinedOutput()
	if err != nil {
		_ = os.Remove(tmp)
		return "", fmt.Errorf("mkfs.ext4 -d %s %s: %v: %s", root, tmp, err, out)
	}
	if err := os.Rename(tmp, img); err != nil {
		return "", err
	}
	// Older images of this cache are stale: one vm runs at a time, and each is 1 GB on disk.
	old, _ := filepath.Glob(filepath.Join(dir, "*.img"))
	for _, o := range old {
		if o != img {
			_ = os.Remove(o)
		}
	}
	if err := syscall.Unmount(root, 0); err != nil {
		return "", fmt.Errorf("unmount %s: %w", root, err)
	}
	return img, os.RemoveAll(work)
}

// vmImageFiles are the files of node n's image besides the tree: unitlet's packages and
// what installs them at boot, the node's configuration drop-in, the units' drop-ins, the
// guest's agent and setup.
func (h *Harness) vmImageFiles(n Node) ([]vmFile, error) {
	const caPath = "/etc/unitlet/pki/ca.crt"
	// A drop-in over the packaged /etc/unitlet/config.yaml (a conffile, left as shipped):
	// its cgroupDriver: systemd is the packaged default, which the node relies on.
	cfg := nodeConfig(n, caPath, vmRuntimeEndpoint, h.stack.Standalone)
	// The vm has its own kernel, whose tunables the packaged sysctl.d file sets to the
	// kubelet's: unitlet-config checks them (CIS 4.2.6 of v1.8, "protect kernel defaults").
	cfg += "protectKernelDefaults: true\n"
	if n.NodeAPIPort != 0 {
		cfg += fmt.Sprintf("port: %d\n", n.NodeAPIPort)
	}
	agent, err := h.vmAgentBinary()
	if err != nil {
		return nil, err
	}
	debs, err := h.vmDebs(n)
	if err != nil {
		return nil, err
	}
	files := []vmFile{
		{path: "/etc/hostname", mode: 0o644, data: []byte(n.Name + "\n")},
		{path: "/etc/hosts", mode: 0o644, data: []byte("127.0.0.1 localhost\n127.0.1.1 " + n.Name + "\n")},
		// Empty: systemd makes one at the first boot, which every boot of a snapshot is.
		{path: "/etc/machine-id", mode: 0o444, data: nil},
		{path: "/etc/fstab", mode: 0o644, data: []byte("/dev/vda / ext4 rw,noatime 0 1\n" +
			vmShareTag + " " + vmShareDir + " 9p trans=virtio,version=9p2000.L,ro 0 0\n")},
		{path: "/etc/modules-load.d/unitlet-harness.conf", mode: 0o644, data: []byte("9p\n9pnet_virtio\nvirtio_console\n")},
		// User-mode networking: the guest is 10.0.2.15, the host's 127.0.0.1 is 10.0.2.2.
		{path: "/etc/systemd/network/10-qemu.network", mode: 0o644, data: []byte(
			"[Match]\nName=en* eth*\n\n[Network]\nAddress=10.0.2.15/24\nGateway=10.0.2.2\nDNS=10.0.2.3\n")},
		{path: "/etc/systemd/system/multi-user.target.wants/systemd-networkd.service", link: "/lib/systemd/system/systemd-networkd.service"},
		{path: "/etc/systemd/system/sockets.target.wants/systemd-networkd.socket", link: "/lib/systemd/system/systemd-networkd.socket"},
		{path: "/etc/systemd/system/network-online.target.wants/systemd-networkd-wait-online.service", link: "/lib/systemd/system/systemd-networkd-wait-online.service"},
		{path: "/etc/containerd/config.toml", mode: 0o644, data: []byte(vmContainerdConfig)},
		{path: "/etc/cni/net.d/10-unitlet.conflist", mode: 0o644, data: []byte(vmCNIConfig)},
		{path: "/etc/systemd/system/containerd.service.d/harness.conf", mode: 0o644, data: []byte(
			"[Unit]\n# The pods' CNI plugins need the network up.\nAfter=network-online.target\nWants=network-online.target\n")},
		{path: "/usr/local/bin/unitlet-vmagent", mode: 0o755, from: agent},
		{path: "/etc/systemd/system/unitlet-vmagent.service", mode: 0o644, data: []byte(vmAgentUnit)},
		{path: "/etc/systemd/system/sysinit.target.wants/unitlet-vmagent.service", link: "/etc/systemd/system/unitlet-vmagent.service"},
		{path: "/usr/local/sbin/unitlet-harness-node", mode: 0o755, data: []byte(vmNodeSetupScript)},
		{path: "/etc/systemd/system/unitlet-harness-node.service", mode: 0o644, data: []byte(vmNodeSetupUnit)},
		{path: "/etc/systemd/system/multi-user.target.wants/unitlet-harness-node.service", link: "/etc/systemd/system/unitlet-harness-node.service"},
		{path: "/usr/local/sbin/unitlet-harness-install", mode: 0o755, data: []byte(vmInstallScript)},
		{path: "/etc/systemd/system/" + VMInstallUnit, mode: 0o644, data: []byte(vmInstallUnit)},
		{path: "/etc/systemd/system/multi-user.target.wants/" + VMInstallUnit, link: "/etc/systemd/system/" + VMInstallUnit},
		// Root's alone, as the packaged config.yaml (CIS 4.1.9).
		{path: vmConfigDropIn, mode: 0o600, data: []byte(cfg)},
	}
	for _, deb := range debs {
		files = append(files, vmFile{path: vmDebDir + "/" + filepath.Base(deb), mode: 0o644, from: deb})
	}
	for _, svc := range n.Services {
		files = append(files, vmFile{path: "/etc/systemd/system/unitlet-" + svc + ".service.d/harness.conf", mode: unitFileMode, data: []byte(h.vmUnitDropIn(n, svc))})
	}
	sort.Slice(files, func(i, j int) bool { return files[i].path < files[j].path })
	return files, nil
}

// DistDir is where the harness takes unitlet's Debian packages from: UNITLET_DIST_DIR when
// it is set, else the checkout's dist/ (`make deb`).
func DistDir(repo string) string {
	if dir := os.Getenv("UNITLET_DIST_DIR"); dir != "" {
		return dir
	}
	return filepath.Join(repo, "dist")
}

// vmDebNames are the packages a vm node installs: every service's, unitletctl and the
// unitlet meta-package (which needs them all: a vm node runs every service).
func vmDebNames() []string {
	names := []string{"unitlet", "unitletctl"}
	for _, svc := range knownServices {
		names = append(names, "unitlet-"+svc)
	}
	return names
}

// vmDebs are the package files of node n, from DistDir: one of each name, each holding
// the very binary the stack runs (its bin dir), so the node runs what the other backends
// would.
func (h *Harness) vmDebs(n Node) ([]string, error) {
	dist := DistDir(h.repo)
	const remedy = "run `make build deb` (the packages of the binaries in bin/) and test with UNITLET_BIN_DIR=$PWD/bin, as `make test-vm` does"
	debs, err := findDebs(dist, "vm node "+n.Name+" installs it: "+remedy)
	if err != nil {
		return nil, err
	}
	for _, deb := range debs {
		name, _, _ := strings.Cut(filepath.Base(deb), "_")
		if name == "unitlet" {
			continue
		}
		same, err := debHoldsBinary(deb, "/usr/bin/"+name, filepath.Join(h.binDir(), name))
		if err != nil {
			return nil, err
		}
		if !same {
			return nil, fmt.Errorf("%s holds another /usr/bin/%s than the stack's %s: %s", deb, name, filepath.Join(h.binDir(), name), remedy)
		}
	}
	return debs, nil
}

// debHoldsBinary reports whether package deb's file path has the content of file bin.
func debHoldsBinary(deb, path, bin string) (bool, error) {
	want, err := os.ReadFile(bin)
	if err != nil {
		return false, err
	}
	for _, tool := range []struct{ cmd, pkg string }{{"dpkg-deb", "dpkg"}, {"tar", "tar"}} {
		if _, err := exec.LookPath(tool.cmd); err != nil {
			return false, fmt.Errorf("%s is missing: apt-get install -y %s", tool.cmd, tool.pkg)
		}
	}
	var got, stderr bytes.Buffer
	cmd := exec.Command("sh", "-c", `dpkg-deb --fsys-tarfile "$1" | tar -xOf - ".$2"`, "sh", deb, path)
	cmd.Stdout, cmd.Stderr = &got, &stderr
	if err := cmd.Run(); err != nil {
		return false, fmt.Errorf("read %s from %s: %v: %s", path, deb, err, strings.TrimSpace(stderr.String()))
	}
	return bytes.Equal(got.Bytes(), want), nil
}

// vmUnitDropIn is the harness's drop-in for the unit of service svc in a vm node: the
// shipped unit stays as it is; the drop-in orders it after the node's setup (credentials
// and images from the share), points config at the credentials, and copies the log to the
// console, which is the vm component's log.
func (h *Harness) vmUnitDropIn(n Node, svc string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Written by unitlet-harness for node %s.\n[Unit]\nWants=unitlet-harness-node.service\nAfter=unitlet-harness-node.service\n\n[Service]\n", n.Name)
	b.WriteString(metricsDropIn(n, svc))
	switch {
	case svc != "config" || h.stack.Standalone:
	case n.Bootstrap:
		// TLS bootstrap writes the kubeconfig into the state directory, the one place the
		// unit may write (ProtectSystem=strict).
		b.WriteString("Environment=UNITLET_BOOTSTRAP_KUBECONFIG=/etc/unitlet/creds/bootstrap.kubeconfig\n")
		b.WriteString("Environment=UNITLET_KUBECONFIG=/var/lib/unitlet/kubeconfig\n")
	default:
		b.WriteString("Environment=UNITLET_KUBECONFIG=/etc/unitlet/creds/kubeconfig\n")
	}
	b.WriteString("StandardOutput=journal+console\nStandardError=journal+console\n")
	return b.String()
}

// vmAgentBinary builds the guest agent (static) into the stack's bin dir.
func (h *Harness) vmAgentBinary() (string, error) {
	out := filepath.Join(h.binDir(), "unitlet-vmagent")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w -buildid=", "-o", out, "./integration/vmagent")
	cmd.Dir = h.repo
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build the vm agent: %v\n%s", err, b)
	}
	return out, nil
}

// vmContainerdConfig is the guest's containerd: the CRI plugin with the harness's pause
// image and the Debian CNI plugins. The guest is a real machine: root has every capability.
const vmContainerdConfig = `version = 2
# Written by unitlet-harness.
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "` + PauseImage + `"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "/etc/cni/net.d"
`

const vmCNIConfig = `{
  "cniVersion": "1.0.0",
  "name": "unitlet",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.88.0.0/16"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`

// vmAgentUnit runs the agent from early boot, so the harness can look into a guest whose
// boot is stuck.
const vmAgentUnit = `# Written by unitlet-harness: the guest side of the agent channel (virtio-serial).
[Unit]
Description=unitlet-harness agent channel
DefaultDependencies=no
After=systemd-udev-trigger.service

[Service]
ExecStart=/usr/local/bin/unitlet-vmagent
Restart=always
RestartSec=1
`

// vmNodeSetupScript installs what differs from one stack to the next, from the node's 9p
// share: the cluster CA, the node's client certificate and kubeconfig, the test images
// (no registry is reachable).
const vmNodeSetupScript = `#!/bin/sh
# Written by unitlet-harness: the node's credentials and the test images, from its share.
set -eu
share=` + vmShareDir + `
if [ -f "$share/creds/ca.crt" ]; then # none in a standalone stack
	install -d -m 0755 /etc/unitlet/pki
	install -m 0600 "$share/creds/ca.crt" /etc/unitlet/pki/ca.crt
	install -d -m 0700 /etc/unitlet/creds
	# A client certificate and its kubeconfig, or a bootstrap token's kubeconfig.
	for f in ca.crt node-client.crt node-client.key kubeconfig bootstrap.kubeconfig; do
		if [ -f "$share/creds/$f" ]; then
			install -m 0600 "$share/creds/$f" "/etc/unitlet/creds/$f"
		fi
	done
fi
for i in $(seq 1 60); do
	ctr version >/dev/null 2>&1 && break
	sleep 1
done
for t in "$share"/images/*.tar; do
	ctr -n k8s.io images import "$t"
done
`

var vmNodeSetupUnit = vmOneshotUnit("the node's credentials and test images from the share",
	"RequiresMountsFor="+vmShareDir+"\nWants=containerd.service\nAfter=containerd.service\n", "/usr/local/sbin/unitlet-harness-node")

// vmOneshotUnit is a unit of the harness's that runs exec once at boot and reports to the
// console, after the [Unit] lines deps.
func vmOneshotUnit(description, deps, exec string) string {
	return "# Written by unitlet-harness.\n[Unit]\nDescription=unitlet-harness: " + description + "\n" + deps +
		"\n[Service]\nType=oneshot\nRemainAfterExit=yes\nExecStart=" + exec +
		"\nStandardOutput=journal+console\nStandardError=journal+console\n"
}

// vmInstallScript is what an administrator does on a new Debian host (docs/install.md):
// unitlet's packages installed with apt, then unitlet.target started. The node's
// configuration drop-in and the units' drop-ins are in the image already; the
// credentials come from unitlet-harness-node.service, which every unitlet service is
// ordered after (its drop-in). `apt-get install --no-download ./*.deb` would say the
// path "is not absolute" (apt 2.6): nothing is downloaded anyway, every dependency is in
// the tree and no mirror is reachable.
const vmInstallScript = `#!/bin/sh
# Written by unitlet-harness: install unitlet from its Debian packages, then start it.
set -eu
cd ` + vmDebDir + `
DEBIAN_FRONTEND=noninteractive apt-get install -y ./*.deb
systemctl start --no-block unitlet.target
`

var vmInstallUnit = vmOneshotUnit("install unitlet from its Debian packages and start unitlet.target",
	"After=local-fs.target\n", "/usr/local/sbin/unitlet-harness-install")

// vmShareFiles fills node n's share: its credentials (the kubeconfig reaches the API server
// at 10.0.2.2, the host as the guest sees it) and the test images.
func (h *Harness) vmShareFiles(n Node, f *controlPlaneFiles) error {
	share := h.vmShareDir(n.Name)
	creds := filepath.Join(share, "creds")
	images := filepath.Join(share, "images")
	if err := os.RemoveAll(share); err != nil {
		return err
	}
	for _, d := range []string{creds, images} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	server := fmt.Sprintf("https://10.0.2.2:%d", h.stack.ControlPlane.APIServerPort)
	switch {
	case h.stack.Standalone:
	case n.Bootstrap:
		// The bootstrap token alone: unitlet-config in the guest makes the client certificate.
		if err := copyFile(f.ca.CertFile, filepath.Join(creds, "ca.crt"), 0o600); err != nil {
			return err
		}
		token, err := h.bootstrapToken()
		if err != nil {
			return err
		}
		if err := writeKubeconfig(filepath.Join(creds, "bootstrap.kubeconfig"), server, "/etc/unitlet/creds/ca.crt", "kubelet-bootstrap", "", "", token); err != nil {
			return err
		}
	default:
		cert, key, err := h.nodeClientCert(n, f)
		if err != nil {
			return err
		}
		for src, dst := range map[string]string{cert: "node-client.crt", key: "node-client.key", f.ca.CertFile: "ca.crt"} {
			if err := copyFile(src, filepath.Join(creds, dst), 0o600); err != nil {
				return err
			}
		}
		if err := writeKubeconfig(filepath.Join(creds, "kubeconfig"), server, "/etc/unitlet/creds/ca.crt", "system:node:"+n.Name,
			"/etc/unitlet/creds/node-client.crt", "/etc/unitlet/creds/node-client.key", ""); err != nil {
			return err
		}
	}
	tars, err := h.buildImages()
	if err != nil {
		return err
	}
	for ref, tar := range tars {
		name := strings.NewReplacer("/", "_", ":", "_").Replace(ref) + ".tar"
		if err := copyFile(tar, filepath.Join(images, name), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// vmShareDir is node n's 9p share.
func (h *Harness) vmShareDir(node string) string { return filepath.Join(h.nodeDir(node), "share") }

func copyFile(src, dst string, mode os.FileMode) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, mode)
}
