// Package kubeadmtest tests `kubeadm join` on a node with unitlet installed from its Debian
// packages, unitlet-kubeadm among them (integration/stacks/kubeadm.yaml, docs/install.md's
// "kubeadm" section): `make test-kubeadm`.
package kubeadmtest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/unitlet/unitlet/integration/harness"
)

var stack *harness.Harness

func TestMain(m *testing.M) {
	os.Exit(harness.MainStack(m, "kubeadm.yaml", func(h *harness.Harness) { stack = h }))
}

// The preflight checks the join skips, each for a reason that holds on any unitlet node
// (docs/install.md, "kubeadm"):
//   - KubeletVersion runs `kubelet --version` to compare the kubelet with the control plane:
//     there is no kubelet binary on a unitlet node, and unitlet is not a kubelet release.
//   - SystemVerification runs `kubelet --version` first too (its cgroup validator depends on
//     the kubelet's version) and fails on it before checking anything else.
//
// Nothing else fails: the node's Hostname and Service-Kubelet checks warn at most (the
// machine's name resolves nowhere), Port-10250 passes as unitlet-status does not listen
// before the join, CRI and ContainerRuntimeVersion reach the stack's containerd (1.6 has
// no RuntimeConfig call, which kubeadm v1.36 only warns about).
var skippedPreflightChecks = []string{"KubeletVersion", "SystemVerification"}

