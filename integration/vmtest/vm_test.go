// Package vmtest tests unitlet on a vm node (integration/stacks/vm-node.yaml): a virtual
// machine with its own kernel and cgroup v2, where each unit's resource limits are enforced
// as on a real host. It runs against the real VM: `make test-vm`.
package vmtest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/unitlet/unitlet/integration/harness"
	"github.com/unitlet/unitlet/shared/bus"
)

var stack *harness.Harness

func TestMain(m *testing.M) {
	os.Exit(harness.MainStack(m, "vm-node.yaml", func(h *harness.Harness) { stack = h }))
}

// vmNode is the stack's vm node and its services, its guest running: every test asks for
// it first (TestEveryTestAsksForTheVMNode). A guest a test powered off
// (TestGracefulNodeShutdownOnPoweroff) is booted again here, for the test that asks next.
func vmNode(t testing.TB) harness.Node {
	t.Helper()
	for _, n := range stack.Stack().Nodes {
		if n.Backend == "vm" {
			if poweredOff[n.Name] {
				bootAgain(t, n.Name)
				delete(poweredOff, n.Name)
			}
			return n
		}
	}
	t.Fatalf("stack %s has no node with backend vm (integration/stacks/vm-node.yaml has vm-1)", stack.Stack().Name)
	return harness.Node{}
}

// poweredOff holds the vm nodes whose guest a test powered off (the tests run one at a
// time).
var poweredOff = map[string]bool{}

func admin(t testing.TB) kubernetes.Interface {
	t.Helper()
	c, err := stack.AdminClient()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// unitLimits are the resource settings of a shipped unit file, the last assignment of each
// (as systemd reads them); "" when the file does not set it.
func unitLimits(t *testing.T, svc string) map[string]string {
	t.Helper()
	path := filepath.Join(stack.Repo(), "systemd", "unitlet-"+svc+".service")
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), "=")
		if !ok {
			continue
		}
		switch k {
		case "MemoryMax", "CPUQuota", "TasksMax":
			got[k] = strings.TrimSpace(v)
		}
	}
	return got
}

// wantMemoryMax is memory.max for a MemoryMax= value: bytes with K, M, G, T suffixes
// (1024-based), or "max" for none or infinity.
func wantMemoryMax(t *testing.T, file, v string) string {
	t.Helper()
	if v == "" || v == "infinity" {
		return "max"
	}
	mult := int64(1)
	switch v[len(v)-1] {
	case 'K':
		mult = 1 << 10
	case 'M':
		mult = 1 << 20
	case 'G':
		mult = 1 << 30
	case 'T':
		mult = 1 << 40
	}
	if mult > 1 {
		v = v[:len(v)-1]
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatalf("%s: MemoryMax=%s: want bytes with an optional K, M, G or T (this test does not read percentages)", file, v)
	}
	return strconv.FormatInt(n*mult, 10)
}

// wantCPUMax is cpu.max for a CPUQuota= value with systemd's default period of 100 ms.
func wantCPUMax(t *testing.T, file, v string) string {
	t.Helper()
	if v == "" {
		return "max 100000"
	}
	pct, err := strconv.ParseFloat(strings.TrimSuffix(v, "%"), 64)
	if err != nil || !strings.HasSuffix(v, "%") {
		t.Fatalf("%s: CPUQuota=%s: want a percentage", file, v)
	}
	return fmt.Sprintf("%d 100000", int64(pct*1000))
}

// cgroupFile reads a file of a unit's cgroup in the guest.
func cgroupFile(t *testing.T, node, unit, file string) string {
	t.Helper()
	cg := stack.UnitProps(t, node, unit, "ControlGroup")["ControlGroup"]
	if cg == "" {
		t.Fatalf("%s on %s has no cgroup (not running?)", unit, node)
	}
	return stack.InNode(t, node, "cat", "/sys/fs/cgroup"+cg+"/"+file)
}

