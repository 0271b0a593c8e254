package harness

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"
)

// Images of the test stack. No registry is reachable here: the harness builds them and
// imports them into the stack's containerd.
const (
	PauseImage      = "unitlet.local/pause:1"
	BusyboxImage    = "unitlet.local/busybox:1"
	TestServerImage = "unitlet.local/testserver:1"
	// NonRootImage is BusyboxImage run as uid 65534 (its config's User).
	NonRootImage = "unitlet.local/busybox-nonroot:1"
	// registrySourceImage is BusyboxImage with one more file, so that its image ID differs:
	// the private registry's images are pushed from it. Pulling the same content as a test
	// image would make that image "pulled here" for ensureSecretPulledImages, as for the
	// kubelet, and every pod using the test image with pull policy Never would then have to
	// prove credentials it cannot have.
	registrySourceImage = "unitlet.local/busybox-registry:1"
)

// imageFile is one file of an image's only layer.
type imageFile struct {
	mode    int64
	content []byte
	link    string // a symlink target, when set
	dir     bool
}

// image is a single-layer image.
type image struct {
	ref   string
	files map[string]imageFile
	cmd   []string
	user  string // the config's User, when set
	path  string // the config's PATH, when not imagePath
}

// imagePath is the PATH of the test images.
const imagePath = "/bin:/usr/bin:/sbin:/usr/sbin"

// buildImages writes each test image as a docker-archive tar into the cache, named by the
// digest of its content, and returns the tar paths. The same inputs give the same bytes.
func (h *Harness) buildImages() (map[string]string, error) {
	dir := filepath.Join(CacheDir(), "images")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	pause, err := h.goBinary("pause")
	if err != nil {
		return nil, err
	}
	server, err := h.goBinary("testserver")
	if err != nil {
		return nil, err
	}
	busybox, err := os.ReadFile("/bin/busybox")
	if err != nil {
		return nil, fmt.Errorf("busybox: %w (install it: apt-get install -y busybox-static)", err)
	}
	base := baseImageFiles
	bb := base()
	bb["bin/busybox"] = imageFile{mode: 0o755, content: busybox}
	for _, tool := range busyboxApplets {
		bb["bin/"+tool] = imageFile{mode: 0o777, link: "busybox"}
	}
	reg := maps.Clone(bb)
	reg["etc/unitlet-registry-image"] = imageFile{mode: 0o644, content: []byte("pushed to the harness's private registry\n")}
	ts := base()
	ts["bin/testserver"] = imageFile{mode: 0o755, content: server}
	images := []image{
		{ref: PauseImage, files: map[string]imageFile{"pause": {mode: 0o755, content: pause}}, cmd: []string{"/pause"}},
		{ref: BusyboxImage, files: bb, cmd: []string{"sh"}},
		{ref: NonRootImage, files: bb, cmd: []string{"sh"}, user: "65534"},
		{ref: registrySourceImage, files: reg, cmd: []string{"sh"}},
		{ref: TestServerImage, files: ts, cmd: []string{"/bin/testserver", "serve"}},
	}
	if slices.ContainsFunc(h.stack.Nodes, func(n Node) bool { return n.Kubeadm }) {
		cp, err := controlPlaneImages()
		if err != nil {
			return nil, err
		}
		// kubeadm init's preflight pulls its sandbox image too, though the runtime's
		// sandbox_image (PauseImage) is the one pods get.
		images = append(append(images, cp...), image{ref: KubeadmImageRepository + "/pause:" + kubeadmPauseVersion,
			files: map[string]imageFile{"pause": {mode: 0o755, content: pause}}, cmd: []string{"/pause"}})
	}
	out := map[string]string{}
	for _, img := range images {
		b, err := img.archive()
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", img.ref, err)
		}
		sum := sha256.Sum256(b)
		path := filepath.Join(dir, hex.EncodeToString(sum[:8])+".tar")
		if _, err := os.Stat(path); err != nil {
			if err := os.WriteFile(path+".tmp", b, 0o644); err != nil {
				return nil, err
			}
			if err := os.Rename(path+".tmp", path); err != nil {
				return nil, err
			}
		}
		out[img.ref] = path
	}
	return out, nil
}

