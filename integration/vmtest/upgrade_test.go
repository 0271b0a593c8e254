package vmtest

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/unitlet/unitlet/integration/harness"
)

// The upgrade a node's administrator does one package at a time (docs/install.md,
// "Upgrades"), under load: the node starts at the previous release (make prev-release,
// every package downgraded at once), runs 30 pods while a churn pod is created and deleted
// again and again, and each package is upgraded to this build's on its own with dpkg -i:
// unitletctl, then the services in the order podsync, config, certs, volumes, eviction,
// status, then the meta-package. podsync first: the previous release's reports the runtime
// down at its first Status answer later than 5 s, which the emulated guest's containerd
// gives while dpkg runs (this release waits 30 s, as the kubelet does), so an administrator
// coming from it upgrades podsync first; then the configuration and credentials every
// other service asks for, and status, which writes the node's and the pods' status, last.
// Then
// unitlet-eviction goes back to the previous release and up again, so its bus pairs are
// covered at the previous release with current callers. After each step:
//
//   - that package's version is installed, and only its service's MainPID changed;
//   - a caller asking the service for its identity once a second (the current unitletctl,
//     in the guest) saw no error: a call made while it restarted waits in the socket's
//     queue (the socket stays open) and the new process answers it ("queued" in the
//     table); the downtime is from the old process's exit to the new one's READY=1
//     (systemd's timestamps), and the caller's view from that exit to the end of its first
//     call the new process answered;
//   - no other service logged an error meanwhile;
//   - every long-lived pod's containers are the same (IDs and restart counts in the API,
//     tasks of the guest's containerd), every one stayed Running and Ready in the API and
//     the node stayed Ready (both sampled every 2 s), and every churn pod ran and went.
const (
	upgradeLoadPods  = 30
	upgradeLoadLabel = "unitlet-upgrade-load"
	// upgradeChurnEvery is the pause between churn pods: one at a time, so at most one is
	// starting or stopping at any moment.
	upgradeChurnEvery = 3 * time.Second
)

func TestVMUpgradesOneServiceAtATimeUnderLoad(t *testing.T) {
	n := vmNode(t)
	harness.HeavyPhase(t, "the vm's upgrades under load")
	began := time.Now()
	prevDist, err := harness.PrevDistDir()
	if err != nil {
		t.Fatal(err)
	}
	c := admin(t)
	ctx := context.Background()
	dist := harness.DistDir(stack.Repo())
	current, prev := debVersion(t, dist), debVersion(t, prevDist)
	if current == prev {
		t.Fatalf("this build's packages (%s) and the previous release's (%s) have the same version %s: nothing to upgrade", dist, prevDist, current)
	}
	prevDir, err := stack.VMShareDebs(n.Name, "prev-debs", prevDist)
	if err != nil {
		t.Fatal(err)
	}
	packages := []string{"unitletctl"}
	for _, svc := range []string{"podsync", "config", "certs", "volumes", "eviction", "status"} {
		packages = append(packages, "unitlet-"+svc)
	}
	packages = append(packages, "unitlet")
	if len(packages) != len(n.Services)+2 {
		t.Fatalf("node %s runs %v; this test upgrades %v", n.Name, n.Services, packages)
	}
	at := map[string]release{
		current: {version: current, guestDir: harness.VMDebDir, dist: dist},
		prev:    {version: prev, guestDir: prevDir, dist: prevDist},
	}
	u := &upgrade{t: t, c: c, node: n.Name, services: n.Services, began: began}

	// A failure part way leaves the node at this build, for the tests after this one.
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		var all []string
		for _, p := range packages {
			all = append(all, at[current].deb(t, p))
		}
		if _, err := stack.VMInstall(context.Background(), n.Name, "", all...); err != nil {
			t.Logf("putting %s back at %s: %v", n.Name, current, err)
		}
	})

	// Every package at the previous release at once. (The load's pods start after it: begun
	// beside it, the two took 6 minutes in the one-CPU emulated guest, against 4 one after
	// the other.)
	var all []string
	for _, p := range packages {
		all = append(all, at[prev].deb(t, p))
	}
	start := time.Now()
	in, err := stack.VMInstall(ctx, n.Name, "", all...)
	if err != nil {
		t.Fatal(err)
	}
	u.wantVersions(packages, prev)
	stack.WaitFor(t, 2*time.Minute, "every service of "+n.Name+" answering at "+prev, func(ctx context.Context) (bool, string) {
		out, err := stack.Exec(n.Name, []string{"unitletctl", "--timeout", "30s", "status"}).CombinedOutput()
		return err == nil, string(out)
	})
	u.waitNodeReady()
	u.timings = append(u.timings, stepTiming{step: "all packages " + current + " -> " + prev, dpkg: in.Dpkg(), wall: time.Since(start), downtime: -1})

	// The load: 30 pods Running and Ready, then the churn and the sampler until the end.
	start = time.Now()
	u.createLongLived(ctx)
	u.waitLongLived()
	t.Logf("%d pods Running and Ready on %s in %s", upgradeLoadPods, n.Name, time.Since(start).Round(100*time.Millisecond))
	u.timings = append(u.timings, stepTiming{step: fmt.Sprintf("%d pods started", upgradeLoadPods), wall: time.Since(start), downtime: -1})
	// The previous release's podsync may have reported the runtime down meanwhile (see above).
	u.waitNodeReady()
	u.ready = nodeReady(t, c, n.Name)
	stop := u.startWatchers(ctx)
	defer stop()

	// Each package up on its own, then unitlet-eviction down and up again.
	for _, p := range packages {
		u.step(at[prev], at[current], p)
	}
	u.step(at[current], at[prev], "unitlet-eviction")
	u.step(at[prev], at[current], "unitlet-eviction")
	u.wantVersions(packages, current)
	stop()
	if u.churned() == 0 {
		t.Errorf("no churn pod ran to its deletion during the upgrades")
	}
	u.checkNew("after the last step")
	u.log(time.Since(began))
}