func TestVMHasCgroupV2WithControllers(t *testing.T) {
	node := vmNode(t).Name
	if fs := stack.InNode(t, node, "stat", "-f", "-c", "%T", "/sys/fs/cgroup"); fs != "cgroup2fs" {
		t.Fatalf("/sys/fs/cgroup on %s is %s, want cgroup2fs (booted with systemd.unified_cgroup_hierarchy=1)", node, fs)
	}
	ctrl := stack.InNode(t, node, "cat", "/sys/fs/cgroup/system.slice/cgroup.subtree_control")
	for _, c := range []string{"memory", "cpu", "pids"} {
		if !strings.Contains(" "+ctrl+" ", " "+c+" ") {
			t.Errorf("system.slice on %s does not delegate the %s controller to its units: %q", node, c, ctrl)
		}
	}
}

// TestVMNodeJoinedByTLSBootstrap: the guest was given the bootstrap token alone; its
// unitlet-config, sandboxed by its unit as this kernel enforces it (cgroup v2: the unit's
// IP address filters apply here, unlike in an nspawn machine), reached the API server at
// 10.0.2.2, and the node's services use the certificate it was issued.
func TestVMNodeJoinedByTLSBootstrap(t *testing.T) {
	n := vmNode(t)
	if !n.Bootstrap {
		t.Fatalf("%s in %s does not set bootstrap: true", n.Name, stack.Stack().Name)
	}
	var st struct {
		State   string `json:"state"`
		CSRName string `json:"csrName"`
	}
	out := stack.InNode(t, n.Name, "unitletctl", "config", "bootstrap", "-o", "json")
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("unitletctl config bootstrap -o json: %v\n%s", err, out)
	}
	// DONE from the unitlet-config that bootstrapped; NOT_NEEDED from one started since (the
	// upgrade test restarts it), which finds the kubeconfig usable. Either way the client
	// certificate in use must be the one the API server issued to a CSR made with the
	// bootstrap token.
	if st.State != "BOOTSTRAP_STATE_DONE" && st.State != "BOOTSTRAP_STATE_NOT_NEEDED" {
		t.Fatalf("TLS bootstrap on %s: %s, want DONE (or NOT_NEEDED after a restart):\n%s", n.Name, st.State, out)
	}
	inUse := firstCertificate(t, stack.InNode(t, n.Name, "cat", "/var/lib/unitlet/pki/kubelet-client-current.pem"))
	csrs, err := admin(t).CertificatesV1().CertificateSigningRequests().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var issuer *certificatesv1.CertificateSigningRequest
	for i, csr := range csrs.Items {
		if len(csr.Status.Certificate) > 0 && bytes.Equal(firstCertificate(t, string(csr.Status.Certificate)), inUse) {
			issuer = &csrs.Items[i]
		}
	}
	if issuer == nil {
		t.Fatalf("no CSR in the API issued %s's client certificate in use (%d CSRs)", n.Name, len(csrs.Items))
	}
	if !strings.HasPrefix(issuer.Spec.Username, "system:bootstrap:") || (st.CSRName != "" && st.CSRName != issuer.Name) {
		t.Errorf("CSR %s issued the certificate in use: by %q, unitlet-config names CSR %q; want a bootstrap token's, the one unitlet-config names", issuer.Name, issuer.Spec.Username, st.CSRName)
	}
	// The kubeconfig it wrote points at the rotating link in the cert dir, 0600.
	if mode := stack.InNode(t, n.Name, "stat", "-L", "-c", "%a", "/var/lib/unitlet/kubeconfig", "/var/lib/unitlet/pki/kubelet-client-current.pem"); mode != "600\n600" {
		t.Errorf("modes of the kubeconfig and the client certificate in the guest: %q, want 600 each", mode)
	}
}

