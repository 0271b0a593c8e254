package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The kubelet backend runs the real kubelet of KubernetesVersion (built from the same
// k8s.io/kubernetes module as the control plane) as a node's agent on the stack's
// containerd, so unitlet can be measured against it side by side (`make bench-pods`).
//
// The kubelet changes the host beyond its own directories: it sets six kernel tunables
// (vm.overcommit_memory, kernel.panic, ...), creates iptables chains (KUBE-FIREWALL with
// jumps from INPUT and OUTPUT, KUBE-IPTABLES-HINT, KUBE-KUBELET-CANARY), links container
// logs from /var/log/containers and makes the kubepods cgroups. So it runs under a small
// shell wrapper that, when the kubelet stops (SIGTERM to the process group, as `down` and
// StopNode do), puts back what the host had before the kubelet's first start.

// Fixed ports of the kubelet on 127.0.0.1, so a stack has at most one kubelet node.
const (
	kubeletPort        = 10250
	kubeletHealthzPort = 10248
)

// kubeletDir holds a kubelet node's files: root dir, serving certificate, wrapper.
func (h *Harness) kubeletDir(node string) string { return filepath.Join(h.nodeDir(node), "kubelet") }

// kubeletComponent is node n's kubelet.
func (h *Harness) kubeletComponent(n Node, f *controlPlaneFiles) component {
	return component{
		name: n.Name + "/kubelet",
		start: func() (*proc, error) {
			bin, err := EnsureKubelet(h.repo, h.out)
			if err != nil {
				return nil, err
			}
			wrapper, err := h.prepareKubelet(n, f, bin)
			if err != nil {
				return nil, fmt.Errorf("prepare the kubelet of %s: %w", n.Name, err)
			}
			dir := h.kubeletDir(n.Name)
			return startProcess(h.paths.logs, n.Name+"-kubelet", nil, "/bin/sh", wrapper,
				"--config="+filepath.Join(dir, "config.yaml"),
				"--kubeconfig="+filepath.Join(h.nodeDir(n.Name), "kubeconfig"),
				"--root-dir="+filepath.Join(dir, "root"),
				// The default is /var/lib/kubelet/pki whatever the root dir.
				"--cert-dir="+filepath.Join(dir, "pki"),
				"--hostname-override="+n.Name,
				// The node IP is the kubelet's own choice (the host's address, as
				// unitlet's): the API server does not proxy to loopback addresses.
				"--v=1")
		},
		ready: func(ctx context.Context) error { return h.kubeletReady(ctx, n.Name) },
	}
}

// kubeletReady: the kubelet answers its health check and its Node is Ready.
func (h *Harness) kubeletReady(ctx context.Context, node string) error {
	if err := httpOK(ctx, http.DefaultClient, fmt.Sprintf("http://127.0.0.1:%d/healthz", kubeletHealthzPort), "ok"); err != nil {
		return err
	}
	c, err := h.AdminClient()
	if err != nil {
		return err
	}
	n, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("node %s: %w", node, err)
	}
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			if cond.Status != corev1.ConditionTrue {
				return fmt.Errorf("node %s not ready: %s", node, cond.Message)
			}
			return nil
		}
	}
	return fmt.Errorf("node %s has no Ready condition yet", node)
}

// prepareKubelet writes node n's kubelet configuration, credentials and wrapper, and
// returns the wrapper's path.
func (h *Harness) prepareKubelet(n Node, f *controlPlaneFiles, bin string) (string, error) {
	node, dir := h.nodeDir(n.Name), h.kubeletDir(n.Name)
	podLogs := filepath.Join(node, "pod-logs")
	for _, d := range []string{filepath.Join(dir, "root"), filepath.Join(dir, "pki"), podLogs} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return "", err
		}
	}
	cert, key, err := f.ca.issue(node, "node-client", certSpec{cn: "system:node:" + n.Name, orgs: []string{"system:nodes"}, client: true})
	if err != nil {
		return "", err
	}
	if err := writeKubeconfig(filepath.Join(node, "kubeconfig"), h.APIServerURL(), f.ca.CertFile, "system:node:"+n.Name, cert, key, ""); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "config.yaml"), []byte(kubeletConfig(n, f.ca.CertFile, h.RuntimeEndpoint(), podLogs)), 0o644); err != nil {
		return "", err
	}
	before, err := loadOrRecordHost(filepath.Join(dir, "host-before.json"))
	if err != nil {
		return "", err
	}
	wrapper := filepath.Join(dir, "run.sh")
	return wrapper, os.WriteFile(wrapper, []byte(kubeletWrapper(n.Name, bin, podLogs, before)), 0o755)
}

