package harness

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Versions of the parts the harness builds; they match the helper modules in
// integration/tools and the k8s.io libraries unitlet uses.
const (
	KubernetesVersion = "v1.36.3"
	EtcdVersion       = "v3.6.8"
	// ContainerdVersion is the containerd a stack's runtime version "2" runs, built from
	// integration/tools/containerd; version "1.6" (the default) is Debian's package.
	ContainerdVersion = "v2.4.2"
)

// CacheDir is where built binaries are kept across runs and clones: $UNITLET_CACHE, else
// ~/.cache/unitlet.
func CacheDir() string {
	if d := os.Getenv("UNITLET_CACHE"); d != "" {
		return d
	}
	home, err := os.UserHomeDir()
	if err != nil {
		home = os.TempDir()
	}
	return filepath.Join(home, ".cache", "unitlet")
}

// Binaries are the control plane's executables.
type Binaries struct {
	Etcd, APIServer, ControllerManager, Scheduler, Kubectl string
}

// EnsureBinaries builds what is missing from the pinned helper modules under repo's
// integration/tools, into the cache. The first build takes several minutes; it says so.
func EnsureBinaries(repo string, out io.Writer) (*Binaries, error) {
	// The suffix is the build recipe's revision: change it when the flags below change.
	kubeDir := filepath.Join(CacheDir(), "kube-"+KubernetesVersion+"-r2")
	etcdDir := filepath.Join(CacheDir(), "etcd-"+EtcdVersion+"-r2")
	b := &Binaries{
		Etcd:              filepath.Join(etcdDir, "etcd"),
		APIServer:         filepath.Join(kubeDir, "kube-apiserver"),
		ControllerManager: filepath.Join(kubeDir, "kube-controller-manager"),
		Scheduler:         filepath.Join(kubeDir, "kube-scheduler"),
		Kubectl:           filepath.Join(kubeDir, "kubectl"),
	}
	var missing []string
	for _, p := range []string{b.APIServer, b.ControllerManager, b.Scheduler, b.Kubectl} {
		if _, err := os.Stat(p); err != nil {
			missing = append(missing, "k8s.io/kubernetes/cmd/"+filepath.Base(p))
		}
	}
	if len(missing) > 0 {
		if err := goBuild(out, filepath.Join(repo, "integration", "tools", "kube"), kubeDir, missing, kubeLDFlags(),
			"Kubernetes "+KubernetesVersion+" (first time: about 10 minutes on 2 cores)"); err != nil {
			return nil, err
		}
	}
	if _, err := os.Stat(b.Etcd); err != nil {
		if err := goBuild(out, filepath.Join(repo, "integration", "tools", "etcd"), b.Etcd, []string{"go.etcd.io/etcd/server/v3"}, "-s -w",
			"etcd "+EtcdVersion+" (first time: about 2 minutes)"); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// EnsureKubelet builds the kubelet of KubernetesVersion from repo's integration/tools/kubelet
// unless the cache has it, and returns its path. Only stacks with a kubelet node need it
// (the side-by-side benchmark), so it has its own module and cache directory: building it
// leaves the control plane's build and cache as they are.
func EnsureKubelet(repo string, out io.Writer) (string, error) {
	// The suffix is the build recipe's revision, as for the control plane.
	return ensureKubeCommand(repo, out, filepath.Join(CacheDir(), "kubelet-"+KubernetesVersion+"-r1", "kubelet"),
		"the kubelet "+KubernetesVersion+" (first time: about 3 minutes after the control plane)")
}

// KubeadmBinary is where EnsureKubeadm keeps kubeadm; the suffix is the build recipe's
// revision, as for the control plane.
func KubeadmBinary() string {
	return filepath.Join(CacheDir(), "kubeadm-"+KubernetesVersion+"-r1", "kubeadm")
}

// EnsureKubeadm builds kubeadm of KubernetesVersion, the control plane's, from repo's
// integration/tools/kubeadm unless the cache has it, and returns its path (KubeadmBinary).
// The tests of a node that kubeadm joins need it; its own module keeps kubeadm's
// dependencies out of the control plane's build.
func EnsureKubeadm(repo string, out io.Writer) (string, error) {
	return ensureKubeCommand(repo, out, KubeadmBinary(), "kubeadm "+KubernetesVersion+" (first time: about 2 minutes after the control plane)")
}

// ensureKubeCommand builds k8s.io/kubernetes/cmd/<name of bin> from the helper module
// integration/tools/<the same name> into bin unless it is there, and returns bin.
func ensureKubeCommand(repo string, out io.Writer, bin, what string) (string, error) {
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	name := filepath.Base(bin)
	if err := goBuild(out, filepath.Join(repo, "integration", "tools", name), bin, []string{"k8s.io/kubernetes/cmd/" + name}, kubeLDFlags(), what); err != nil {
		return "", err
	}
	return bin, nil
}

// Containerd is a containerd built from its module: the daemon, its runc shim and ctr.
type Containerd struct {
	Dir, Containerd, Shim, Ctr string
	// Runc is the runc its handlers run, empty for the machine's.
	Runc string
}

// EnsureContainerd builds containerd ContainerdVersion from repo's
// integration/tools/containerd into the cache unless it is there, and the runc it runs
// (EnsureRunc).
func EnsureContainerd(repo string, out io.Writer) (*Containerd, error) {
	runc, err := EnsureRunc(repo, out)
	if err != nil {
		return nil, err
	}
	dir := Containerd2Dir()
	c := &Containerd{Dir: dir, Containerd: filepath.Join(dir, "containerd"),
		Shim: filepath.Join(dir, "containerd-shim-runc-v2"), Ctr: filepath.Join(dir, "ctr"), Runc: runc}
	var pkgs []string
	complete := true
	for _, p := range []string{c.Containerd, c.Shim, c.Ctr} {
		pkgs = append(pkgs, "github.com/containerd/containerd/v2/cmd/"+filepath.Base(p))
		if _, err := os.Stat(p); err != nil {
			complete = false
		}
	}
	if complete {
		return c, nil
	}
	// The version the binaries report (CRI Version's runtimeVersion), as containerd's
	// Makefile stamps it. The btrfs snapshotter needs libbtrfs headers; the harness uses
	// overlayfs, so it is left out, and the rest builds without cgo.
	ldflags := "-s -w -X github.com/containerd/containerd/v2/version.Version=" + ContainerdVersion
	if err := goBuildTagged(out, filepath.Join(repo, "integration", "tools", "containerd"), dir, pkgs, ldflags,
		[]string{"no_btrfs", "urfave_cli_no_docs"}, "containerd "+ContainerdVersion+" (first time: about 5 minutes)"); err != nil {
		return nil, err
	}
	return c, nil
}

// RuncVersion is the runc the containerd 2.x stack runs (integration/tools/runc).
const RuncVersion = "v1.4.4"

// EnsureRunc builds runc from integration/tools/runc into the cache unless it is there:
// with seccomp (cgo and libseccomp's headers), as Debian builds it, and with the idmapped
// mounts containerd 2.x needs to report user namespace support (Debian 12's runc 1.1 has
// none).
func EnsureRunc(repo string, out io.Writer) (string, error) {
	bin := filepath.Join(CacheDir(), "runc-"+RuncVersion+"-r1", "runc")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	if err := exec.Command("pkg-config", "--exists", "libseccomp").Run(); err != nil {
		return "", errors.New("libseccomp's headers are missing (runc " + RuncVersion + " is built with seccomp): apt-get install -y libseccomp-dev gcc pkg-config (or make prereqs)")
	}
	ldflags := "-s -w -X main.version=" + strings.TrimPrefix(RuncVersion, "v")
	if err := goBuildCgo(out, filepath.Join(repo, "integration", "tools", "runc"), bin, []string{"github.com/opencontainers/runc"}, ldflags,
		[]string{"seccomp", "urfave_cli_no_docs"}, "runc "+RuncVersion+" (first time: about 1 minute)"); err != nil {
		return "", err
	}
	return bin, nil
}

// Containerd2Dir holds EnsureContainerd's build; the suffix is the build recipe's revision,
// as for the control plane.
func Containerd2Dir() string { return filepath.Join(CacheDir(), "containerd-"+ContainerdVersion+"-r1") }

// kubeLDFlags stamp the version the binaries report, as Kubernetes' own build does.
func kubeLDFlags() string {
	major, minor := "1", strings.Split(strings.TrimPrefix(KubernetesVersion, "v1."), ".")[0]
	var b strings.Builder
	b.WriteString("-s -w")
	for _, pkg := range []string{"k8s.io/component-base/version", "k8s.io/client-go/pkg/version"} {
		fmt.Fprintf(&b, " -X %s.gitVersion=%s -X %s.gitMajor=%s -X %s.gitMinor=%s -X %s.gitTreeState=clean",
			pkg, KubernetesVersion, pkg, major, pkg, minor, pkg)
	}
	return b.String()
}

func goBuild(out io.Writer, moduleDir, output string, pkgs []string, ldflags, what string) error {
	return goBuildTagged(out, moduleDir, output, pkgs, ldflags, nil, what)
}

// goBuildCgo is goBuildTagged with cgo on (tags that need C headers).
func goBuildCgo(out io.Writer, moduleDir, output string, pkgs []string, ldflags string, tags []string, what string) error {
	return goBuildWith(out, moduleDir, output, pkgs, ldflags, tags, true, what)
}

// goBuildTagged is goBuild with build tags; with tags, cgo is off too (a tagged build here
// leaves out parts that need C headers, and the rest builds static).
func goBuildTagged(out io.Writer, moduleDir, output string, pkgs []string, ldflags string, tags []string, what string) error {
	return goBuildWith(out, moduleDir, output, pkgs, ldflags, tags, false, what)
}

func goBuildWith(out io.Writer, moduleDir, output string, pkgs []string, ldflags string, tags []string, cgo bool, what string) error {
	start := time.Now()
	fmt.Fprintf(out, "building %s into %s ...\n", what, output)
	if err := os.MkdirAll(filepath.Dir(output), 0o755); err != nil {
		return err
	}
	// Build into a temporary directory of this build's own and rename, so that an
	// interrupted build leaves no half binary, and two harnesses building the same output
	// at once (two worktrees on a fresh machine) do not take each other's files away.
	tmp, err := os.MkdirTemp(filepath.Dir(output), filepath.Base(output)+".tmp-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	target := filepath.Join(tmp, filepath.Base(output))
	if len(pkgs) > 1 {
		target = tmp + "/"
	}
	args := []string{"build", "-trimpath", "-ldflags=" + ldflags}
	if len(tags) > 0 {
		args = append(args, "-tags="+strings.Join(tags, ","))
	}
	args = append(append(args, "-o", target), pkgs...)
	cmd := exec.Command("go", args...)
	cmd.Dir = moduleDir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
	if cgo {
		cmd.Env = append(cmd.Env, "CGO_ENABLED=1")
	} else if len(tags) > 0 {
		cmd.Env = append(cmd.Env, "CGO_ENABLED=0")
	}
	cmd.Stdout, cmd.Stderr = out, out
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(30 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				fmt.Fprintf(out, "  still building %s (%s)\n", what, time.Since(start).Round(time.Second))
			}
		}
	}()
	err = cmd.Run()
	close(done)
	if err != nil {
		return fmt.Errorf("build %s in %s: %w", what, moduleDir, err)
	}
	if len(pkgs) > 1 {
		if err := os.MkdirAll(output, 0o755); err != nil {
			return err
		}
		entries, err := os.ReadDir(tmp)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if err := os.Rename(filepath.Join(tmp, e.Name()), filepath.Join(output, e.Name())); err != nil {
				return err
			}
		}
	} else if err := os.Rename(target, output); err != nil {
		return err
	}
	fmt.Fprintf(out, "built %s in %s\n", what, time.Since(start).Round(time.Second))
	return nil
}