func TestUnitLimitsAreInTheirCgroups(t *testing.T) {
	n := vmNode(t)
	for _, svc := range n.Services {
		t.Run(svc, func(t *testing.T) {
			unit := "unitlet-" + svc + ".service"
			file := filepath.Join("systemd", unit)
			limits := unitLimits(t, svc)
			if st := stack.UnitProps(t, n.Name, unit, "ActiveState")["ActiveState"]; st != "active" {
				journal, _ := stack.Exec(n.Name, []string{"journalctl", "-u", unit, "-n", "40", "--no-pager"}).CombinedOutput()
				t.Fatalf("%s on %s is %s, want active; its journal:\n%s", unit, n.Name, st, journal)
			}
			if got, want := cgroupFile(t, n.Name, unit, "memory.max"), wantMemoryMax(t, file, limits["MemoryMax"]); got != want {
				t.Errorf("%s: memory.max = %s, want %s (%s: MemoryMax=%s)", unit, got, want, file, limits["MemoryMax"])
			}
			if got, want := cgroupFile(t, n.Name, unit, "cpu.max"), wantCPUMax(t, file, limits["CPUQuota"]); got != want {
				t.Errorf("%s: cpu.max = %s, want %s (%s: CPUQuota=%s)", unit, got, want, file, limits["CPUQuota"])
			}
			want := limits["TasksMax"]
			if want == "" || want == "infinity" {
				// Not set: systemd's DefaultTasksMax, which it reports.
				want = stack.UnitProps(t, n.Name, unit, "TasksMax")["TasksMax"]
				if want == "infinity" {
					want = "max"
				}
			}
			if got := cgroupFile(t, n.Name, unit, "pids.max"); got != want {
				t.Errorf("%s: pids.max = %s, want %s (%s: TasksMax=%s)", unit, got, want, file, limits["TasksMax"])
			}
			pid := stack.UnitProps(t, n.Name, unit, "MainPID")["MainPID"]
			if got := strings.TrimSpace(stack.InNode(t, n.Name, "cat", "/proc/"+pid+"/oom_score_adj")); got != "-999" {
				t.Errorf("%s: oom_score_adj of its main process (pid %s) = %s, want -999 (OOMScoreAdjust=)", unit, pid, got)
			}
		})
	}
}

func TestCPUQuotaSetAtRuntimeReachesTheCgroup(t *testing.T) {
	// podsync ships without CPUQuota= (it is on the pods' path); an operator's limit must
	// still reach the kernel.
	n := vmNode(t)
	unit := "unitlet-podsync.service"
	stack.InNode(t, n.Name, "systemctl", "set-property", "--runtime", unit, "CPUQuota=40%")
	defer stack.InNode(t, n.Name, "systemctl", "set-property", "--runtime", unit, "CPUQuota=")
	if got := cgroupFile(t, n.Name, unit, "cpu.max"); got != "40000 100000" {
		t.Errorf("%s after CPUQuota=40%%: cpu.max = %s, want 40000 100000", unit, got)
	}
}

// nodeReady is the vm node's Ready condition.
func nodeReady(t *testing.T, c kubernetes.Interface, node string) corev1.NodeCondition {
	t.Helper()
	n, err := c.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond
		}
	}
	t.Fatalf("node %s has no Ready condition", node)
	return corev1.NodeCondition{}
}

