package harnesstest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/unitlet/unitlet/integration/csidriver"
	"github.com/unitlet/unitlet/integration/harness"
)

// pvcBenchPods is how many PVC pods a round creates at once.
const pvcBenchPods = 30

// pvcBenchDriver is the CSI test driver both agents mount the CSI volumes through; short,
// for its registration socket under the kubelet's root dir (108-byte Unix addresses).
const pvcBenchDriver = "b.csi.test"

// BenchmarkPVCPodsVsKubelet: 30 pods, each with a claim of its own, created at once through
// the scheduler onto unitlet's node and onto the real kubelet's on the same stack
// (integration/stacks/bench-pods.yaml), taking turns as BenchmarkPodsVsKubelet does: claims
// of the local-path StorageClass (WaitForFirstConsumer: provisioned by
// local-path-provisioner once the scheduler picked the node, its helper pod on that node),
// then claims bound to static CSI PVs of the harness's test driver (staged ext4 images on
// loop devices; the driver registered with both agents through their plugins_registry).
// Per pod, create → all containers running as the API shows it (p50, p99, max); then the
// pods deleted, the claims and volumes deleted and cleaned. It prints the medians over the
// rounds (UNITLET_BENCH_ROUNDS, 3 by default) and the unitlet/kubelet ratios; the target
// is at most 0.8.
func BenchmarkPVCPodsVsKubelet(b *testing.B) {
	unitletNode, kubeletNode := vsNodes(b)
	if stack.Stack().LocalPathProvisioner == nil {
		b.Fatalf("stack %s has no localPathProvisioner (UNITLET_STACK=integration/stacks/bench-pods.yaml)", stack.Stack().Name)
	}
	c := benchClient(b)
	state := b.TempDir()
	for _, node := range []string{unitletNode, kubeletNode} {
		d, err := csidriver.Start(csidriver.Options{
			Name: pvcBenchDriver, RegistrationDir: filepath.Join(stack.AgentRootDir(node), "plugins_registry"),
			Endpoint: filepath.Join(state, node+".sock"), NodeID: node, StateDir: filepath.Join(state, "volumes"), Stage: true,
		})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(d.Stop)
	}
	drivers := c.StorageV1().CSIDrivers()
	if _, err := drivers.Create(context.Background(), &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: pvcBenchDriver},
		Spec: storagev1.CSIDriverSpec{AttachRequired: ptr.To(false)}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = drivers.Delete(context.Background(), pvcBenchDriver, metav1.DeleteOptions{}) })
	if err := stack.StopNode(kubeletNode); err != nil {
		b.Fatal(err)
	}
	registerNode(b)
	unitlet := vsSide{agent: "unitlet", node: unitletNode, source: "api"}
	kubelet := vsSide{agent: "kubelet", node: kubeletNode, source: "api"}
	rounds := vsRounds(b)
	var results []pvcResult
	for range b.N {
		for round := 1; round <= rounds; round++ {
			for _, side := range []vsSide{unitlet, kubelet} {
				vsActivate(b, side, unitlet, kubelet)
				for _, kind := range []string{"local-path", "csi"} {
					r := pvcRound(b, c, side, kind, round)
					helpers := ""
					if len(r.helpers) > 0 {
						helpers = fmt.Sprintf("; %d helper pods created → Succeeded p50 %.2f s, p99 %.2f s", len(r.helpers), r.helpers.percentile(50).Seconds(), r.helpers.percentile(99).Seconds())
					}
					fmt.Printf("round %d/%d: %s, %d %s PVC pods: start p50 %.2f s, p99 %.2f s%s\n", round, rounds, side.agent, pvcBenchPods, kind,
						r.start.percentile(50).Seconds(), r.start.percentile(99).Seconds(), helpers)
					results = append(results, r)
				}
			}
		}
	}
	vsActivate(b, unitlet, unitlet, kubelet)
	printPVC(results)
}

// pvcResult is one round of one agent and kind.
type pvcResult struct {
	agent, kind string
	start       latencies
	allRunning  time.Duration
	// helpers are local-path's helper pods' times from created to Succeeded, as this
	// test's watch saw them: the agent's share of each provisioning.
	helpers latencies
}

