package nodestatus

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/unitlet/unitlet/shared/version"
)

// kubernetesVersion is the Kubernetes release whose API this node agent speaks: the k8s.io
// modules it is built against (v0.36.3 is Kubernetes v1.36.3). Update it with those pins.
const kubernetesVersion = "v1.36.3"

// KubeletVersion is node.status.nodeInfo.kubeletVersion, e.g. "v1.36.3-unitlet+v0.1.0".
//
// It must parse as a semantic version whose major.minor.patch is the Kubernetes release
// we implement: the control plane reads it for the version-skew rules and for features
// that depend on the node's version, and kubectl shows it in `kubectl get nodes`. The
// pre-release part says the agent is unitlet rather than the kubelet, and the build
// metadata is unitlet's own version. A pre-release sorts below the release (v1.36.3-unitlet
// < v1.36.3 but > v1.36.2), so a check "at least v1.36.0" holds and one "at least
// v1.36.3" does not — the honest answer, since unitlet is not that kubelet.
func KubeletVersion() string {
	return kubernetesVersion + "-unitlet+" + buildMetadata(version.Version)
}

// buildMetadata keeps the characters semver allows in build metadata ([0-9A-Za-z-.]) and
// turns any other into "-".
func buildMetadata(s string) string {
	if s == "" {
		return "unknown"
	}
	out := []byte(s)
	for i, b := range out {
		switch {
		case b >= '0' && b <= '9', b >= 'a' && b <= 'z', b >= 'A' && b <= 'Z', b == '-', b == '.':
		default:
			out[i] = '-'
		}
	}
	return strings.Trim(string(out), ".")
}

// hostFiles reads the machine's identity under root ("/" on a node, a temporary
// directory in tests).
type hostFiles struct {
	root string
}

// systemInfo is the part of node.status.nodeInfo read from the host. It does not change
// while the process runs (a reboot restarts it), so it is read once.
type systemInfo struct {
	machineID     string
	systemUUID    string
	bootID        string
	kernelVersion string
	osImage       string
}

// read gathers what it can; a file that cannot be read leaves its field empty, as cAdvisor
// does for the kubelet.
func (h hostFiles) read() *systemInfo {
	info := &systemInfo{
		machineID:     h.firstLine("etc/machine-id", "var/lib/dbus/machine-id"),
		systemUUID:    h.firstLine("sys/class/dmi/id/product_uuid"),
		bootID:        h.firstLine("proc/sys/kernel/random/boot_id"),
		kernelVersion: h.firstLine("proc/sys/kernel/osrelease"),
		osImage:       h.prettyName(),
	}
	return info
}

// firstLine returns the trimmed content of the first of paths that can be read.
func (h hostFiles) firstLine(paths ...string) string {
	for _, p := range paths {
		b, err := os.ReadFile(filepath.Join(h.root, p))
		if err == nil {
			return strings.TrimSpace(string(b))
		}
	}
	return ""
}

// prettyName is os-release's PRETTY_NAME, or "Linux" when there is none (cAdvisor's
// default).
func (h hostFiles) prettyName() string {
	for _, p := range []string{"etc/os-release", "usr/lib/os-release"} {
		b, err := os.ReadFile(filepath.Join(h.root, p))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "PRETTY_NAME=")
			if !ok {
				continue
			}
			if u, err := strconv.Unquote(v); err == nil {
				v = u
			} else {
				v = strings.Trim(v, `"'`)
			}
			if v != "" {
				return v
			}
		}
	}
	return "Linux"
}
