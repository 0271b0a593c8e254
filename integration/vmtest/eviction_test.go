package vmtest

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/unitlet/unitlet/integration/harness"
	evictionv1 "github.com/unitlet/unitlet/proto/unitlet/eviction/v1"
)

// These tests induce real pressure on the vm node, as the kubelet's node e2e eviction tests
// do: thresholds are set relative to what the node has when the test starts (a drop-in in
// /etc/unitlet/config.d, which unitlet-config reloads and unitlet-eviction follows without a
// restart), then pods use memory, PIDs or disk until a threshold is crossed.

const mi = int64(1) << 20

// evictionState is unitlet-eviction's state, from `unitletctl eviction -o json` in the guest.
func evictionState(t testing.TB, node string) *evictionv1.State {
	t.Helper()
	out := stack.InNode(t, node, "unitletctl", "eviction", "-o", "json")
	st := &evictionv1.State{}
	if err := protojson.Unmarshal([]byte(out), st); err != nil {
		t.Fatalf("unitletctl eviction -o json: %v\n%s", err, out)
	}
	return st
}

// signal is one signal of st; nil when absent.
func signal(st *evictionv1.State, name string) *evictionv1.Signal {
	for _, s := range st.GetSignals() {
		if s.GetName() == name {
			return s
		}
	}
	return nil
}

// available is what a signal measured, as an integer (bytes, inodes or PIDs).
func available(t testing.TB, node, name string) int64 {
	t.Helper()
	var v int64
	stack.WaitFor(t, time.Minute, name+" measured", func(context.Context) (bool, string) {
		s := signal(evictionState(t, node), name)
		if s == nil || !s.GetObserved() {
			return false, fmt.Sprintf("%v", s)
		}
		q, err := resource.ParseQuantity(s.GetAvailable())
		if err != nil {
			return false, err.Error()
		}
		v = q.Value()
		return true, ""
	})
	return v
}

// evictionConfig writes a drop-in with the given KubeletConfiguration fields and waits until
// unitlet-eviction has the threshold want (a signal name and a threshold value, as
// configured); the drop-in is removed when the test ends.
func evictionConfig(t testing.TB, node, yaml, wantSignal, wantValue string) {
	t.Helper()
	const path = "/etc/unitlet/config.d/90-eviction-test.conf"
	doc := "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n" + yaml
	stack.InNode(t, node, "sh", "-c", fmt.Sprintf("cat > %s.tmp <<'EOF'\n%sEOF\nchmod 0600 %s.tmp && mv %s.tmp %s", path, doc, path, path, path))
	t.Cleanup(func() {
		_ = stack.Exec(node, []string{"rm", "-f", path}).Run()
		// Back to the stack's thresholds, and no pressure left, before the next test.
		stack.WaitFor(t, 2*time.Minute, "the test's eviction thresholds gone", func(context.Context) (bool, string) {
			out, _ := stack.Exec(node, []string{"unitletctl", "eviction", "-o", "json"}).CombinedOutput()
			return !strings.Contains(string(out), `"`+wantValue+`"`), ""
		})
		noPressure(t, node)
	})
	noPressure(t, node)
	stack.WaitFor(t, 2*time.Minute, "unitlet-eviction follows the reloaded configuration", func(context.Context) (bool, string) {
		s := signal(evictionState(t, node), wantSignal)
		if s == nil {
			return false, "no " + wantSignal
		}
		for _, th := range s.GetThresholds() {
			if th.GetValue() == wantValue {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%s thresholds %v", wantSignal, s.GetThresholds())
	})
}

// evictionsOf are the evictions in st of pods with the given names.
func evictionsOf(st *evictionv1.State, names ...string) []*evictionv1.Eviction {
	var out []*evictionv1.Eviction
	for _, e := range st.GetEvictions() {
		for _, n := range names {
			if e.GetName() == n {
				out = append(out, e)
			}
		}
	}
	return out
}

// noPressure waits until unitlet-eviction reports no pressure condition (the stack's
// transition period is 30 s), so pods are admitted and scheduled.
func noPressure(t testing.TB, node string) {
	t.Helper()
	stack.WaitFor(t, 3*time.Minute, "no pressure condition on the node", func(context.Context) (bool, string) {
		var on []string
		for _, c := range evictionState(t, node).GetConditions() {
			if c.GetStatus() == "True" {
				on = append(on, c.GetType())
			}
		}
		return len(on) == 0, strings.Join(on, ", ")
	})
}

// priorityClass creates a PriorityClass for the test.
func priorityClass(t *testing.T, name string, value int32) {
	t.Helper()
	c := admin(t)
	pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value}
	if _, err := c.SchedulingV1().PriorityClasses().Create(context.Background(), pc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.SchedulingV1().PriorityClasses().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

// memoryHog is a BestEffort pod that fills a memory-backed emptyDir with mib MiB (charged to
// its own cgroup, as anonymous memory would be) and then holds it.
func memoryHog(name string, mib int64) *corev1.Pod {
	p := vmPod(name, map[string]string{"hog": fmt.Sprintf("dd if=/dev/zero of=/fill/f bs=1M count=%d && exec sleep 100000", mib)})
	p.Spec.Volumes = []corev1.Volume{{Name: "fill", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}}}
	p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "fill", MountPath: "/fill"}}
	return p
}