// release is one release's packages: on the host (dist) and in the guest (guestDir).
type release struct {
	version, guestDir, dist string
}

// deb is package p's file of release r, in the guest.
func (r release) deb(t *testing.T, p string) string {
	t.Helper()
	found, _ := filepath.Glob(filepath.Join(r.dist, p+"_*.deb"))
	if len(found) != 1 {
		t.Fatalf("want one %s_*.deb in %s, found %v", p, r.dist, found)
	}
	return r.guestDir + "/" + filepath.Base(found[0])
}

// upgrade is the state of TestVMUpgradesOneServiceAtATimeUnderLoad: the node, its pods'
// containers as the last step left them, what the sampler and the churn saw.
type upgrade struct {
	t        *testing.T
	c        kubernetes.Interface
	node     string
	services []string
	began    time.Time
	ready    corev1.NodeCondition
	timings  []stepTiming

	mu         sync.Mutex
	samples    int
	violations []string // from the sampler: a pod or the node not as it should be
	churnDone  int
	churnErrs  []string
	reported   [2]int // the violations and churn errors checkNew has reported
}

// stepTiming is a row of the test's table.
type stepTiming struct {
	step       string
	dpkg, wall time.Duration
	downtime   time.Duration // the old process's exit to the new one's READY=1; -1: none
	toAnswer   time.Duration // the old process's exit to the new one's first answer
	calls      int           // the caller's calls
	queued     bool          // the new process's first answer was to a call made before it was ready
	oldV, newV string
}

// containerState is a container as the API reports it.
type containerState struct {
	id       string
	restarts int32
}