// KubeadmImageRepository is the imageRepository of `kubeadm init` on the harness: the
// control plane's images that a stack with a kubeadm node imports (controlPlaneImages).
const KubeadmImageRepository = "unitlet.local/kubeadm"

// kubeadmPauseVersion is the pause image's tag in kubeadm v1.36 (its constants.PauseVersion).
const kubeadmPauseVersion = "3.10.2"

// KubeadmEtcdImageTag is the tag of the etcd image in KubeadmImageRepository, in kubeadm's
// form (ClusterConfiguration etcd.local.imageTag).
var KubeadmEtcdImageTag = strings.TrimPrefix(EtcdVersion, "v") + "-0"

// controlPlaneImages are the images `kubeadm init` runs as static pods, made from the
// binaries the harness builds for its own control plane (EnsureBinaries), as kubeadm names
// them under KubeadmImageRepository: kube-apiserver, kube-controller-manager and
// kube-scheduler tagged KubernetesVersion, etcd tagged KubeadmEtcdImageTag. Each holds its
// binary in /usr/local/bin (kubeadm's manifests run it by name), the shared libraries it
// links (the host's, as ldd finds them: the control plane is built with cgo), and the base
// tree of the test images.
func controlPlaneImages() ([]image, error) {
	dir := filepath.Join(CacheDir(), "kube-"+KubernetesVersion+"-r2")
	bins := map[string]string{
		"kube-apiserver":          filepath.Join(dir, "kube-apiserver"),
		"kube-controller-manager": filepath.Join(dir, "kube-controller-manager"),
		"kube-scheduler":          filepath.Join(dir, "kube-scheduler"),
		"etcd":                    filepath.Join(CacheDir(), "etcd-"+EtcdVersion+"-r2", "etcd"),
	}
	var out []image
	for _, name := range slices.Sorted(maps.Keys(bins)) {
		path := bins[name]
		content, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("the %s image: %w (unitlet-harness build, or make harness-binaries, builds it)", name, err)
		}
		files := baseImageFiles()
		files["usr"] = imageFile{mode: 0o755, dir: true}
		files["usr/local"] = imageFile{mode: 0o755, dir: true}
		files["usr/local/bin"] = imageFile{mode: 0o755, dir: true}
		files["usr/local/bin/"+name] = imageFile{mode: 0o755, content: content}
		libs, err := sharedLibraries(path)
		if err != nil {
			return nil, fmt.Errorf("the %s image: %w", name, err)
		}
		for _, lib := range libs {
			b, err := os.ReadFile(lib)
			if err != nil {
				return nil, fmt.Errorf("the %s image: %w", name, err)
			}
			rel := strings.TrimPrefix(lib, "/")
			for d := filepath.Dir(rel); d != "."; d = filepath.Dir(d) {
				files[d] = imageFile{mode: 0o755, dir: true}
			}
			files[rel] = imageFile{mode: 0o755, content: b}
		}
		tag := KubernetesVersion
		if name == "etcd" {
			tag = KubeadmEtcdImageTag
		}
		out = append(out, image{ref: KubeadmImageRepository + "/" + name + ":" + tag, files: files, path: "/usr/local/bin:" + imagePath})
	}
	return out, nil
}

// sharedLibraries are the files of the shared libraries that binary loads, its dynamic
// loader among them, as ldd lists them (none for a static binary).
func sharedLibraries(binary string) ([]string, error) {
	out, err := exec.Command("ldd", binary).CombinedOutput()
	if err != nil {
		if strings.Contains(string(out), "not a dynamic executable") {
			return nil, nil
		}
		return nil, fmt.Errorf("ldd %s: %v\n%s", binary, err, out)
	}
	var libs []string
	for _, line := range strings.Split(string(out), "\n") {
		fields := strings.Fields(line)
		switch {
		case len(fields) >= 3 && fields[1] == "=>" && strings.HasPrefix(fields[2], "/"):
			libs = append(libs, fields[2])
		case len(fields) >= 1 && strings.HasPrefix(fields[0], "/"):
			libs = append(libs, fields[0])
		case len(fields) >= 2 && fields[1] == "=>":
			return nil, fmt.Errorf("ldd %s: %s is not found", binary, fields[0])
		}
	}
	return libs, nil
}