// createPod creates p and deletes it when the test ends.
func createPod(t *testing.T, p *corev1.Pod) {
	t.Helper()
	c := admin(t)
	if _, err := c.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.CoreV1().Pods(p.Namespace).Delete(context.Background(), p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	})
}

// waitEvicted waits until the pod ends Failed with reason Evicted and returns it.
func waitEvicted(t testing.TB, ns, name string, within time.Duration) *corev1.Pod {
	t.Helper()
	c := admin(t)
	var got *corev1.Pod
	stack.WaitFor(t, within, name+" evicted", func(ctx context.Context) (bool, string) {
		p, err := c.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		got = p
		return p.Status.Phase == corev1.PodFailed && p.Status.Reason == "Evicted", fmt.Sprintf("%s %s %q", p.Status.Phase, p.Status.Reason, p.Status.Message)
	})
	return got
}

// nodeCondition is the status of the Node's condition typ in the API.
func nodeCondition(t testing.TB, node string, typ corev1.NodeConditionType) corev1.NodeCondition {
	t.Helper()
	n, err := admin(t).CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range n.Status.Conditions {
		if c.Type == typ {
			return c
		}
	}
	return corev1.NodeCondition{Type: typ}
}

func waitCondition(t testing.TB, node string, typ corev1.NodeConditionType, want corev1.ConditionStatus, within time.Duration) {
	t.Helper()
	stack.WaitFor(t, within, fmt.Sprintf("%s=%s on the Node", typ, want), func(context.Context) (bool, string) {
		c := nodeCondition(t, node, typ)
		return c.Status == want, fmt.Sprintf("%s %s: %s", c.Status, c.Reason, c.Message)
	})
}

func running(t *testing.T, ns, name string) {
	t.Helper()
	p, err := admin(t).CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Status.Phase != corev1.PodRunning {
		t.Errorf("%s/%s: %s %s %q, want Running", ns, name, p.Status.Phase, p.Status.Reason, p.Status.Message)
	}
}