// step installs package p of release to over the one of release from and checks the node.
func (u *upgrade) step(from, to release, p string) {
	t := u.t
	t.Helper()
	svc := strings.TrimPrefix(p, "unitlet-")
	if !slices.Contains(u.services, svc) {
		svc = "" // unitletctl, the meta-package: no service
	}
	name := fmt.Sprintf("%s %s -> %s", p, from.version, to.version)
	pids := u.mainPIDs()
	containers := u.longLived()

	start := time.Now()
	in, err := stack.VMInstall(context.Background(), u.node, svc, to.deb(t, p))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	wall := time.Since(start)
	row := stepTiming{step: name, dpkg: in.Dpkg(), wall: wall, downtime: -1, calls: len(in.Calls)}

	u.wantVersions([]string{p}, to.version)
	after := u.mainPIDs()
	for _, s := range u.services {
		switch {
		case s == svc && after[s] == pids[s]:
			t.Errorf("%s: unitlet-%s was not restarted (MainPID %d before and after)", name, s, pids[s])
		case s == svc && after[s] != in.NewPID:
			t.Errorf("%s: unitlet-%s's MainPID is %d, the install saw %d", name, s, after[s], in.NewPID)
		case s != svc && after[s] != pids[s]:
			t.Errorf("%s: unitlet-%s restarted too (MainPID %d, was %d): a package's upgrade must restart its own service alone", name, s, after[s], pids[s])
		}
	}

	if svc != "" {
		for _, f := range in.Failed() {
			t.Errorf("%s: a caller of unitlet-%s saw an error (call at %s, %s): %s", name, svc, f.Start.Format("15:04:05.000"), f.End.Sub(f.Start).Round(time.Millisecond), f.Err)
		}
		first, ok := in.FirstAnswer()
		downtime, measured := in.Downtime()
		toAnswer, _ := in.ToFirstAnswer()
		switch {
		case !ok:
			t.Errorf("%s: the new unitlet-%s (pid %d) answered none of %d calls", name, svc, in.NewPID, len(in.Calls))
		case !measured:
			t.Errorf("%s: systemd recorded no restart of unitlet-%s (inactive at %s, active at %s)", name, svc, in.Exited, in.Ready)
		default:
			row.downtime, row.toAnswer, row.queued = downtime, toAnswer, first.Start.Before(in.Ready)
			row.newV = first.Version
		}
		if len(in.Calls) > 0 && in.Calls[0].Err == "" {
			row.oldV = in.Calls[0].Version
			if in.Calls[0].PID != in.OldPID {
				t.Errorf("%s: the first call was answered by pid %d, not the old unitlet-%s (%d)", name, in.Calls[0].PID, svc, in.OldPID)
			}
		}
		if ok && row.oldV == row.newV {
			t.Errorf("%s: unitlet-%s answers version %s before and after", name, svc, row.newV)
		}
		u.checkJournals(name, svc, in)
	}

	u.checkContainers(name, containers)
	u.sample(context.Background())
	u.checkNew(name)
	if ready := nodeReady(t, u.c, u.node); ready.Status != corev1.ConditionTrue || !ready.LastTransitionTime.Equal(&u.ready.LastTransitionTime) {
		t.Errorf("%s: node %s Ready is %s since %s (%s), was True since %s", name, u.node, ready.Status, ready.LastTransitionTime, ready.Message, u.ready.LastTransitionTime)
	}
	u.timings = append(u.timings, row)
	t.Logf("%s: dpkg %s, step %s, downtime %s (to a caller's first answer %s), %d calls",
		name, fmtDur(row.dpkg), fmtDur(wall), fmtDowntime(row.downtime), fmtDur(row.toAnswer), row.calls)
}

// wantVersions checks that packages are installed at version in the guest.
func (u *upgrade) wantVersions(packages []string, version string) {
	u.t.Helper()
	out := stack.InNode(u.t, u.node, append([]string{"dpkg-query", "-W", "-f", "${Package}\t${Version}\t${Status}\n"}, packages...)...)
	got := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Split(line, "\t"); len(f) == 3 {
			got[f[0]] = f[1] + " " + f[2]
		}
	}
	for _, p := range packages {
		if want := version + " install ok installed"; got[p] != want {
			u.t.Errorf("dpkg-query -W %s on %s: %q, want %q", p, u.node, got[p], want)
		}
	}
}

// mainPIDs are the services' MainPIDs in the guest.
func (u *upgrade) mainPIDs() map[string]int {
	u.t.Helper()
	args := []string{"systemctl", "show", "-p", "Id", "-p", "MainPID"}
	for _, s := range u.services {
		args = append(args, "unitlet-"+s+".service")
	}
	pids := map[string]int{}
	for _, block := range strings.Split(stack.InNode(u.t, u.node, args...), "\n\n") {
		props := map[string]string{}
		for _, line := range strings.Split(strings.TrimSpace(block), "\n") {
			if k, v, ok := strings.Cut(line, "="); ok {
				props[k] = v
			}
		}
		svc := strings.TrimSuffix(strings.TrimPrefix(props["Id"], "unitlet-"), ".service")
		pid, err := strconv.Atoi(props["MainPID"])
		if err != nil || pid == 0 {
			u.t.Fatalf("unitlet-%s on %s has no main process: %q", svc, u.node, block)
		}
		pids[svc] = pid
	}
	return pids
}