// BuildParts are what `unitlet-harness build PART...` builds or finds, by name, in the
// order `unitlet-harness build` with no part builds them all: make test builds the ones
// the vm suite needs first and the rest beside the suites that start earlier.
var BuildParts = []string{"control-plane", "registry", "metrics-server", "containerd", "kubeadm", "local-path-provisioner", "vm-tree", "nspawn-tree"}

// Build builds or finds the named parts (BuildParts); none: every binary (not the trees,
// which the first stack that needs one builds).
func (h *Harness) Build(parts ...string) error {
	if len(parts) == 0 {
		parts = BuildParts[:6]
	}
	for _, p := range parts {
		var err error
		switch p {
		case "control-plane":
			_, err = EnsureBinaries(h.repo, h.out)
		case "registry":
			_, err = EnsureRegistryBinary(h.repo, h.out)
		case "metrics-server":
			_, err = EnsureMetricsServerBinary(h.repo, h.out)
		case "containerd":
			_, err = EnsureContainerd(h.repo, h.out)
		case "kubeadm":
			_, err = EnsureKubeadm(h.repo, h.out)
		case "local-path-provisioner":
			_, err = EnsureLocalPathBinary(h.repo, h.out)
		case "vm-tree", "nspawn-tree":
			ensure, what := h.ensureVMTree, "the vm tree"
			if p == "nspawn-tree" {
				ensure, what = h.ensureNspawnTree, "the nspawn machine tree"
			}
			var did string
			if did, err = ensure(); err == nil {
				fmt.Fprintf(h.out, "%s%s\n", what, did)
			}
		default:
			err = fmt.Errorf("no part %q to build: the parts are %s", p, strings.Join(BuildParts, ", "))
		}
		if err != nil {
			return err
		}
	}
	return nil
}