// helperWatch times local-path-provisioner's helper pods (namespace local-path-storage)
// from their creation to their success, both as a watch sees them.
type helperWatch struct {
	mu                 sync.Mutex
	created, succeeded map[string]time.Time
	// old are the helper pods there before the watch: not timed.
	old  map[string]bool
	stop context.CancelFunc
}

func watchHelperPods(ctx context.Context, c kubernetes.Interface) (*helperWatch, error) {
	h := &helperWatch{created: map[string]time.Time{}, succeeded: map[string]time.Time{}}
	lw := cache.NewListWatchFromClient(c.CoreV1().RESTClient(), "pods", "local-path-storage", fields.Everything())
	inf := cache.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, cache.Indexers{})
	seen := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok {
			return
		}
		now := time.Now()
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.old[p.Name] {
			return
		}
		if _, ok := h.created[p.Name]; !ok {
			h.created[p.Name] = now
		}
		if _, ok := h.succeeded[p.Name]; !ok && p.Status.Phase == corev1.PodSucceeded {
			h.succeeded[p.Name] = now
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: seen, UpdateFunc: func(_, obj any) { seen(obj) }}); err != nil {
		return nil, err
	}
	ctx, h.stop = context.WithCancel(ctx)
	go inf.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		h.stop()
		return nil, errors.New("watch local-path's helper pods: no first list")
	}
	h.mu.Lock()
	h.old = map[string]bool{}
	for name := range h.created {
		h.old[name] = true
	}
	h.created, h.succeeded = map[string]time.Time{}, map[string]time.Time{}
	h.mu.Unlock()
	return h, nil
}

// durations are the helper pods' created → Succeeded times so far.
func (h *helperWatch) durations() latencies {
	h.mu.Lock()
	defer h.mu.Unlock()
	return since(h.created, h.succeeded)
}

// pvcRound makes the claims (and, for csi, their static PVs, bound before the clock
// starts), creates the pods at once, waits until they run, then deletes the pods, the
// claims and the volumes and waits until the volumes are gone (local-path's cleanup runs
// a helper pod on the node, so it is done while the agent runs).
func pvcRound(b *testing.B, c kubernetes.Interface, side vsSide, kind string, round int) pvcResult {
	b.Helper()
	ctx := context.Background()
	prefix := fmt.Sprintf("pvc-%s-%s-%d", side.agent, kind, round)
	names := podNames(prefix, pvcBenchPods)
	pvs, pvcs := c.CoreV1().PersistentVolumes(), c.CoreV1().PersistentVolumeClaims("default")
	size := corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("32Mi")}
	rwo := []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	for _, name := range names {
		claim := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PersistentVolumeClaimSpec{AccessModes: rwo, Resources: corev1.VolumeResourceRequirements{Requests: size}}}
		if kind == "csi" {
			pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PersistentVolumeSpec{
				PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: pvcBenchDriver, VolumeHandle: name, FSType: "ext4"}},
				AccessModes:            rwo, Capacity: size, PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			}}
			if _, err := pvs.Create(ctx, pv, metav1.CreateOptions{}); err != nil {
				b.Fatal(err)
			}
			claim.Spec.StorageClassName, claim.Spec.VolumeName = ptr.To(""), name
		} else {
			claim.Spec.StorageClassName = ptr.To(harness.LocalPathStorageClass)
		}
		if _, err := pvcs.Create(ctx, claim, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	if kind == "csi" {
		benchWaitFor(b, 2*time.Minute, "the static CSI claims bound", func() (bool, string) {
			bound := 0
			for _, name := range names {
				if p, err := pvcs.Get(ctx, name, metav1.GetOptions{}); err == nil && p.Status.Phase == corev1.ClaimBound {
					bound++
				}
			}
			return bound == len(names), fmt.Sprintf("%d of %d bound", bound, len(names))
		})
	}
	w, err := watchNodePods(ctx, c, side.node)
	if err != nil {
		b.Fatal(err)
	}
	defer w.Stop()
	pods := make([]*corev1.Pod, len(names))
	for i, name := range names {
		p := vsPod("", name)
		p.Spec.NodeSelector = map[string]string{corev1.LabelHostname: side.node}
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: name}}})
		p.Spec.Containers[0].VolumeMounts = append(p.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: "data", MountPath: "/data"})
		pods[i] = p
	}
	helpers, err := watchHelperPods(ctx, c)
	if err != nil {
		b.Fatal(err)
	}
	defer helpers.stop()
	first := time.Now()
	created, err := createAtOnce(ctx, c, pods)
	if err != nil {
		b.Fatal(err)
	}
	running, err := w.waitRunning(names, 10*time.Minute)
	if err != nil {
		b.Fatalf("%s, %d %s PVC pods: %v\n%s", side.agent, len(names), kind, err, stack.Logs(30))
	}
	r := pvcResult{agent: side.agent, kind: kind, start: since(created, running), allRunning: latest(running).Sub(first), helpers: helpers.durations()}

	// Cleaned while the agent runs: the pods, the claims, then the volumes.
	if err := deleteAtOnce(ctx, c, names, metav1.DeleteOptions{}); err != nil {
		b.Fatal(err)
	}
	if _, err := w.waitGone(names, 5*time.Minute); err != nil {
		b.Fatalf("%s, %d %s PVC pods deleted: %v\n%s", side.agent, len(names), kind, err, stack.Logs(30))
	}
	volumes := map[string]bool{}
	for _, name := range names {
		if p, err := pvcs.Get(ctx, name, metav1.GetOptions{}); err == nil && p.Spec.VolumeName != "" {
			volumes[p.Spec.VolumeName] = true
		}
		if err := pvcs.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	if kind == "csi" {
		for name := range volumes {
			if err := pvs.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
				b.Fatal(err)
			}
		}
	}
	benchWaitFor(b, 5*time.Minute, "the round's volumes deleted", func() (bool, string) {
		left := 0
		for name := range volumes {
			if _, err := pvs.Get(ctx, name, metav1.GetOptions{}); err == nil {
				left++
			}
		}
		return left == 0, fmt.Sprintf("%d of %d volumes left", left, len(volumes))
	})
	return r
}