func TestOOMKillOfOneServiceLeavesTheRestAlone(t *testing.T) {
	n := vmNode(t)
	const victim = "certs"
	unit := "unitlet-" + victim + ".service"
	c := admin(t)
	ctx := context.Background()

	// A running pod: the one `up` started at boot.
	pod, err := c.CoreV1().Pods("default").Get(ctx, harness.FirstPodName(n.Name), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pod.Status.Phase != corev1.PodRunning || len(pod.Status.ContainerStatuses) != 1 {
		t.Fatalf("pod %s: %s, want Running with one container", pod.Name, pod.Status.Phase)
	}
	ready := nodeReady(t, c, n.Name)
	if ready.Status != corev1.ConditionTrue {
		t.Fatalf("node %s is not Ready before the test: %s", n.Name, ready.Message)
	}
	others := map[string]string{}
	for _, svc := range n.Services {
		if svc != victim {
			others[svc] = stack.UnitProps(t, n.Name, "unitlet-"+svc+".service", "MainPID")["MainPID"]
		}
	}
	before := stack.UnitProps(t, n.Name, unit, "MainPID", "NRestarts", "MemoryCurrent")
	working, err := strconv.ParseInt(before["MemoryCurrent"], 10, 64)
	if err != nil {
		t.Fatalf("%s MemoryCurrent=%q", unit, before["MemoryCurrent"])
	}
	limit := unitLimits(t, victim)["MemoryMax"]
	if limit == "" {
		limit = "infinity"
	}

	// Below the working set: the kernel reclaims what it can, then kills. The restarts
	// are killed too until the limit is back, so restore it as soon as systemd saw it.
	low := min(working/4, 4<<20) // a Go service with client-go needs more to even start
	t.Logf("%s: working set %d bytes; MemoryMax=%d", unit, working, low)
	stack.InNode(t, n.Name, "systemctl", "set-property", "--runtime", unit, fmt.Sprintf("MemoryMax=%d", low))
	restored := false
	restore := func() {
		if !restored {
			restored = true
			stack.InNode(t, n.Name, "systemctl", "set-property", "--runtime", unit, "MemoryMax="+limit)
		}
	}
	defer restore()
	stack.WaitFor(t, time.Minute, unit+" killed by the kernel's OOM killer", func(ctx context.Context) (bool, string) {
		p := stack.UnitProps(t, n.Name, unit, "Result", "NRestarts", "MainPID")
		return p["Result"] == "oom-kill" || p["NRestarts"] != before["NRestarts"], fmt.Sprint(p)
	})
	restore()

	// systemd's record: the result and the restart.
	journal := stack.InNode(t, n.Name, "journalctl", "-u", unit, "--no-pager", "-o", "cat")
	if !strings.Contains(journal, "Failed with result 'oom-kill'") {
		t.Errorf("the journal of %s does not record Result=oom-kill:\n%s", unit, lastLines(journal, 20))
	}
	kernel := stack.InNode(t, n.Name, "journalctl", "-k", "--no-pager", "-o", "cat")
	if !strings.Contains(kernel, "Killed process") || !strings.Contains(kernel, "unitlet-"+victim) {
		t.Errorf("the kernel log does not show the OOM kill of unitlet-%s:\n%s", victim, lastLines(kernel, 20))
	}
	stack.WaitFor(t, 2*time.Minute, unit+" restarted and healthy under its shipped limit", func(ctx context.Context) (bool, string) {
		p := stack.UnitProps(t, n.Name, unit, "ActiveState", "SubState", "NRestarts", "MainPID")
		if p["ActiveState"] != "active" || p["SubState"] != "running" || p["NRestarts"] == before["NRestarts"] || p["MainPID"] == before["MainPID"] {
			return false, fmt.Sprint(p)
		}
		if out, err := stack.Exec(n.Name, []string{"unitletctl", "status", victim}).CombinedOutput(); err != nil {
			return false, fmt.Sprintf("unitletctl status %s: %v: %s", victim, err, out)
		}
		return true, ""
	})
	if got, want := cgroupFile(t, n.Name, unit, "memory.max"), wantMemoryMax(t, "systemd/"+unit, unitLimits(t, victim)["MemoryMax"]); got != want {
		t.Errorf("%s after the restore: memory.max = %s, want %s", unit, got, want)
	}

	// Nothing else noticed.
	for svc, pid := range others {
		if got := stack.UnitProps(t, n.Name, "unitlet-"+svc+".service", "MainPID")["MainPID"]; got != pid {
			t.Errorf("unitlet-%s restarted meanwhile: MainPID %s, was %s", svc, got, pid)
		}
	}
	after := nodeReady(t, c, n.Name)
	if after.Status != corev1.ConditionTrue || !after.LastTransitionTime.Equal(&ready.LastTransitionTime) {
		t.Errorf("node %s Ready changed: %s since %s (%s), was True since %s", n.Name, after.Status, after.LastTransitionTime, after.Message, ready.LastTransitionTime)
	}
	podAfter, err := c.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	was, now := pod.Status.ContainerStatuses[0], podAfter.Status.ContainerStatuses
	if podAfter.UID != pod.UID || podAfter.Status.Phase != corev1.PodRunning || len(now) != 1 ||
		now[0].ContainerID != was.ContainerID || now[0].RestartCount != was.RestartCount {
		t.Errorf("pod %s was disturbed: %s %+v, was %s %+v", pod.Name, podAfter.Status.Phase, now, pod.Status.Phase, was)
	}
	id := strings.TrimPrefix(was.ContainerID, "containerd://")
	if tasks := stack.InNode(t, n.Name, "ctr", "-n", "k8s.io", "tasks", "ls"); !strings.Contains(tasks, id) {
		t.Errorf("container %s of pod %s is no longer a task of the guest's containerd:\n%s", id, pod.Name, tasks)
	}
}

func TestPodFromTheAPIServerRunsOnTheVM(t *testing.T) {
	n := vmNode(t)
	c := admin(t)
	ctx := context.Background()
	grace := int64(1)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "vm-hello", Namespace: "default"},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{
				Name: "hello", Image: harness.BusyboxImage, ImagePullPolicy: corev1.PullNever,
				Command: []string{"sh", "-c", "echo hello from the vm; exec sleep 100000"},
			}},
		},
	}
	if _, err := c.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.CoreV1().Pods("default").Delete(context.Background(), pod.Name, metav1.DeleteOptions{}) }()
	var got *corev1.Pod
	stack.WaitFor(t, 3*time.Minute, "pod vm-hello Running", func(ctx context.Context) (bool, string) {
		p, err := c.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		got = p
		return p.Status.Phase == corev1.PodRunning, fmt.Sprintf("%s on %q %+v", p.Status.Phase, p.Spec.NodeName, p.Status.ContainerStatuses)
	})
	if got.Spec.NodeName != n.Name {
		t.Errorf("pod vm-hello scheduled to %q, want %s", got.Spec.NodeName, n.Name)
	}
	if !strings.HasPrefix(got.Status.PodIP, "10.88.") {
		t.Errorf("pod vm-hello has IP %q, want one of the guest's bridge (10.88.0.0/16)", got.Status.PodIP)
	}
	id := strings.TrimPrefix(got.Status.ContainerStatuses[0].ContainerID, "containerd://")
	if tasks := stack.InNode(t, n.Name, "ctr", "-n", "k8s.io", "tasks", "ls"); !strings.Contains(tasks, id+" ") || !strings.Contains(tasks, "RUNNING") {
		t.Errorf("container %s is not running in the guest's containerd:\n%s", id, tasks)
	}
}