// TestMemoryPressureEvictsTheLowerPriorityBestEffortPod: two BestEffort pods fill memory
// past a hard memory.available threshold next to a Guaranteed pod, a system-node-critical
// one and a static one. The lower-priority BestEffort pod is evicted with the kubelet's reason and message;
// the others run on. MemoryPressure turns True on the Node, a new BestEffort pod sent to the
// node is refused while it holds, and it turns False after the transition period.
func TestMemoryPressureEvictsTheLowerPriorityBestEffortPod(t *testing.T) {
	node := vmNode(t).Name
	// Below every other pod's priority (0 without a class): the low hog goes first.
	priorityClass(t, "unitlet-test-low", -100)
	priorityClass(t, "unitlet-test-high", 1000)

	g := vmPod("ev-guaranteed", map[string]string{"c": "exec sleep 100000"})
	// Not a tiny CPU limit: the pod cgroup's quota holds runc and the pause container too,
	// and at 10m they took over two minutes to start on CI's emulated guest.
	g.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: rl("cpu", "100m", "memory", "32Mi"), Limits: rl("cpu", "100m", "memory", "32Mi")}
	runVMPod(t, g)
	crit := vmPod("ev-critical", map[string]string{"c": "exec sleep 100000"})
	crit.Namespace, crit.Spec.PriorityClassName = "kube-system", "system-node-critical"
	runVMPod(t, crit)
	// A static BestEffort pod, whose mirror pod is ev-static-<node> in the API.
	stack.InNode(t, node, "sh", "-c", `mkdir -p /etc/kubernetes/manifests && cat > /etc/kubernetes/manifests/ev-static.yaml <<'EOF'
apiVersion: v1
kind: Pod
metadata: {name: ev-static, namespace: default}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - {name: c, image: `+harness.BusyboxImage+`, imagePullPolicy: Never, command: [sh, -c, "exec sleep 100000"]}
EOF`)
	t.Cleanup(func() { _ = stack.Exec(node, []string{"rm", "-f", "/etc/kubernetes/manifests/ev-static.yaml"}).Run() })
	static := "ev-static-" + node
	stack.WaitFor(t, 3*time.Minute, "the static pod's mirror pod Running", func(ctx context.Context) (bool, string) {
		p, err := admin(t).CoreV1().Pods("default").Get(ctx, static, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return p.Status.Phase == corev1.PodRunning, string(p.Status.Phase)
	})

	// The kubelet applies memory.available's hard threshold to allocatableMemory.available
	// too (pods are in enforceNodeAllocatable), and the pods' cgroup has less than the node:
	// the threshold is set below the smaller of the two.
	avail := min(available(t, node, "memory.available"), available(t, node, "allocatableMemory.available"))
	threshold := (avail - 300*mi) / mi
	evictionConfig(t, node, fmt.Sprintf("evictionHard: {memory.available: %dMi}\nevictionPressureTransitionPeriod: 1m\n", threshold),
		"memory.available", fmt.Sprintf("%dMi", threshold))
	t.Logf("available %d MiB (the smaller of memory and allocatable memory); hard threshold %d MiB", avail/mi, threshold)

	high := memoryHog("ev-hog-high", 200)
	high.Spec.PriorityClassName = "unitlet-test-high"
	runVMPod(t, high)
	low := memoryHog("ev-hog-low", 200)
	low.Spec.PriorityClassName = "unitlet-test-low"
	createPod(t, low)

	start := time.Now()
	evicted := waitEvicted(t, "default", low.Name, 4*time.Minute)
	t.Logf("ev-hog-low evicted %s after it was created: %q", time.Since(start).Round(time.Second), evicted.Status.Message)
	if !strings.HasPrefix(evicted.Status.Message, "The node was low on resource: memory. Threshold quantity: ") {
		t.Errorf("message %q: want the kubelet's \"The node was low on resource: memory. Threshold quantity: ...\"", evicted.Status.Message)
	}
	var disruption bool
	for _, c := range evicted.Status.Conditions {
		disruption = disruption || c.Type == corev1.DisruptionTarget && c.Reason == "TerminationByKubelet"
	}
	if !disruption {
		t.Errorf("conditions %+v: want DisruptionTarget with reason TerminationByKubelet", evicted.Status.Conditions)
	}
	waitCondition(t, node, corev1.NodeMemoryPressure, corev1.ConditionTrue, time.Minute)

	// Sent straight to the node (the scheduler keeps pods off a node tainted for pressure).
	refused := vmPod("ev-besteffort-refused", map[string]string{"c": "exec sleep 100000"})
	refused.Spec.NodeName = node
	createPod(t, refused)
	r := waitEvicted(t, "default", refused.Name, time.Minute)
	if want := "Pod was rejected: The node had condition: [MemoryPressure]. "; r.Status.Message != want {
		t.Errorf("refused pod's message %q, want the kubelet's %q", r.Status.Message, want)
	}

	running(t, "default", high.Name)
	running(t, "default", g.Name)
	running(t, "kube-system", crit.Name)
	running(t, "default", static)
	if evs := evictionsOf(evictionState(t, node), high.Name, low.Name, g.Name, crit.Name, static); len(evs) != 1 {
		t.Errorf("evictions %v: want exactly one", evs)
	}
	waitCondition(t, node, corev1.NodeMemoryPressure, corev1.ConditionFalse, 3*time.Minute)
}

// TestPIDPressureEvictsTheForkingPod: a pod forks past a pid.available threshold set just
// below what the node has; PIDPressure turns True and the pod is evicted.
func TestPIDPressureEvictsTheForkingPod(t *testing.T) {
	node := vmNode(t).Name
	avail := available(t, node, "pid.available")
	threshold := avail - 100
	evictionConfig(t, node, fmt.Sprintf("evictionHard: {pid.available: \"%d\"}\n", threshold), "pid.available", fmt.Sprint(threshold))

	p := vmPod("ev-forker", map[string]string{"c": "for i in $(seq 180); do sleep 100000 & done; wait"})
	createPod(t, p)
	evicted := waitEvicted(t, "default", p.Name, 4*time.Minute)
	if !strings.HasPrefix(evicted.Status.Message, "The node was low on resource: pids. ") {
		t.Errorf("message %q: want the kubelet's \"The node was low on resource: pids. ...\"", evicted.Status.Message)
	}
	waitCondition(t, node, corev1.NodePIDPressure, corev1.ConditionTrue, time.Minute)
}