// benchWaitFor polls cond every 200 ms until it holds, failing the benchmark after within.
func benchWaitFor(b *testing.B, within time.Duration, what string, cond func() (bool, string)) {
	b.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, msg := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s: not within %s: %s", what, within, msg)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// printPVC writes the table of medians over the rounds, then the unitlet/kubelet ratios.
func printPVC(results []pvcResult) {
	med := func(agent, kind string, f func(pvcResult) float64) float64 {
		var v []float64
		for _, r := range results {
			if r.agent == agent && r.kind == kind {
				v = append(v, f(r))
			}
		}
		return median(v)
	}
	p50 := func(r pvcResult) float64 { return r.start.percentile(50).Seconds() }
	p99 := func(r pvcResult) float64 { return r.start.percentile(99).Seconds() }
	rounds := 0
	for _, r := range results {
		if r.agent == "unitlet" && r.kind == "csi" {
			rounds++
		}
	}
	fmt.Println()
	fmt.Printf("== PVC pods vs kubelet %s: %d pods with a claim each created at once, create → all containers running (per pod); medians of %d rounds\n",
		harness.KubernetesVersion, pvcBenchPods, rounds)
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "agent\tvolumes\tstart p50 s\tp99 s\tmax s\tall running s\thelper pods p50 s\t")
	for _, kind := range []string{"local-path", "csi"} {
		for _, agent := range []string{"unitlet", "kubelet"} {
			helpers := "-"
			if kind == "local-path" {
				helpers = fmt.Sprintf("%.2f", med(agent, kind, func(r pvcResult) float64 { return r.helpers.percentile(50).Seconds() }))
			}
			fmt.Fprintf(tw, "%s\t%s\t%.2f\t%.2f\t%.2f\t%.2f\t%s\t\n", agent, kind, med(agent, kind, p50), med(agent, kind, p99),
				med(agent, kind, func(r pvcResult) float64 { return r.start.max().Seconds() }),
				med(agent, kind, func(r pvcResult) float64 { return r.allRunning.Seconds() }), helpers)
		}
	}
	tw.Flush()
	var parts []string
	for _, kind := range []string{"local-path", "csi"} {
		parts = append(parts, fmt.Sprintf("%s p50 %.2f, p99 %.2f", kind,
			med("unitlet", kind, p50)/med("kubelet", kind, p50), med("unitlet", kind, p99)/med("kubelet", kind, p99)))
	}
	fmt.Printf("unitlet/kubelet PVC pod start ratio (target ≤ 0.8): %s\n", strings.Join(parts, "; "))
}