// baseImageFiles is the tree every test image has, as real base images do (ENVIRONMENT.md):
// a process in an image without /tmp or /etc/passwd fails in ways that hide the test.
func baseImageFiles() map[string]imageFile {
	return map[string]imageFile{
		"tmp": {mode: 0o1777, dir: true}, "var/tmp": {mode: 0o1777, dir: true}, "var": {mode: 0o755, dir: true},
		"root": {mode: 0o700, dir: true}, "home": {mode: 0o755, dir: true}, "proc": {mode: 0o755, dir: true},
		"sys": {mode: 0o755, dir: true}, "dev": {mode: 0o755, dir: true}, "etc": {mode: 0o755, dir: true},
		"bin":        {mode: 0o755, dir: true},
		"etc/passwd": {mode: 0o644, content: []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n")},
		"etc/group":  {mode: 0o644, content: []byte("root:x:0:\nnobody:x:65534:\n")},
	}
}

// busyboxApplets get links in the busybox image (never "busybox" itself).
var busyboxApplets = []string{"sh", "cat", "echo", "ls", "sleep", "true", "false", "env", "id", "ps", "wget", "nc", "touch", "mkdir", "rm", "test", "date", "hostname", "grep", "head", "tail", "stat", "df", "du", "mount", "ip", "dd", "kill", "wc", "yes", "printf", "tee"}

// goBinary builds one of integration/images as a static, reproducible binary.
func (h *Harness) goBinary(name string) ([]byte, error) {
	out := filepath.Join(h.paths.root, "images", name)
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w -buildid=", "-o", out, "./integration/images/"+name)
	cmd.Dir = h.repo
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build %s: %v\n%s", name, err, b)
	}
	return os.ReadFile(out)
}

// archive is the image as a docker-archive tar: manifest.json, a config, one layer.
func (img image) archive() ([]byte, error) {
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	names := make([]string, 0, len(img.files))
	for n := range img.files {
		names = append(names, n)
	}
	sort.Strings(names)
	epoch := time.Unix(0, 0)
	for _, n := range names {
		f := img.files[n]
		hdr := &tar.Header{Name: n, Mode: f.mode, ModTime: epoch, Format: tar.FormatPAX}
		switch {
		case f.dir:
			hdr.Typeflag, hdr.Name = tar.TypeDir, n+"/"
		case f.link != "":
			hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, f.link
		default:
			hdr.Typeflag, hdr.Size = tar.TypeReg, int64(len(f.content))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if hdr.Typeflag == tar.TypeReg {
			if _, err := tw.Write(f.content); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	diffID := sha256.Sum256(layer.Bytes())
	path := imagePath
	if img.path != "" {
		path = img.path
	}
	runConfig := map[string]any{"Cmd": img.cmd, "Env": []string{"PATH=" + path}}
	if img.user != "" {
		runConfig["User"] = img.user
	}
	config, err := json.Marshal(map[string]any{
		"architecture": "amd64",
		"os":           "linux",
		"created":      epoch.UTC().Format(time.RFC3339),
		"config":       runConfig,
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + hex.EncodeToString(diffID[:])}},
	})
	if err != nil {
		return nil, err
	}
	configSum := sha256.Sum256(config)
	configName := hex.EncodeToString(configSum[:]) + ".json"
	manifest, err := json.Marshal([]map[string]any{{"Config": configName, "RepoTags": []string{img.ref}, "Layers": []string{"layer.tar"}}})
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	otw := tar.NewWriter(&out)
	for _, e := range []struct {
		name string
		data []byte
	}{{"manifest.json", manifest}, {configName, config}, {"layer.tar", layer.Bytes()}} {
		if err := otw.WriteHeader(&tar.Header{Name: e.name, Mode: 0o644, Size: int64(len(e.data)), ModTime: epoch, Typeflag: tar.TypeReg}); err != nil {
			return nil, err
		}
		if _, err := otw.Write(e.data); err != nil {
			return nil, err
		}
	}
	return out.Bytes(), otw.Close()
}