// TestKubeadmJoin prepares the stack's control plane as `kubeadm init` leaves it for
// workers (its upload-config and bootstrap-token phases, run with the admin's kubeconfig),
// then runs `kubeadm join` with a bootstrap token on the kubeadm node, where unitlet is
// installed and stopped: the join must complete, starting unitlet through
// kubelet.service; unitlet reads kubeadm's config.yaml, kubeadm-flags.env and
// bootstrap-kubelet.conf, bootstraps kubelet.conf, answers kubeadm's /healthz on 10248,
// and the node turns Ready and runs a pod. `systemctl restart kubelet` (as kubeadm and
// administrators do) then restarts unitlet-config alone, and the node stays Ready. It logs
// the join's duration and the time from its start to Ready.
func TestKubeadmJoin(t *testing.T) {
	node := kubeadmNode(t)
	client, err := stack.AdminClient()
	if err != nil {
		t.Fatal(err)
	}
	kubeadm := harness.KubeadmBinary()
	if _, err := os.Stat(kubeadm); err != nil {
		t.Fatalf("kubeadm: %v (the harness builds it for a kubeadm node: unitlet-harness build, or make harness-binaries)", err)
	}
	cp := stack.Stack().ControlPlane
	endpoint := fmt.Sprintf("127.0.0.1:%d", cp.APIServerPort)
	ctx := context.Background()

	// The control plane as kubeadm init leaves it for a join: the kubeadm-config and
	// kubelet-config ConfigMaps with their RBAC, the bootstrap token, the RBAC that lets
	// bootstrap tokens post CSRs and have them approved, the cluster-info ConfigMap in
	// kube-public (which the stack's controller-manager signs: bootstrapsigner is on).
	kubeletConfig, err := stack.KubeadmKubeletConfig(node)
	if err != nil {
		t.Fatal(err)
	}
	tokenID, token := randomToken(t)
	dir := t.TempDir()
	initConfig := filepath.Join(dir, "kubeadm-init.yaml")
	writeFile(t, initConfig, fmt.Sprintf(`apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
bootstrapTokens:
- token: %q
  description: unitlet kubeadmtest
  ttl: 1h
nodeRegistration:
  # The control plane's node: kubeadm's phases here never use it but check it.
  name: control-plane
  criSocket: %s
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
clusterName: %s
kubernetesVersion: %s
controlPlaneEndpoint: %s
networking:
  serviceSubnet: %s
  dnsDomain: cluster.local
---
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# What the harness's nspawn machines need (harness.KubeadmKubeletConfig).
%s`, token, stack.RuntimeEndpoint(), stack.Stack().Name, harness.KubernetesVersion, endpoint, cp.ServiceCIDR, kubeletConfig))
	for _, phase := range [][]string{{"upload-config", "kubeadm"}, {"upload-config", "kubelet"}, {"bootstrap-token"}} {
		args := append(append([]string{"init", "phase"}, phase...), "--config="+initConfig, "--kubeconfig="+stack.AdminKubeconfig())
		out, err := exec.Command(kubeadm, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("kubeadm %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		t.Logf("kubeadm %s:\n%s", strings.Join(args[:len(args)-2], " "), strings.TrimSpace(string(out)))
	}
	stack.WaitFor(t, time.Minute, "cluster-info signed for the token (the controller-manager's bootstrapsigner)", func(ctx context.Context) (bool, string) {
		cm, err := client.CoreV1().ConfigMaps("kube-public").Get(ctx, "cluster-info", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		_, ok := cm.Data["jws-kubeconfig-"+tokenID]
		return ok, fmt.Sprintf("keys %v", keys(cm.Data))
	})

	// The join, as docs/install.md gives it, from a JoinConfiguration: the discovery by
	// token and CA hash; the CRI socket of the stack's containerd; two flags for the kubelet
	// that kubeadm writes into kubeadm-flags.env (KUBELET_KUBEADM_ARGS), so that the test
	// sees unitlet-config apply that file.
	const maxPods = 150
	const label = "unitlet.test/joined-by"
	joinConfig := fmt.Sprintf(`apiVersion: kubeadm.k8s.io/v1beta4
kind: JoinConfiguration
discovery:
  bootstrapToken:
    apiServerEndpoint: %s
    token: %q
    caCertHashes: [%q]
nodeRegistration:
  name: %s
  criSocket: %s
  ignorePreflightErrors: [%s]
  kubeletExtraArgs:
  - name: node-labels
    value: %s=kubeadm
  - name: max-pods
    value: "%d"
`, endpoint, token, caCertHash(t), node, stack.RuntimeEndpoint(), strings.Join(skippedPreflightChecks, ", "), label, maxPods)
	write := stack.Exec(node, []string{"sh", "-c", "umask 077 && cat >/root/kubeadm-join.yaml"})
	write.Stdin = strings.NewReader(joinConfig)
	if out, err := write.CombinedOutput(); err != nil {
		t.Fatalf("write the JoinConfiguration into %s: %v\n%s", node, err, out)
	}
	t.Logf("JoinConfiguration:\n%s", joinConfig)

	// Before the join: unitlet installed, kubelet.service enabled, nothing of unitlet's running.
	if got := stack.InNode(t, node, "systemctl", "is-enabled", "kubelet.service"); got != "enabled" {
		t.Fatalf("kubelet.service on %s before the join: %s, want enabled (unitlet-kubeadm's postinst enables it)", node, got)
	}
	for _, svc := range services {
		if st := activeState(t, node, "unitlet-"+svc+".service"); st == "active" {
			t.Fatalf("unitlet-%s on %s is active before the join: the harness must leave starting unitlet to kubeadm", svc, node)
		}
	}

	// Bounded above kubeadm's own waits (4 minutes for the kubelet's health, 5 for TLS
	// bootstrap) by coreutils' timeout in the machine.
	start := time.Now()
	joinOut, err := stack.Exec(node, []string{"timeout", "600", "kubeadm", "join", "--config=/root/kubeadm-join.yaml", "--v=1"}).CombinedOutput()
	joined := time.Since(start)
	if err != nil {
		t.Fatalf("kubeadm join on %s failed after %s: %v\n%s\n== the node's journal (kubelet.service, unitlet's units):\n%s",
			node, joined.Round(100*time.Millisecond), err, joinOut, journal(node))
	}
	t.Logf("kubeadm join on %s: exit 0 in %s\n%s", node, joined.Round(100*time.Millisecond), joinOut)
	for _, check := range skippedPreflightChecks {
		if !strings.Contains(string(joinOut), "[WARNING "+check+"]") {
			t.Errorf("kubeadm join printed no [WARNING %s]: is the check still failing? If it passes now, stop skipping it", check)
		}
	}

	// The node turns Ready.
	stack.WaitFor(t, 3*time.Minute, "node "+node+" Ready after kubeadm join", func(ctx context.Context) (bool, string) {
		n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return ready(n), fmt.Sprintf("%v", n.Status.Conditions)
	})
	t.Logf("timings: kubeadm join %s; join start to node Ready %s", joined.Round(100*time.Millisecond), time.Since(start).Round(100*time.Millisecond))

	// kubeadm's systemctl calls started unitlet: kubelet.service, the target and every service.
	for _, unit := range append([]string{"kubelet.service", "unitlet.target"}, unitNames()...) {
		if st := activeState(t, node, unit); st != "active" {
			t.Errorf("%s on %s after the join: %s, want active\n%s", unit, node, st, journal(node))
		}
	}
	// unitlet-status answers kubeadm's health check (config.yaml's healthzBindAddress and
	// healthzPort, kubeadm's defaults; the machine shares the host's network).
	if body, err := get("http://127.0.0.1:10248/healthz"); err != nil || body != "ok" {
		t.Errorf("GET http://127.0.0.1:10248/healthz: %q, %v; want ok", body, err)
	}

	// unitlet-config's configuration comes from kubeadm's files: config.yaml as its file, the
	// flags of kubeadm-flags.env over it (its --max-pods a config field, its --node-labels
	// the node's labels), the paths from unitlet-kubeadm's drop-in and /etc/default/kubelet.
	cfgOut := stack.InNode(t, node, "unitletctl", "config")
	t.Logf("unitletctl config on %s:\n%s", node, firstLines(cfgOut, 14))
	for _, want := range []string{
		"#   file /var/lib/kubelet/config.yaml (",
		"#   flags --max-pods (/var/lib/kubelet/kubeadm-flags.env)\n",
		"#   label " + label + "=kubeadm\n",
		"# paths: root-dir " + stack.NodeRootDir(node) + ", cert-dir /var/lib/kubelet/pki, kubeconfig /etc/kubernetes/kubelet.conf, bootstrap-kubeconfig /etc/kubernetes/bootstrap-kubelet.conf\n",
	} {
		if !strings.Contains(cfgOut, want) {
			t.Errorf("unitletctl config on %s: no line %q", node, want)
		}
	}
	n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n.Labels[label] != "kubeadm" {
		t.Errorf("node %s has labels %v: want %s=kubeadm from kubeadm-flags.env's --node-labels", node, n.Labels, label)
	}
	if got := n.Status.Capacity[corev1.ResourcePods]; got.Cmp(*resource.NewQuantity(maxPods, resource.DecimalSI)) != 0 {
		t.Errorf("node %s pods capacity %s: want %d from kubeadm-flags.env's --max-pods", node, got.String(), maxPods)
	}
	// TLS bootstrap from kubeadm's bootstrap-kubelet.conf (which kubeadm removes after the
	// join) wrote kubelet.conf naming the rotated client certificate.
	if conf := stack.InNode(t, node, "cat", "/etc/kubernetes/kubelet.conf"); !strings.Contains(conf, "/var/lib/kubelet/pki/kubelet-client-current.pem") {
		t.Errorf("/etc/kubernetes/kubelet.conf on %s names no /var/lib/kubelet/pki/kubelet-client-current.pem:\n%s", node, conf)
	}
	stack.InNode(t, node, "test", "-s", "/var/lib/kubelet/pki/kubelet-client-current.pem")

	// A pod the scheduler puts on the node runs.
	podStart := time.Now()
	pod := sleeper("kubeadm-join-pod", node)
	if _, err := client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRunning(t, client, pod.Name)
	t.Logf("timings: pod created to Running on %s: %s", node, time.Since(podStart).Round(100*time.Millisecond))

	// systemctl restart kubelet restarts unitlet-config alone; the node stays Ready, the
	// pod's container is not restarted.
	restartKubelet(t, node, client)
	p, err := client.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Status.Phase != corev1.PodRunning || len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Errorf("pod %s after systemctl restart kubelet: phase %s, containers %+v; want Running, not restarted", pod.Name, p.Status.Phase, p.Status.ContainerStatuses)
	}

	// kubeadm reset, as an administrator takes the node out of the cluster (and as
	// TestKubeadmInit needs it): kubeadm stops kubelet.service, which stops unitlet.target
	// and every service; removes every pod of the runtime through CRI; removes its files.
	// Its --cri-socket: without kubeadm's configuration (the admin's kubeconfig is not on a
	// worker) reset takes containerd's default socket, and the stack's is elsewhere.
	resetOut, err := stack.Exec(node, []string{"timeout", "300", "kubeadm", "reset", "--force", "--cri-socket=" + stack.RuntimeEndpoint(), "--v=1"}).CombinedOutput()
	if err != nil {
		t.Fatalf("kubeadm reset on %s: %v\n%s\n%s", node, err, resetOut, journal(node))
	}
	t.Logf("kubeadm reset on %s:\n%s", node, resetOut)
	for _, unit := range append([]string{"kubelet.service", "unitlet.target"}, unitNames()...) {
		if st := activeState(t, node, unit); st == "active" || st == "activating" {
			t.Errorf("%s on %s after kubeadm reset: %s, want stopped", unit, node, st)
		}
	}
	if body, err := get("http://127.0.0.1:10248/healthz"); err == nil {
		t.Errorf("GET http://127.0.0.1:10248/healthz after kubeadm reset answered %q: unitlet-status still serves", body)
	}
	for _, f := range []string{"/etc/kubernetes/kubelet.conf", "/var/lib/kubelet/config.yaml", "/var/lib/kubelet/pki/kubelet-client-current.pem"} {
		if out, err := stack.Exec(node, []string{"test", "-e", f}).CombinedOutput(); err == nil {
			t.Errorf("%s on %s after kubeadm reset: still there%s", f, node, out)
		}
	}
	if left := runtimeContainers(t); left != "" {
		t.Errorf("containers left in the runtime after kubeadm reset:\n%s", left)
	}
}

// restartKubelet runs `systemctl restart kubelet` in node, as kubeadm and administrators
// do: unitlet-config alone restarts (a new main PID, active again), every other service
// keeps its process, and the node stays Ready in client's cluster for the next 20 s (its
// status and lease keep being written through the new unitlet-config).
func restartKubelet(t *testing.T, node string, client kubernetes.Interface) {
	t.Helper()
	before := mainPIDs(t, node)
	stack.InNode(t, node, "systemctl", "restart", "kubelet")
	stack.WaitFor(t, time.Minute, "unitlet-config active again with a new process after systemctl restart kubelet", func(context.Context) (bool, string) {
		now := mainPIDs(t, node)
		st := activeState(t, node, "unitlet-config.service")
		return st == "active" && now["config"] != "0" && now["config"] != before["config"], fmt.Sprintf("%s, main PIDs %v (before %v)", st, now, before)
	})
	after := mainPIDs(t, node)
	for _, svc := range services {
		if svc != "config" && after[svc] != before[svc] {
			t.Errorf("systemctl restart kubelet changed unitlet-%s's main PID %s → %s: only unitlet-config must restart", svc, before[svc], after[svc])
		}
	}
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(2 * time.Second) {
		n, err := client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("the API server after systemctl restart kubelet: %v", err)
		}
		if !ready(n) {
			t.Fatalf("node %s not Ready after systemctl restart kubelet: %v\n%s", node, n.Status.Conditions, journal(node))
		}
	}
}

// services are the unitlet services the unitlet meta-package installs.
var services = []string{"config", "certs", "podsync", "status", "volumes", "eviction"}

func unitNames() []string {
	var out []string
	for _, s := range services {
		out = append(out, "unitlet-"+s+".service")
	}
	return out
}

// kubeadmNode is the stack's kubeadm node.
func kubeadmNode(t *testing.T) string {
	t.Helper()
	for _, n := range stack.Stack().Nodes {
		if n.Kubeadm {
			return n.Name
		}
	}
	t.Fatalf("stack %s has no node with kubeadm: true (integration/stacks/kubeadm.yaml has kubeadm-1)", stack.Stack().Name)
	return ""
}

// randomToken is a bootstrap token, its ID and the whole "<id>.<secret>".
func randomToken(t *testing.T) (id, token string) {
	t.Helper()
	const chars = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 22)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	for i := range b {
		b[i] = chars[int(b[i])%len(chars)]
	}
	return string(b[:6]), string(b[:6]) + "." + string(b[6:])
}