// checkJournals fails on an error the other services logged while svc was installed.
func (u *upgrade) checkJournals(name, svc string, in harness.VMInstall) {
	u.t.Helper()
	until := in.DpkgEnd
	if first, ok := in.FirstAnswer(); ok && first.End.After(until) {
		until = first.End
	}
	args := []string{"journalctl", "--no-pager", "-o", "short-iso-precise",
		"--since", fmt.Sprintf("@%d", in.DpkgStart.Unix()-1), "--until", fmt.Sprintf("@%d", until.Unix()+2)}
	for _, s := range u.services {
		if s != svc {
			args = append(args, "-u", "unitlet-"+s+".service")
		}
	}
	var errs, apiErrs []string
	for _, line := range strings.Split(stack.InNode(u.t, u.node, args...), "\n") {
		if !strings.Contains(line, "level=ERROR") && !strings.Contains(line, `"level":"ERROR"`) {
			continue
		}
		if apiServerError(line) {
			apiErrs = append(apiErrs, line)
		} else {
			errs = append(errs, line)
		}
	}
	if len(apiErrs) > 0 {
		u.t.Logf("%s: the other services' calls to the API server failed while unitlet-%s restarted (the host's API server, not the restart):\n%s", name, svc, strings.Join(apiErrs, "\n"))
	}
	if len(errs) > 0 {
		u.t.Errorf("%s: the other services logged errors while unitlet-%s restarted:\n%s", name, svc, strings.Join(errs, "\n"))
	}
}

// apiServerError tells an error about a call to the API server from the rest: a call to
// the host's API server (10.0.2.2 from the guest) that timed out or failed, or the API's
// conflict answer to the retry of a write whose first try timed out after it was done (a
// lease renewal: the kubelet logs both the same way). Neither comes of a service's
// restart, which reaches the others over the bus alone; with the host's suites beside
// the vm, the host's API server once took over 10 s to answer a lease renewal.
func apiServerError(line string) bool {
	return strings.Contains(line, "https://10.0.2.2:") || strings.Contains(line, "Operation cannot be fulfilled on ")
}

// longLived are the containers of the long-lived pods, by pod.
func (u *upgrade) longLived() map[string]containerState {
	u.t.Helper()
	pods, err := u.c.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{LabelSelector: upgradeLoadLabel + "=long-lived"})
	if err != nil {
		u.t.Fatal(err)
	}
	got := map[string]containerState{}
	for _, p := range pods.Items {
		for _, cs := range p.Status.ContainerStatuses {
			got[p.Name] = containerState{id: cs.ContainerID, restarts: cs.RestartCount}
		}
	}
	if len(got) != upgradeLoadPods {
		u.t.Fatalf("%d long-lived pods report a container, want %d", len(got), upgradeLoadPods)
	}
	return got
}

// checkContainers fails unless the long-lived pods' containers are those of before, in the
// API and as tasks of the guest's containerd.
func (u *upgrade) checkContainers(name string, before map[string]containerState) {
	u.t.Helper()
	now := u.longLived()
	tasks := stack.InNode(u.t, u.node, "ctr", "-n", "k8s.io", "tasks", "ls", "-q")
	for pod, was := range before {
		if got := now[pod]; got != was {
			u.t.Errorf("%s: pod %s's container changed: %s restarts %d, was %s restarts %d", name, pod, got.id, got.restarts, was.id, was.restarts)
		}
		if id := strings.TrimPrefix(was.id, "containerd://"); !slices.Contains(strings.Fields(tasks), id) {
			u.t.Errorf("%s: container %s of pod %s is not a task of %s's containerd", name, id, pod, u.node)
		}
	}
}

// createLongLived creates the long-lived pods.
func (u *upgrade) createLongLived(ctx context.Context) {
	for i := range upgradeLoadPods {
		pod := u.pod(fmt.Sprintf("upgrade-load-%02d", i), "long-lived")
		if _, err := u.c.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			u.t.Fatal(err)
		}
	}
	u.t.Cleanup(func() { u.deleteAll("long-lived") })
}