// kubeletConfig is node n's KubeletConfiguration: the kubelet's defaults but for what a
// cgroup-v1 host without systemd needs and what keeps it inside the stack.
func kubeletConfig(n Node, caFile, endpoint, podLogs string) string {
	cfg := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# Written by unitlet-harness for node %s.
clusterDomain: cluster.local
clusterDNS: [10.0.0.10]
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: %s
authorization:
  mode: Webhook
# A self-signed serving certificate in --cert-dir; the client certificate is the harness's.
serverTLSBootstrap: false
rotateCertificates: false
# Reached at the node's InternalIP through the API server's node proxy (bench-metrics);
# webhook authentication and authorization, no anonymous access.
address: 0.0.0.0
port: %d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %d
# cgroup v1, no systemd: the cgroupfs driver, with the kubelet's QoS cgroups (kubepods/...)
# as unitlet-podsync lays them out.
cgroupDriver: cgroupfs
cgroupsPerQOS: true
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: %s
# Not the host's /var/log/pods: the node's own directory.
podLogsDir: %s
# The test images cannot be pulled again: never collect them.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
`, n.Name, caFile, kubeletPort, kubeletHealthzPort, endpoint, podLogs)
	// As on unitlet's nodes (nodeConfig): the stack file's maxPods.
	if n.MaxPods != 0 {
		cfg += fmt.Sprintf("maxPods: %d\n", n.MaxPods)
	}
	return cfg
}

// kernelTunables are the sysctls the kubelet sets at start (unless protectKernelDefaults,
// which makes it fail instead when they differ).
var kernelTunables = []string{
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
}

// hostBefore is what the host had before a kubelet's first start.
type hostBefore struct {
	Sysctls map[string]string `json:"sysctls"`
	// KubeFirewall: the filter table had a KUBE-FIREWALL chain (someone else's kubelet or
	// kube-proxy): the wrapper then leaves iptables alone.
	KubeFirewall bool `json:"kubeFirewall"`
	// ContainerLogs: /var/log/containers existed.
	ContainerLogs bool `json:"containerLogs"`
}

// loadOrRecordHost reads the host's state as recorded at the kubelet's first start, or
// records it now. A restarted kubelet must not take its own changes for the host's.
func loadOrRecordHost(path string) (*hostBefore, error) {
	var b hostBefore
	if raw, err := os.ReadFile(path); err == nil {
		if err := json.Unmarshal(raw, &b); err != nil {
			return nil, fmt.Errorf("read %s: %w", path, err)
		}
		return &b, nil
	}
	b.Sysctls = map[string]string{}
	for _, k := range kernelTunables {
		v, err := os.ReadFile(filepath.Join("/proc/sys", k))
		if err != nil {
			return nil, fmt.Errorf("read sysctl %s: %w", k, err)
		}
		b.Sysctls[k] = strings.TrimSpace(string(v))
	}
	if _, err := exec.LookPath("iptables"); err == nil {
		b.KubeFirewall = exec.Command("iptables", "-w", "-t", "filter", "-S", "KUBE-FIREWALL").Run() == nil
	}
	if _, err := os.Stat("/var/log/containers"); err == nil {
		b.ContainerLogs = true
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	raw, err := json.Marshal(&b)
	if err != nil {
		return nil, err
	}
	return &b, os.WriteFile(path, raw, 0o644)
}

// kubeletWrapper is the shell script that runs the kubelet and, once it has stopped,
// restores the host as before.
func kubeletWrapper(node, bin, podLogs string, before *hostBefore) string {
	var b strings.Builder
	fmt.Fprintf(&b, `#!/bin/sh
# Written by unitlet-harness: runs the kubelet of node %s and, when it stops, undoes what
# it changed on the host.
%s "$@" &
pid=$!
trap 'kill -TERM $pid 2>/dev/null' TERM INT
wait $pid
rc=$?
# A trapped signal ends the wait early: wait until the kubelet is really gone.
while kill -0 $pid 2>/dev/null; do wait $pid; rc=$?; done
echo "unitlet-harness: the kubelet exited ($rc); restoring the host"
`, node, shellQuote(bin))
	for _, k := range kernelTunables {
		fmt.Fprintf(&b, "echo %s > /proc/sys/%s\n", shellQuote(before.Sysctls[k]), k)
	}
	if !before.KubeFirewall {
		b.WriteString(`for ipt in iptables ip6tables; do
  command -v $ipt >/dev/null || continue
  if [ $ipt = iptables ]; then
    $ipt -w -D INPUT -j KUBE-FIREWALL 2>/dev/null
    $ipt -w -D OUTPUT -j KUBE-FIREWALL 2>/dev/null
    $ipt -w -F KUBE-FIREWALL 2>/dev/null; $ipt -w -X KUBE-FIREWALL 2>/dev/null
  fi
  $ipt -w -t mangle -X KUBE-IPTABLES-HINT 2>/dev/null
  for t in mangle nat filter; do $ipt -w -t $t -X KUBE-KUBELET-CANARY 2>/dev/null; done
done
`)
	}
	fmt.Fprintf(&b, "find /var/log/containers -maxdepth 1 -lname %s -delete 2>/dev/null\n", shellQuote(podLogs+"/*"))
	if !before.ContainerLogs {
		b.WriteString("rmdir /var/log/containers 2>/dev/null\n")
	}
	// Empty cgroups only: rmdir fails on a cgroup with processes or children.
	b.WriteString(`for c in /sys/fs/cgroup/*/kubepods; do
  [ -d "$c" ] && find "$c" -depth -type d -exec rmdir {} \; 2>/dev/null
done
exit $rc
`)
	return b.String()
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// kubeletPID is the kubelet under node's wrapper, 0 when it does not run.
func (h *Harness) kubeletPID(node string) int {
	p := h.loadState().Procs[node+"/kubelet"]
	if !p.alive() {
		return 0
	}
	children, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", p.PID, p.PID))
	if err != nil {
		return 0
	}
	for _, f := range strings.Fields(string(children)) {
		pid, _ := strconv.Atoi(f)
		if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err == nil && filepath.Base(exe) == "kubelet" {
			return pid
		}
	}
	return 0
}