func TestHarnessHelpersReachTheVM(t *testing.T) {
	n := vmNode(t)
	// Exec: exit codes, standard input and both outputs come back from the guest.
	cmd := stack.Exec(n.Name, []string{"sh", "-c", "read x; echo \"$x on $(hostname)\"; echo to-stderr >&2; exit 7"})
	cmd.Stdin = strings.NewReader("hello\n")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 7 {
		t.Errorf("exec's exit: %v, want exit status 7", err)
	}
	if stdout.String() != "hello on "+n.Name+"\n" || stderr.String() != "to-stderr\n" {
		t.Errorf("exec: stdout %q, stderr %q", stdout.String(), stderr.String())
	}
	// The bus sockets: NodeSocketDir reaches the guest's services, as for the other backends.
	for _, svc := range n.Services {
		conn, err := bus.Dial(stack.NodeSocketDir(n.Name), svc)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		conn.Close()
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("unitlet-%s through %s: %v %v", svc, stack.NodeSocketDir(n.Name), resp.GetStatus(), err)
		}
	}
	// ServicePID is the unit's MainPID in the guest.
	pid, err := stack.ServicePID(n.Name, "podsync")
	if err != nil {
		t.Fatal(err)
	}
	if comm := stack.InNode(t, n.Name, "cat", fmt.Sprintf("/proc/%d/comm", pid)); comm != "unitlet-podsync" {
		t.Errorf("ServicePID(podsync) = %d, which is %q in the guest", pid, comm)
	}
	// Logs: the serial console carries the services' output.
	if logs := stack.Logs(2000, n.Name+"/vm"); !strings.Contains(logs, "unitlet-podsync[") {
		t.Errorf("the vm's log has no line of unitlet-podsync:\n%s", lastLines(logs, 20))
	}
}

func lastLines(s string, n int) string {
	ls := strings.Split(s, "\n")
	if len(ls) > n {
		ls = ls[len(ls)-n:]
	}
	return strings.Join(ls, "\n")
}

// firstCertificate is the DER of the first certificate in the PEM text.
func firstCertificate(t *testing.T, text string) []byte {
	t.Helper()
	rest := []byte(text)
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			t.Fatalf("no certificate in:\n%s", text)
		}
		if b.Type == "CERTIFICATE" {
			return b.Bytes
		}
	}
}