// waitLongLived waits until every long-lived pod is Running and Ready.
func (u *upgrade) waitLongLived() {
	t := u.t
	stack.WaitFor(t, 5*time.Minute, fmt.Sprintf("%d pods Running and Ready on %s", upgradeLoadPods, u.node), func(ctx context.Context) (bool, string) {
		pods, err := u.c.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: upgradeLoadLabel + "=long-lived"})
		if err != nil {
			return false, err.Error()
		}
		ready := 0
		for _, p := range pods.Items {
			if podReady(&p) {
				ready++
			}
		}
		return ready == upgradeLoadPods, fmt.Sprintf("%d of %d Ready", ready, upgradeLoadPods)
	})
}

// pod is a pod of the test's, of kind (long-lived or churn), bound to the node.
func (u *upgrade) pod(name, kind string) *corev1.Pod {
	grace := int64(1)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{upgradeLoadLabel: kind}},
		Spec: corev1.PodSpec{
			NodeName:                      u.node,
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{
				Name: "pause", Image: harness.PauseImage, ImagePullPolicy: corev1.PullNever,
			}},
		},
	}
}

// deleteAll deletes the test's pods of kind and waits (at most 3 minutes) until they are gone.
func (u *upgrade) deleteAll(kind string) {
	ctx := context.Background()
	sel := metav1.ListOptions{LabelSelector: upgradeLoadLabel + "=" + kind}
	if err := u.c.CoreV1().Pods("default").DeleteCollection(ctx, metav1.DeleteOptions{}, sel); err != nil {
		u.t.Errorf("delete the %s pods: %v", kind, err)
		return
	}
	stack.WaitFor(u.t, 3*time.Minute, "the "+kind+" pods gone", func(ctx context.Context) (bool, string) {
		pods, err := u.c.CoreV1().Pods("default").List(ctx, sel)
		if err != nil {
			return false, err.Error()
		}
		return len(pods.Items) == 0, fmt.Sprintf("%d left", len(pods.Items))
	})
}

func podReady(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// waitNodeReady waits until the node is Ready.
func (u *upgrade) waitNodeReady() {
	stack.WaitFor(u.t, 2*time.Minute, "node "+u.node+" Ready", func(ctx context.Context) (bool, string) {
		n, err := u.c.CoreV1().Nodes().Get(ctx, u.node, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status == corev1.ConditionTrue, c.Message
			}
		}
		return false, "no Ready condition"
	})
}

// startWatchers starts the sampler (every 2 s: each long-lived pod Running and Ready in
// the API, the node Ready) and the churn; the function it returns stops both and waits
// for them, and may be called again.
func (u *upgrade) startWatchers(ctx context.Context) func() {
	u.t.Cleanup(func() { u.deleteAll("churn") })
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(2 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				u.sample(ctx)
			}
		}
	}()
	go func() {
		defer wg.Done()
		u.churn(ctx)
	}()
	return func() {
		cancel()
		wg.Wait()
	}
}

// sample notes each long-lived pod not Running and Ready in the API, and the node not Ready.
func (u *upgrade) sample(ctx context.Context) {
	pods, err := u.c.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: upgradeLoadLabel + "=long-lived"})
	if ctx.Err() != nil {
		return
	}
	var bad []string
	now := time.Now().Format("15:04:05.000")
	if err != nil {
		bad = append(bad, fmt.Sprintf("%s: list the pods: %v", now, err))
	} else {
		seen := 0
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil {
				continue
			}
			seen++
			if !podReady(&p) {
				bad = append(bad, fmt.Sprintf("%s: pod %s is %s, not Running and Ready: %+v", now, p.Name, p.Status.Phase, p.Status.Conditions))
			}
		}
		if seen != upgradeLoadPods {
			bad = append(bad, fmt.Sprintf("%s: %d long-lived pods in the API, want %d", now, seen, upgradeLoadPods))
		}
	}
	node, err := u.c.CoreV1().Nodes().Get(ctx, u.node, metav1.GetOptions{})
	if ctx.Err() != nil {
		return
	}
	switch {
	case err != nil:
		bad = append(bad, fmt.Sprintf("%s: get node %s: %v", now, u.node, err))
	default:
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
				bad = append(bad, fmt.Sprintf("%s: node %s Ready is %s: %s", now, u.node, c.Status, c.Message))
			}
		}
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	u.samples++
	u.violations = append(u.violations, bad...)
}