// TestLocalStorageLimitsEvict: an emptyDir over its sizeLimit and a container over its
// ephemeral-storage limit are evicted with the kubelet's messages; no threshold involved.
func TestLocalStorageLimitsEvict(t *testing.T) {
	vmNode(t)
	limit := resource.MustParse("20Mi")
	dir := vmPod("ev-emptydir-over", map[string]string{"c": "dd if=/dev/zero of=/data/f bs=1M count=40; exec sleep 100000"})
	dir.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: &limit}}}}
	dir.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
	createPod(t, dir)
	// Two containers, so the pod's limit (their sum) holds and the container's does not.
	ctr := vmPod("ev-container-over", map[string]string{"c": "dd if=/dev/zero of=/tmp/f bs=1M count=40; exec sleep 100000", "idle": "exec sleep 100000"})
	for i := range ctr.Spec.Containers {
		l := limit
		if ctr.Spec.Containers[i].Name == "idle" {
			l = resource.MustParse("100Mi")
		}
		ctr.Spec.Containers[i].Resources = corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceEphemeralStorage: l}}
	}
	createPod(t, ctr)

	if p := waitEvicted(t, "default", dir.Name, 4*time.Minute); p.Status.Message != `Usage of EmptyDir volume "data" exceeds the limit "20Mi". ` {
		t.Errorf("%s: message %q", dir.Name, p.Status.Message)
	}
	if p := waitEvicted(t, "default", ctr.Name, 2*time.Minute); p.Status.Message != `Container c exceeded its local ephemeral storage limit "20Mi". ` {
		t.Errorf("%s: message %q", ctr.Name, p.Status.Message)
	}
}