// caCertHash is kubeadm's --discovery-token-ca-cert-hash of the stack's CA: sha256 of its
// public key info.
func caCertHash(t *testing.T) string {
	t.Helper()
	cfg, err := harness.RESTConfig(stack.AdminKubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(cfg.TLSClientConfig.CAFile)
	if err != nil {
		t.Fatalf("the stack's CA (the admin kubeconfig's certificate-authority): %v", err)
	}
	block, _ := pem.Decode(raw)
	if block == nil {
		t.Fatalf("%s: no PEM block", cfg.TLSClientConfig.CAFile)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// activeState is a unit's ActiveState in node.
func activeState(t *testing.T, node, unit string) string {
	t.Helper()
	out, _ := stack.Exec(node, []string{"systemctl", "show", "-P", "ActiveState", unit}).Output()
	return strings.TrimSpace(string(out))
}

// mainPIDs are the main PIDs of the unitlet services in node, by service.
func mainPIDs(t *testing.T, node string) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, svc := range services {
		out, _ := stack.Exec(node, []string{"systemctl", "show", "-P", "MainPID", "unitlet-" + svc + ".service"}).Output()
		m[svc] = strings.TrimSpace(string(out))
	}
	return m
}

// journal is the end of node's journal for kubelet.service and unitlet's units.
func journal(node string) string {
	out, _ := stack.Exec(node, []string{"journalctl", "--no-pager", "-o", "short-monotonic", "-n", "150", "-u", "kubelet.service", "-u", "unitlet*"}).CombinedOutput()
	return string(out)
}

func ready(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// sleeper is a pod of the local busybox image that sleeps, for the scheduler to place on
// node (the stack's only node): no service-account token, so no volume is mounted.
func sleeper(name, node string) *corev1.Pod {
	grace := int64(1)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			NodeSelector:                  map[string]string{"kubernetes.io/hostname": node},
			AutomountServiceAccountToken:  new(bool),
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{
				Name: "sleep", Image: harness.BusyboxImage, ImagePullPolicy: corev1.PullNever,
				Command: []string{"sleep", "3600"},
			}},
		},
	}
}

func waitRunning(t *testing.T, client kubernetes.Interface, name string) {
	t.Helper()
	stack.WaitFor(t, 2*time.Minute, "pod "+name+" Running", func(ctx context.Context) (bool, string) {
		p, err := client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return p.Status.Phase == corev1.PodRunning, fmt.Sprintf("node %q, phase %s, %+v", p.Spec.NodeName, p.Status.Phase, p.Status.Conditions)
	})
}

func get(url string) (string, error) {
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return string(b), fmt.Errorf("%s", resp.Status)
	}
	return strings.TrimSpace(string(b)), err
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func firstLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, "\n")
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}