// churn creates a pod, waits until it runs, deletes it and waits until it is gone, one
// after the other until ctx ends.
func (u *upgrade) churn(ctx context.Context) {
	pods := u.c.CoreV1().Pods("default")
	fail := func(format string, args ...any) {
		u.mu.Lock()
		defer u.mu.Unlock()
		u.churnErrs = append(u.churnErrs, time.Now().Format("15:04:05.000")+": "+fmt.Sprintf(format, args...))
	}
	// wait polls until cond holds, for at most 2 minutes; false when it did not or ctx ended.
	wait := func(cond func() (bool, string)) (bool, string) {
		deadline := time.Now().Add(2 * time.Minute)
		for {
			ok, state := cond()
			if ok || time.Now().After(deadline) || ctx.Err() != nil {
				return ok, state
			}
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
	for i := 0; ctx.Err() == nil; i++ {
		name := fmt.Sprintf("upgrade-churn-%d", i)
		start := time.Now()
		if _, err := pods.Create(ctx, u.pod(name, "churn"), metav1.CreateOptions{}); err != nil {
			if ctx.Err() == nil {
				fail("create churn pod %s: %v", name, err)
			}
			return
		}
		running, state := wait(func() (bool, string) {
			p, err := pods.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			return p.Status.Phase == corev1.PodRunning, fmt.Sprintf("%s %+v", p.Status.Phase, p.Status.ContainerStatuses)
		})
		if !running && ctx.Err() == nil {
			fail("churn pod %s not Running %s after its creation: %s", name, time.Since(start).Round(time.Second), state)
		}
		// Deleted even when the test ends: a new context.
		deleted := time.Now()
		if err := pods.Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
			fail("delete churn pod %s: %v", name, err)
			return
		}
		if ctx.Err() != nil {
			return // the cleanup waits for it to go
		}
		gone, state := wait(func() (bool, string) {
			p, err := pods.Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return true, ""
			}
			if err != nil {
				return false, err.Error()
			}
			return false, fmt.Sprintf("%s %+v", p.Status.Phase, p.Status.ContainerStatuses)
		})
		switch {
		case !gone && ctx.Err() == nil:
			fail("churn pod %s not gone %s after its deletion: %s", name, time.Since(deleted).Round(time.Second), state)
		case gone && running:
			u.mu.Lock()
			u.churnDone++
			u.mu.Unlock()
		}
		select {
		case <-ctx.Done():
		case <-time.After(upgradeChurnEvery):
		}
	}
}

func (u *upgrade) churned() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.churnDone
}

// checkNew fails on what the sampler and the churn saw since the last checkNew.
func (u *upgrade) checkNew(name string) {
	u.t.Helper()
	u.mu.Lock()
	defer u.mu.Unlock()
	if v := u.violations[u.reported[0]:]; len(v) > 0 {
		u.t.Errorf("%s: the API showed a long-lived pod or the node not Ready:\n%s", name, strings.Join(v, "\n"))
	}
	if e := u.churnErrs[u.reported[1]:]; len(e) > 0 {
		u.t.Errorf("%s: the churn pods:\n%s", name, strings.Join(e, "\n"))
	}
	u.reported = [2]int{len(u.violations), len(u.churnErrs)}
}

// log logs the table of the steps.
func (u *upgrade) log(total time.Duration) {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STEP\tDPKG\tSTEP WALL\tDOWNTIME (EXIT TO READY)\tEXIT TO 1ST ANSWER\tCALLS\tVERSION (OLD -> NEW PROCESS)")
	for _, r := range u.timings {
		versions, toAnswer := "-", fmtDur(r.toAnswer)
		if r.newV != "" {
			versions = r.oldV + " -> " + r.newV
		}
		if r.queued {
			toAnswer += " (queued)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", r.step, fmtDur(r.dpkg), fmtDur(r.wall), fmtDowntime(r.downtime), toAnswer, r.calls, versions)
	}
	_ = tw.Flush()
	u.mu.Lock()
	fmt.Fprintf(&b, "%d API samples, %d churn pods ran and went; the test took %s\n", u.samples, u.churnDone, total.Round(time.Second))
	u.mu.Unlock()
	u.t.Log("upgrades on " + u.node + ":\n" + b.String())
}

func fmtDur(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return d.Round(10 * time.Millisecond).String()
}

func fmtDowntime(d time.Duration) string {
	if d < 0 {
		return "-"
	}
	return d.Round(time.Millisecond).String()
}
