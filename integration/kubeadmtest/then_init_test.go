package kubeadmtest

import (
	"context"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"sigs.k8s.io/yaml"

	"github.com/unitlet/unitlet/integration/harness"
	"github.com/unitlet/unitlet/shared/kube"
)

// controlPlaneComponents are the static pods of `kubeadm init` (their containers' names,
// and their mirror pods' names before "-<node>").
var controlPlaneComponents = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"}

// skippedInitPhases are the phases of kubeadm init that the test skips: the CoreDNS and
// kube-proxy addons, whose images nothing here can build (CoreDNS is another project's
// binary, kube-proxy's image needs iptables and conntrack userland). Every control-plane
// phase runs.
var skippedInitPhases = []string{"addon/coredns", "addon/kube-proxy"}

// TestKubeadmInit runs `kubeadm init` on the kubeadm node, where unitlet is installed from
// its packages (and, when TestKubeadmJoin ran first, was reset by `kubeadm reset`): kubeadm
// writes the control plane's static pods (etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler, from the images the harness builds from its own binaries), starts unitlet
// through kubelet.service, and waits for unitlet to run them. The test then checks that the
// cluster came up on unitlet: kubelet.conf names the rotatable client certificate
// (kubeadm's kubelet-finalize) and unitlet-certs rotates it; the node registered with the
// API server it runs, Ready,
// labelled and tainted as a control-plane node; the static pods' mirror pods Running and
// Ready; the controller-manager at work (the default ServiceAccount, kube-root-ca.crt) and
// the scheduler binding a pod that runs there; and that
// `systemctl restart kubelet` restarts unitlet-config alone and no container of the control
// plane. It logs kubeadm init's duration and the time to Ready.
//
// The stack's containerd runs on the host, so the static pods' hostPath volumes are host
// paths: the machine's /etc/kubernetes is a host directory (harness.KubeadmEtcKubernetes),
// and kubeadm's own patches (InitConfiguration patches.directory) point the volumes that
// name /etc/kubernetes at it. On a host where unitlet and containerd share one filesystem
// no patch is needed.
func TestKubeadmInit(t *testing.T) {
	node := kubeadmNode(t)
	if st := activeState(t, node, "kubelet.service"); st == "active" {
		t.Fatalf("kubelet.service on %s is %s: kubeadm init needs a node that no cluster uses (TestKubeadmJoin ends with kubeadm reset)", node, st)
	}
	addr := hostIPv4(t)
	etc := harnessEtc(node)
	kubeletConfig, err := stack.KubeadmKubeletConfig(node)
	if err != nil {
		t.Fatal(err)
	}

	// The patches: the hostPath volumes that name /etc/kubernetes, at its host directory.
	patches := map[string]map[string]string{
		"etcd":                    {"etcd-certs": etc + "/pki/etcd"},
		"kube-apiserver":          {"k8s-certs": etc + "/pki"},
		"kube-controller-manager": {"k8s-certs": etc + "/pki", "kubeconfig": etc + "/controller-manager.conf"},
		"kube-scheduler":          {"kubeconfig": etc + "/scheduler.conf"},
	}
	const patchDir = "/root/kubeadm-patches"
	stack.InNode(t, node, "mkdir", "-p", patchDir)
	for component, volumes := range patches {
		var b strings.Builder
		b.WriteString("# unitlet kubeadmtest: the stack's containerd mounts hostPath volumes from the host.\nspec:\n  volumes:\n")
		for _, name := range slices.Sorted(maps.Keys(volumes)) {
			fmt.Fprintf(&b, "  - name: %s\n    hostPath:\n      path: %s\n", name, volumes[name])
		}
		writeInNode(t, node, patchDir+"/"+component+"+strategic.yaml", b.String())
	}

	config := fmt.Sprintf(`apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
localAPIEndpoint:
  advertiseAddress: %s
  bindPort: 6443
nodeRegistration:
  name: %s
  criSocket: %s
  ignorePreflightErrors: [%s]
patches:
  directory: %s
skipPhases: [%s]
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
clusterName: unitlet-kubeadm-init
kubernetesVersion: %s
# The images the harness builds from its own binaries and imports into the stack's containerd.
imageRepository: %s
networking:
  dnsDomain: cluster.local
etcd:
  local:
    dataDir: %s
    imageTag: %s
---
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# What the harness's nspawn machines need (harness.KubeadmKubeletConfig).
%s`, addr, node, stack.RuntimeEndpoint(), strings.Join(skippedPreflightChecks, ", "), patchDir, strings.Join(skippedInitPhases, ", "),
		harness.KubernetesVersion, harness.KubeadmImageRepository, stack.KubeadmEtcdDataDir(node), harness.KubeadmEtcdImageTag, kubeletConfig)
	writeInNode(t, node, "/root/kubeadm-init.yaml", config)
	t.Logf("kubeadm init's configuration:\n%s", config)

	start := time.Now()
	out, err := stack.Exec(node, []string{"timeout", "900", "kubeadm", "init", "--config=/root/kubeadm-init.yaml", "--v=1"}).CombinedOutput()
	took := time.Since(start)
	if err != nil {
		t.Fatalf("kubeadm init on %s failed after %s: %v\n%s\n== the static pods' hostPath volumes:\n%s\n== the runtime's containers:\n%s\n== the node's journal (kubelet.service, unitlet's units):\n%s",
			node, took.Round(100*time.Millisecond), err, out, manifestHostPaths(t, node), runtimeContainers(t), journal(node))
	}
	t.Logf("kubeadm init on %s: exit 0 in %s\n%s", node, took.Round(100*time.Millisecond), out)
	for _, check := range skippedPreflightChecks {
		if !strings.Contains(string(out), "[WARNING "+check+"]") {
			t.Errorf("kubeadm init printed no [WARNING %s]: is the check still failing? If it passes now, stop skipping it", check)
		}
	}

	// unitlet-certs seeded its client store with kubelet.conf's inline certificate, as the
	// kubelet does, so kubeadm's kubelet-finalize pointed kubelet.conf at the rotatable
	// file (without it the node's certificate would expire unrotated).
	if !strings.Contains(string(out), `[kubelet-finalize] Updating "/etc/kubernetes/kubelet.conf" to point to a rotatable kubelet client certificate and key`) {
		t.Errorf("kubeadm init did not point kubelet.conf at a rotatable certificate (kubelet-finalize found no /var/lib/kubelet/pki/kubelet-client-current.pem)")
	}
	if conf := stack.InNode(t, node, "cat", "/etc/kubernetes/kubelet.conf"); !strings.Contains(conf, "client-certificate: /var/lib/kubelet/pki/kubelet-client-current.pem") {
		t.Errorf("/etc/kubernetes/kubelet.conf after kubeadm init names no /var/lib/kubelet/pki/kubelet-client-current.pem:\n%s", conf)
	}

	// The new cluster, through kubeadm's admin.conf.
	cfg, err := harness.RESTConfig(filepath.Join(etc, "admin.conf"))
	if err != nil {
		t.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	stack.WaitFor(t, 3*time.Minute, "node "+node+" Ready in the cluster kubeadm init made", func(ctx context.Context) (bool, string) {
		n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return ready(n), fmt.Sprintf("%v", n.Status.Conditions)
	})
	t.Logf("timings: kubeadm init %s; init start to node Ready %s", took.Round(100*time.Millisecond), time.Since(start).Round(100*time.Millisecond))

	// The services with an API client made from the inline certificate (certs, podsync,
	// status, volumes) restart once to use the file kubelet.conf now names.
	stack.WaitFor(t, time.Minute, "unitlet's API clients restarted for kubelet.conf's new credentials", func(context.Context) (bool, string) {
		var waiting []string
		for _, svc := range []string{"certs", "podsync", "status", "volumes"} {
			out, _ := stack.Exec(node, []string{"journalctl", "--no-pager", "-o", "cat", "-u", "unitlet-" + svc + ".service", "--grep", "stopped to start again"}).CombinedOutput()
			if !strings.Contains(string(out), kube.CredentialsChanged) {
				waiting = append(waiting, svc)
			}
		}
		return len(waiting) == 0, fmt.Sprintf("not yet restarted: %v", waiting)
	})

	body, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
	if err != nil || string(body) != "ok" {
		t.Errorf("GET /readyz of the new API server: %q, %v", body, err)
	}
	n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := n.Labels["node-role.kubernetes.io/control-plane"]; !ok {
		t.Errorf("node %s labels %v: no node-role.kubernetes.io/control-plane (kubeadm's mark-control-plane)", node, n.Labels)
	}
	if !slices.ContainsFunc(n.Spec.Taints, func(tn corev1.Taint) bool { return tn.Key == "node-role.kubernetes.io/control-plane" }) {
		t.Errorf("node %s taints %v: no node-role.kubernetes.io/control-plane", node, n.Spec.Taints)
	}

	// The static pods run on unitlet, their mirror pods Running and Ready.
	mirrors := func(ctx context.Context) (map[string]*corev1.Pod, string) {
		got := map[string]*corev1.Pod{}
		var state []string
		for _, c := range controlPlaneComponents {
			p, err := client.CoreV1().Pods("kube-system").Get(ctx, c+"-"+node, metav1.GetOptions{})
			if err != nil {
				state = append(state, err.Error())
				continue
			}
			got[c] = p
			state = append(state, fmt.Sprintf("%s: %s ready=%v", p.Name, p.Status.Phase, podReady(p)))
		}
		return got, strings.Join(state, "; ")
	}
	stack.WaitFor(t, 3*time.Minute, "the control plane's mirror pods Running and Ready", func(ctx context.Context) (bool, string) {
		got, state := mirrors(ctx)
		for _, c := range controlPlaneComponents {
			if p := got[c]; p == nil || p.Status.Phase != corev1.PodRunning || !podReady(p) {
				return false, state
			}
		}
		return true, state
	})
	before, _ := mirrors(ctx)
	for _, c := range controlPlaneComponents {
		p := before[c]
		if p.Annotations["kubernetes.io/config.mirror"] == "" {
			t.Errorf("pod %s has no kubernetes.io/config.mirror annotation: not a mirror pod", p.Name)
		}
		for _, cs := range p.Status.ContainerStatuses {
			t.Logf("%s: container %s %s, restarts %d", p.Name, cs.Name, cs.ContainerID, cs.RestartCount)
		}
	}

	// The controller-manager at work: the default ServiceAccount and kube-root-ca.crt in
	// default; the scheduler binds a pod that tolerates the control-plane taint, and it runs.
	stack.WaitFor(t, 2*time.Minute, "the controller-manager's default ServiceAccount and kube-root-ca.crt", func(ctx context.Context) (bool, string) {
		if _, err := client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{}); err != nil {
			return false, err.Error()
		}
		if _, err := client.CoreV1().ConfigMaps("default").Get(ctx, "kube-root-ca.crt", metav1.GetOptions{}); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	// No service-account token: unitlet-volumes runs in the machine, whose tmpfs mounts the
	// host's containerd does not see (docs/install.md, "kubeadm").
	pod := sleeper("kubeadm-init-pod", node)
	pod.Spec.Tolerations = []corev1.Toleration{{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	podStart := time.Now()
	if _, err := client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRunning(t, client, pod.Name)
	t.Logf("timings: pod created to Running on the control-plane node: %s", time.Since(podStart).Round(100*time.Millisecond))

	// unitlet-certs restarted itself when kubelet.conf named the store's file, and rotates
	// the client certificate: a rotation now is signed by the new cluster's
	// controller-manager, the CSR approved as kubeadm's RBAC allows a node's renewal.
	var rotated string
	stack.WaitFor(t, 2*time.Minute, "unitletctl certs rotate client", func(context.Context) (bool, string) {
		out, err := stack.Exec(node, []string{"unitletctl", "certs", "rotate", "client", "--wait=60s"}).CombinedOutput()
		rotated = strings.TrimSpace(string(out))
		return err == nil, rotated
	})
	t.Logf("unitletctl certs rotate client on %s: %s", node, rotated)

	// systemctl restart kubelet: unitlet-config alone restarts; the control plane's
	// containers stay.
	restartKubelet(t, node, client)
	after, state := mirrors(ctx)
	for _, c := range controlPlaneComponents {
		b, a := before[c], after[c]
		if a == nil {
			t.Errorf("%s after systemctl restart kubelet: %s", c, state)
			continue
		}
		if !slices.EqualFunc(b.Status.ContainerStatuses, a.Status.ContainerStatuses, func(x, y corev1.ContainerStatus) bool {
			return x.ContainerID == y.ContainerID && x.RestartCount == y.RestartCount
		}) {
			t.Errorf("%s's containers changed across systemctl restart kubelet: %+v → %+v", a.Name, b.Status.ContainerStatuses, a.Status.ContainerStatuses)
		}
	}
}

// harnessEtc is the host directory that is the machine's /etc/kubernetes.
func harnessEtc(node string) string { return stack.KubeadmEtcKubernetes(node) }

// hostIPv4 is the address kubeadm init advertises: the source address of the host's
// default route, or else its first global IPv4 address (the machine shares the host's
// network).
func hostIPv4(t *testing.T) string {
	t.Helper()
	if out, err := exec.Command("ip", "-4", "-o", "route", "get", "192.0.2.1").Output(); err == nil {
		f := strings.Fields(string(out))
		if i := slices.Index(f, "src"); i >= 0 && i+1 < len(f) {
			return f[i+1]
		}
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && ipn.IP.IsGlobalUnicast() {
			return ipn.IP.String()
		}
	}
	t.Fatal("this host has no IPv4 address but loopback: kubeadm init needs one to advertise the API server on")
	return ""
}

// writeInNode writes text into path in node's machine, readable by root only.
func writeInNode(t *testing.T, node, path, text string) {
	t.Helper()
	cmd := stack.Exec(node, []string{"sh", "-c", `umask 077 && cat >"$0"`, path})
	cmd.Stdin = strings.NewReader(text)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("write %s in %s: %v\n%s", path, node, err, out)
	}
}

// manifestHostPaths lists the hostPath volumes of the static pods kubeadm wrote, and
// whether each exists on the host, where the runtime mounts them from.
func manifestHostPaths(t *testing.T, node string) string {
	dir := filepath.Join(harnessEtc(node), "manifests")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, e := range entries {
		raw, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			fmt.Fprintf(&b, "%s: %v\n", e.Name(), err)
			continue
		}
		var p corev1.Pod
		if err := yaml.Unmarshal(raw, &p); err != nil {
			fmt.Fprintf(&b, "%s: %v\n", e.Name(), err)
			continue
		}
		for _, v := range p.Spec.Volumes {
			if v.HostPath == nil {
				continue
			}
			_, err := os.Stat(v.HostPath.Path)
			fmt.Fprintf(&b, "%s: %s %s (on the host: %v)\n", e.Name(), v.Name, v.HostPath.Path, errOrOK(err))
		}
	}
	return b.String()
}

func errOrOK(err error) string {
	if err != nil {
		return err.Error()
	}
	return "exists"
}

// runtimeContainers lists the containers of the stack's containerd with their states.
func runtimeContainers(t *testing.T) string {
	rt, err := stack.CRI()
	if err != nil {
		return err.Error()
	}
	defer rt.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := rt.Runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, c := range resp.GetContainers() {
		fmt.Fprintf(&b, "%.13s %s (pod %s/%s) %s attempt %d\n", c.GetId(), c.GetMetadata().GetName(),
			c.GetLabels()["io.kubernetes.pod.namespace"], c.GetLabels()["io.kubernetes.pod.name"], c.GetState(), c.GetMetadata().GetAttempt())
	}
	return b.String()
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