// TestDiskPressureReclaimsBeforeEvicting: a pod fills an emptyDir past a nodefs.available
// threshold. unitlet-eviction first has podsync remove dead containers and unused images
// (a finished pod's container is there to be removed), and since that is not enough, evicts
// the pod; DiskPressure turns True.
func TestDiskPressureReclaimsBeforeEvicting(t *testing.T) {
	node := vmNode(t).Name
	done := vmPod("ev-finished", map[string]string{"c": "true"})
	done.Spec.RestartPolicy = corev1.RestartPolicyNever
	createPod(t, done)
	stack.WaitFor(t, 3*time.Minute, "ev-finished Succeeded", func(ctx context.Context) (bool, string) {
		p, err := admin(t).CoreV1().Pods("default").Get(ctx, done.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return p.Status.Phase == corev1.PodSucceeded, string(p.Status.Phase)
	})

	avail := available(t, node, "nodefs.available")
	threshold := (avail - 150*mi) / mi
	evictionConfig(t, node, fmt.Sprintf("evictionHard: {nodefs.available: %dMi}\n", threshold), "nodefs.available", fmt.Sprintf("%dMi", threshold))
	filler := vmPod("ev-disk-filler", map[string]string{"c": "dd if=/dev/zero of=/data/f bs=1M count=250; exec sleep 100000"})
	filler.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	filler.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
	createPod(t, filler)

	evicted := waitEvicted(t, "default", filler.Name, 5*time.Minute)
	if !strings.HasPrefix(evicted.Status.Message, "The node was low on resource: ephemeral-storage. ") {
		t.Errorf("message %q: want the kubelet's \"The node was low on resource: ephemeral-storage. ...\"", evicted.Status.Message)
	}
	log := stack.InNode(t, node, "journalctl", "-u", "unitlet-eviction", "--no-pager", "-o", "cat", "--grep", "node-level reclaim")
	t.Logf("unitlet-eviction's reclaims:\n%s", log)
	removed := 0
	for _, m := range regexp.MustCompile(` (containers|images)=(\d+)`).FindAllStringSubmatch(log, -1) {
		n, _ := strconv.Atoi(m[2])
		removed += n
	}
	if removed == 0 {
		t.Errorf("no node-level reclaim removed a container or an image before the eviction (the finished pod's container was there to remove):\n%s", log)
	}
	waitCondition(t, node, corev1.NodeDiskPressure, corev1.ConditionTrue, time.Minute)
}

// TestSoftThresholdGracePeriodSurvivesASIGKILL: a soft memory threshold with a 60 s grace
// period is crossed; unitlet-eviction is SIGKILLed half way. The restarted service keeps the
// first crossing (its checkpoint), so the eviction comes 60 s after it, not 60 s after the
// restart, and only one pod is evicted.
func TestSoftThresholdGracePeriodSurvivesASIGKILL(t *testing.T) {
	node := vmNode(t).Name
	avail := available(t, node, "memory.available")
	threshold := (avail - 150*mi) / mi
	evictionConfig(t, node, fmt.Sprintf("evictionSoft: {memory.available: %dMi}\nevictionSoftGracePeriod: {memory.available: 60s}\nevictionMaxPodGracePeriod: 5\n", threshold),
		"memory.available", fmt.Sprintf("%dMi", threshold))
	hog := memoryHog("ev-soft-hog", 250)
	createPod(t, hog)

	var first time.Time
	stack.WaitFor(t, 4*time.Minute, "the soft threshold crossed", func(context.Context) (bool, string) {
		s := signal(evictionState(t, node), "memory.available")
		for _, th := range s.GetThresholds() {
			if th.GetKind() == "soft" && th.GetFirstCrossed() != nil {
				first = th.GetFirstCrossed().AsTime()
				return true, ""
			}
		}
		return false, fmt.Sprintf("%v", s)
	})
	time.Sleep(time.Until(first.Add(30 * time.Second)))
	pid := stack.InNode(t, node, "systemctl", "show", "-p", "MainPID", "--value", "unitlet-eviction")
	killed := time.Now() // the guest's clock starts from the host's (its RTC): within a second or so
	stack.InNode(t, node, "systemctl", "kill", "-s", "KILL", "unitlet-eviction")
	// Restarted and ready (Type=notify: active once it sent READY=1). A new main PID alone
	// is not enough: the emulated guest can take more than unitletctl's 3 s to start it.
	stack.WaitFor(t, time.Minute, "unitlet-eviction restarted and ready", func(context.Context) (bool, string) {
		out, _ := stack.Exec(node, []string{"systemctl", "show", "-p", "MainPID", "--value", "unitlet-eviction"}).CombinedOutput()
		now := strings.TrimSpace(string(out))
		out, _ = stack.Exec(node, []string{"systemctl", "show", "-p", "ActiveState", "--value", "unitlet-eviction"}).CombinedOutput()
		state := strings.TrimSpace(string(out))
		return now != "0" && now != pid && state == "active", "main PID " + now + ", " + state
	})
	s := signal(evictionState(t, node), "memory.available")
	for _, th := range s.GetThresholds() {
		if th.GetKind() == "soft" && th.GetFirstCrossed() != nil && !th.GetFirstCrossed().AsTime().Equal(first) {
			t.Errorf("first crossing after the restart %s, want %s (restored)", th.GetFirstCrossed().AsTime(), first)
		}
	}

	waitEvicted(t, "default", hog.Name, 3*time.Minute)
	evs := evictionsOf(evictionState(t, node), hog.Name)
	if len(evs) != 1 {
		t.Fatalf("evictions %v: want exactly one", evs)
	}
	at := evs[0].GetTime().AsTime()
	// Kept, the grace period ends 60 s after the first crossing (30 s after the kill); had
	// the restart lost it, a new first crossing would come after the kill and the grace
	// period would end 60 s or more after the kill.
	if d := at.Sub(first); d < 60*time.Second {
		t.Errorf("evicted %s after the first crossing: before the 60 s grace period ended", d.Round(time.Second))
	}
	if at.Sub(killed) >= 60*time.Second {
		t.Errorf("evicted %s after the first crossing and %s after the SIGKILL: the grace period started again with the restart",
			at.Sub(first).Round(time.Second), at.Sub(killed).Round(time.Second))
	}
	t.Logf("evicted %s after the first crossing, %s after the SIGKILL", at.Sub(first).Round(time.Second), at.Sub(killed).Round(time.Second))
	if g := evs[0].GetGracePeriodSeconds(); g != 1 {
		t.Errorf("grace period %d, want 1 (the pod's own 1 s is below evictionMaxPodGracePeriod 5)", g)
	}
}
