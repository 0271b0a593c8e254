package vmtest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// The clock test's figures: the kubelet's crash-loop backoff (10 s doubling to 5 min), the
// node's lease (the kubelet's default of 40 s, renewed every quarter), the probed pod's
// period, and how long each clock step holds.
const (
	clockBackoffInitial = 10 * time.Second
	clockBackoffMax     = 5 * time.Minute
	clockLeaseRenew     = 40 * time.Second / 4
	clockProbePeriod    = 5 * time.Second
	clockPhase          = 40 * time.Second
	// clockProbeDir is the guest directory where each run of the probe appends a line.
	clockProbeDir = "/var/tmp/unitlet-clock-test"
	// clockStallSlack is what the lease's and the probe's gaps may exceed their period by:
	// the emulated guest stalls for up to about 15 s when the host is busy (make test runs
	// the harness suites beside it; a 17.5 s probe gap was seen so), while a clock step's
	// defect shows as a minute.
	clockStallSlack = 15 * time.Second
)

// clockStep is one step of the guest's wall clock: where it is set, against true time.
type clockStep struct {
	name   string
	offset time.Duration
}

// TestClockStepsKeepTheLeaseAndBackoffsSane steps the vm node's wall clock (time sync
// stopped) +60 s, then −120 s (60 s behind true time), then +60 s back, about 40 s
// apart, and watches from the host, once a second:
//
//   - the Node stays Ready in the API, without one NotReady spell;
//   - its Lease in kube-node-lease is renewed every leaseDuration/4 as the host sees it
//     (renewTime comes from the guest's clock: what matters is that it moves on, after
//     the last one, so that the node lifecycle controller counts it);
//   - no unitlet service restarts (MainPID and NRestarts: the watchdog is monotonic);
//   - a crash-looping container restarts on the kubelet's backoff (10 s, 20 s, 40 s, 80 s
//     ...), with no early restart after the forward step and no extra wait after the
//     backward one;
//   - a pod with an exec readiness probe every 5 s stays Ready and its probe runs, with
//     no gap of more than 3 periods (each gap above with clockStallSlack for the
//     emulated guest's stalls on a busy host).
//
// The guest's clock is set back to the host's when the test ends, whatever happened.
func TestClockStepsKeepTheLeaseAndBackoffsSane(t *testing.T) {
	n := vmNode(t)
	node := n.Name
	c := admin(t)
	ctx := context.Background()

	// Time sync off (Debian's systemd-timesyncd, when the guest has it), and the guest's
	// clock set back to the host's in any case.
	syncState := guestUnitState(t, node, "systemd-timesyncd.service")
	t.Logf("systemd-timesyncd in the guest: %s; guest clock %s from the host's", syncState, guestOffset(t, node).Round(time.Millisecond))
	if syncState == "active" {
		stack.InNode(t, node, "systemctl", "stop", "systemd-timesyncd.service")
	}
	t.Cleanup(func() {
		setGuestClock(t, node, 0)
		t.Logf("guest clock restored: %s from the host's", guestOffset(t, node).Round(time.Millisecond))
		if syncState == "active" {
			stack.InNode(t, node, "systemctl", "start", "systemd-timesyncd.service")
		}
	})

	units := map[string]map[string]string{}
	for _, svc := range n.Services {
		unit := "unitlet-" + svc + ".service"
		units[unit] = stack.UnitProps(t, node, unit, "MainPID", "NRestarts")
	}
	ready := nodeReady(t, c, node)
	if ready.Status != corev1.ConditionTrue {
		t.Fatalf("node %s is not Ready before the test: %s %s", node, ready.Reason, ready.Message)
	}

	// The pods: one crash-looping, one probed every 5 s, whose probe appends a line to a
	// file of the guest per run.
	stack.InNode(t, node, "sh", "-c", "rm -rf "+clockProbeDir)
	t.Cleanup(func() { _ = stack.Exec(node, []string{"rm", "-rf", clockProbeDir}).Run() })
	crash := vmPod("clock-crashloop", map[string]string{"c": "exit 1"})
	probed := vmPod("clock-probed", map[string]string{"c": "exec sleep 100000"})
	dirOrCreate := corev1.HostPathDirectoryOrCreate
	probed.Spec.Volumes = []corev1.Volume{{Name: "probes", VolumeSource: corev1.VolumeSource{
		HostPath: &corev1.HostPathVolumeSource{Path: clockProbeDir, Type: &dirOrCreate},
	}}}
	pc := &probed.Spec.Containers[0]
	pc.VolumeMounts = []corev1.VolumeMount{{Name: "probes", MountPath: "/probes"}}
	pc.ReadinessProbe = &corev1.Probe{
		ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"sh", "-c", "echo run >> /probes/runs"}}},
		// A run that times out fails: a timeout as long as the guest's longest stall on a
		// busy host, so that three failures in a row (NotReady) take more than stalls do.
		PeriodSeconds: int32(clockProbePeriod / time.Second), TimeoutSeconds: int32(clockStallSlack / time.Second), FailureThreshold: 3,
	}
	for _, p := range []*corev1.Pod{crash, probed} {
		if _, err := c.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.CoreV1().Pods(p.Namespace).Delete(context.Background(), p.Name, metav1.DeleteOptions{}) })
	}

	// Watching starts now, so that the crash loop's restarts are timed from the first.
	w := &clockWatch{t: t, c: c, node: node, crash: crash.Name, probed: probed.Name, began: time.Now()}
	w.sample(ctx)
	stack.WaitFor(t, 3*time.Minute, "the probed pod Ready and the crash-looping one restarted twice", func(ctx context.Context) (bool, string) {
		w.sample(ctx)
		return w.podReady && w.restarts >= 2 && w.probeRuns > 0,
			fmt.Sprintf("probed pod Ready %t, %d probe runs; crash loop restarts %d", w.podReady, w.probeRuns, w.restarts)
	})
	w.checking = true
	w.lastRestartSeen = len(w.restartTimes) - 1

	steps := []clockStep{{"+60s", time.Minute}, {"-120s", -time.Minute}, {"+60s back", 0}}
	var stepRestarts []int
	for _, s := range steps {
		setGuestClock(t, node, s.offset)
		w.mark(fmt.Sprintf("step %s: guest clock %s from the host's", s.name, guestOffset(t, node).Round(time.Millisecond)))
		stepRestarts = append(stepRestarts, w.restarts)
		w.run(ctx, clockPhase, nil)
	}
	// After the last step, until the crash loop's next restart shows it kept its backoff.
	last := stepRestarts[len(stepRestarts)-1]
	wait := backoffAfter(w.restarts) - time.Since(w.restartTimes[len(w.restartTimes)-1]) + clockRestartSlack
	w.run(ctx, max(wait, 0), func() bool { return w.restarts > last })
	w.report()
	// The pods' events (probe failures, backoffs) as the API has them.
	for _, p := range []*corev1.Pod{crash, probed} {
		evs, err := c.CoreV1().Events(p.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + p.Name})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs.Items {
			t.Logf("event of %s: %s %s x%d: %s", p.Name, e.Type, e.Reason, max(e.Count, 1), e.Message)
		}
	}
	if t.Failed() {
		t.Logf("unitlet-podsync's journal:\n%s", lastLines(stack.InNode(t, node, "journalctl", "-u", "unitlet-podsync", "--no-pager", "-o", "short-monotonic", "-n", "150"), 150))
	}

	restarted := 0
	for unit, was := range units {
		if now := stack.UnitProps(t, node, unit, "MainPID", "NRestarts"); now["MainPID"] != was["MainPID"] || now["NRestarts"] != was["NRestarts"] {
			restarted++
			t.Errorf("%s restarted while the clock stepped: MainPID %s NRestarts %s, was %s and %s", unit, now["MainPID"], now["NRestarts"], was["MainPID"], was["NRestarts"])
		}
	}
	t.Logf("unitlet services: %d of %d restarted (MainPID, NRestarts)", restarted, len(units))
	if after := nodeReady(t, c, node); after.Status != corev1.ConditionTrue || !after.LastTransitionTime.Equal(&ready.LastTransitionTime) {
		t.Errorf("node %s Ready changed: %s since %s (%s), was True since %s", node, after.Status, after.LastTransitionTime, after.Message, ready.LastTransitionTime)
	}
}

// clockRestartSlack is how much later than its backoff a restart may be seen from the
// host: the emulated guest creates and starts the container, relists it, and writes the
// pod's status, and it stalls when the host is busy (17.7 s late was seen here with make
// test's other suites beside it, on a machine faster than CI's; 30.2 s on 2026-11-27,
// the guest stalled so that an exec probe timed out after 15 s). The defect it is there
// for, a backoff counted on the wall clock, makes the restart whose backoff spans the
// step back late by the whole step, 120 s. clockEarlySlack is how much earlier: the
// host sees each restart through the API, once a second.
const (
	clockRestartSlack = 60 * time.Second
	clockEarlySlack   = 3 * time.Second
)

// backoffAfter is the crash-loop backoff before the restart that follows the restarts-th:
// none before the first, then 10 s doubling to 5 min (the kubelet's).
func backoffAfter(restarts int) time.Duration {
	if restarts == 0 {
		return 0
	}
	d := clockBackoffInitial
	for i := 1; i < restarts && d < clockBackoffMax; i++ {
		d *= 2
	}
	return min(d, clockBackoffMax)
}

// clockWatch is what the host sees of the node, its lease and the two pods, once a second.
type clockWatch struct {
	t                    *testing.T
	c                    kubernetes.Interface
	node, crash, probed  string
	began                time.Time
	checking             bool
	events               []string
	notReady             []string
	leaseRenew           string
	leaseSeen, leaseLast time.Time
	leaseRenewals        int
	leaseGapMax          time.Duration
	leaseBackwards       []string
	// The renewals the node lifecycle controller counts: those after the latest before.
	leaseMax         time.Time
	leaseCountedSeen time.Time
	leaseCountedGap  time.Duration
	leaseCountedAt   string
	restarts         int
	restartTimes     []time.Time
	lastRestartSeen  int
	podReady         bool
	podNotReady      []string
	probeRuns        int
	probeSeen        time.Time
	probeGapMax      time.Duration
	probeGapAt       string
	probedContainer  string
}

func (w *clockWatch) at() string { return time.Since(w.began).Round(100 * time.Millisecond).String() }

// mark records a step of the test in the figures.
func (w *clockWatch) mark(what string) {
	w.events = append(w.events, w.at()+" "+what)
}

// run samples once a second for d, or until done holds.
func (w *clockWatch) run(ctx context.Context, d time.Duration, done func() bool) {
	end := time.Now().Add(d)
	for time.Now().Before(end) && (done == nil || !done()) {
		next := time.Now().Add(time.Second)
		w.sample(ctx)
		time.Sleep(time.Until(next))
	}
}

// sample looks at the Node, the Lease, the two pods and the probe's runs once.
func (w *clockWatch) sample(ctx context.Context) {
	t := w.t
	now := time.Now()
	if nd, err := w.c.CoreV1().Nodes().Get(ctx, w.node, metav1.GetOptions{}); err != nil {
		t.Logf("%s get node: %v", w.at(), err)
	} else {
		for _, cond := range nd.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status != corev1.ConditionTrue && w.checking {
				w.notReady = append(w.notReady, fmt.Sprintf("%s %s %s %q", w.at(), cond.Status, cond.Reason, cond.Message))
			}
		}
	}
	if l, err := w.c.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, w.node, metav1.GetOptions{}); err != nil {
		t.Logf("%s get lease: %v", w.at(), err)
	} else if l.Spec.RenewTime != nil {
		renew := l.Spec.RenewTime.Format(time.RFC3339Nano)
		if renew != w.leaseRenew {
			if w.leaseRenew != "" && w.checking {
				if gap := now.Sub(w.leaseSeen); gap > w.leaseGapMax {
					w.leaseGapMax = gap
				}
				w.leaseRenewals++
				if !l.Spec.RenewTime.Time.After(w.leaseLast) {
					w.leaseBackwards = append(w.leaseBackwards, fmt.Sprintf("%s renewTime %s after %s", w.at(), renew, w.leaseRenew))
				}
			}
			w.leaseRenew, w.leaseSeen, w.leaseLast = renew, now, l.Spec.RenewTime.Time
		}
		if l.Spec.RenewTime.Time.After(w.leaseMax) {
			if w.checking {
				if gap := now.Sub(w.leaseCountedSeen); gap > w.leaseCountedGap {
					w.leaseCountedGap, w.leaseCountedAt = gap, w.at()
				}
			}
			w.leaseMax, w.leaseCountedSeen = l.Spec.RenewTime.Time, now
		}
	}
	if p, err := w.c.CoreV1().Pods("default").Get(ctx, w.crash, metav1.GetOptions{}); err != nil {
		t.Logf("%s get pod %s: %v", w.at(), w.crash, err)
	} else if len(p.Status.ContainerStatuses) == 1 {
		if n := int(p.Status.ContainerStatuses[0].RestartCount); n > w.restarts {
			for ; w.restarts < n; w.restarts++ {
				w.restartTimes = append(w.restartTimes, now)
			}
		}
	}
	if p, err := w.c.CoreV1().Pods("default").Get(ctx, w.probed, metav1.GetOptions{}); err != nil {
		t.Logf("%s get pod %s: %v", w.at(), w.probed, err)
	} else {
		ready := false
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodReady {
				ready = cond.Status == corev1.ConditionTrue
			}
		}
		if !ready && w.checking {
			w.podNotReady = append(w.podNotReady, w.at())
		}
		w.podReady = ready
		if cs := p.Status.ContainerStatuses; len(cs) == 1 && cs[0].ContainerID != w.probedContainer {
			if w.probedContainer != "" {
				w.mark(fmt.Sprintf("the probed pod's container is now %s (restart count %d), was %s", cs[0].ContainerID, cs[0].RestartCount, w.probedContainer))
			}
			w.probedContainer = cs[0].ContainerID
		}
	}
	// One line per run of the probe; missing before the first.
	out, _ := stack.Exec(w.node, []string{"sh", "-c", "cat " + clockProbeDir + "/runs 2>/dev/null | wc -l"}).Output()
	if runs, err := strconv.Atoi(strings.TrimSpace(string(out))); err == nil && runs > w.probeRuns {
		if w.probeRuns > 0 && w.checking {
			if gap := now.Sub(w.probeSeen); gap > w.probeGapMax {
				w.probeGapMax, w.probeGapAt = gap, w.at()
			}
		}
		w.probeRuns, w.probeSeen = runs, now
	}
}

// report logs the figures and fails the test on what went wrong.
func (w *clockWatch) report() {
	t := w.t
	for _, e := range w.events {
		t.Log(e)
	}
	if len(w.notReady) > 0 {
		t.Errorf("node %s was not Ready in %d samples: %s", w.node, len(w.notReady), strings.Join(w.notReady, "; "))
	} else {
		t.Logf("node %s: Ready in every sample", w.node)
	}
	// The gaps still open when watching ended count too.
	if open := time.Since(w.leaseSeen); open > w.leaseGapMax {
		w.leaseGapMax = open
	}
	if open := time.Since(w.leaseCountedSeen); open > w.leaseCountedGap {
		w.leaseCountedGap, w.leaseCountedAt = open, w.at()
	}
	if open := time.Since(w.probeSeen); open > w.probeGapMax {
		w.probeGapMax, w.probeGapAt = open, w.at()
	}
	t.Logf("lease: %d renewals seen, longest gap %s (renewed every %s)", w.leaseRenewals, w.leaseGapMax.Round(100*time.Millisecond), clockLeaseRenew)
	if w.leaseRenewals == 0 || w.leaseGapMax > clockLeaseRenew+clockStallSlack {
		t.Errorf("the lease of %s was not renewed every %s (+%s): %d renewals, longest gap %s", w.node, clockLeaseRenew, clockStallSlack, w.leaseRenewals, w.leaseGapMax.Round(100*time.Millisecond))
	}
	t.Logf("lease: longest gap between renewals the node lifecycle controller counts (renewTime after the latest before): %s, ending at %s", w.leaseCountedGap.Round(100*time.Millisecond), w.leaseCountedAt)
	if len(w.leaseBackwards) > 0 {
		t.Errorf("the lease's renewTime went back (the node lifecycle controller ignores such a renewal): %s", strings.Join(w.leaseBackwards, "; "))
	}
	if w.leaseCountedGap > clockLeaseRenew+clockStallSlack {
		t.Errorf("the node lifecycle controller saw no renewal of the lease for %s (ending at %s), over %s (+%s)", w.leaseCountedGap.Round(100*time.Millisecond), w.leaseCountedAt, clockLeaseRenew, clockStallSlack)
	}

	// The crash loop: each restart after the ones before watching began, against its backoff.
	var intervals []string
	for i := w.lastRestartSeen + 1; i < len(w.restartTimes); i++ {
		got, want := w.restartTimes[i].Sub(w.restartTimes[i-1]), backoffAfter(i)
		intervals = append(intervals, fmt.Sprintf("restart %d after %s (backoff %s)", i+1, got.Round(100*time.Millisecond), want))
		if got < want-clockEarlySlack {
			t.Errorf("restart %d of the crash loop came %s after the one before, earlier than its backoff %s", i+1, got.Round(100*time.Millisecond), want)
		}
		if got > want+clockRestartSlack {
			t.Errorf("restart %d of the crash loop came %s after the one before, over its backoff %s (+%s)", i+1, got.Round(100*time.Millisecond), want, clockRestartSlack)
		}
	}
	t.Logf("crash loop: %d restarts; %s", w.restarts, strings.Join(intervals, "; "))
	if open := time.Since(w.restartTimes[len(w.restartTimes)-1]); open > backoffAfter(w.restarts)+clockRestartSlack {
		t.Errorf("the crash loop has not restarted for %s since restart %d, over its backoff %s (+%s)", open.Round(100*time.Millisecond), w.restarts, backoffAfter(w.restarts), clockRestartSlack)
	}
	if len(w.restartTimes)-1-w.lastRestartSeen < 2 {
		t.Errorf("only %d restarts of the crash loop while the clock stepped: too few to judge its backoff", len(w.restartTimes)-1-w.lastRestartSeen)
	}

	t.Logf("probed pod: %d probe runs, longest gap %s ending at %s (period %s); not Ready in %d samples", w.probeRuns, w.probeGapMax.Round(100*time.Millisecond), w.probeGapAt, clockProbePeriod, len(w.podNotReady))
	if len(w.podNotReady) > 0 {
		t.Errorf("the probed pod was not Ready at %s", strings.Join(w.podNotReady, ", "))
	}
	// One exec the stalled guest lets time out costs the probe's whole timeout (clockStallSlack)
	// on top of its period: run 19 of 2026-11-29 saw 30.2 s so, against the 30 s this bound
	// was before it counted the timeout. A clock step's defect shows as a minute or more.
	if bound := 3*clockProbePeriod + clockStallSlack + clockStallSlack; w.probeGapMax > bound {
		t.Errorf("the readiness probe did not run for %s, over 3 periods (%s), a timed-out run (%s) and %s", w.probeGapMax.Round(100*time.Millisecond), 3*clockProbePeriod, clockStallSlack, clockStallSlack)
	}
}

// guestUnitState is a unit's ActiveState in the guest ("inactive" for one it lacks).
func guestUnitState(t *testing.T, node, unit string) string {
	return stack.UnitProps(t, node, unit, "ActiveState")["ActiveState"]
}

// setGuestClock sets the guest's wall clock to the host's plus offset.
func setGuestClock(t *testing.T, node string, offset time.Duration) {
	t.Helper()
	at := time.Now().Add(offset)
	stack.InNode(t, node, "date", "-u", "-s", fmt.Sprintf("@%d.%09d", at.Unix(), at.Nanosecond()))
}

// guestOffset is the guest's wall clock less the host's, read in the middle of the exec.
func guestOffset(t *testing.T, node string) time.Duration {
	t.Helper()
	before := time.Now()
	out := stack.InNode(t, node, "date", "+%s.%N")
	after := time.Now()
	sec, frac, _ := strings.Cut(out, ".")
	s, err1 := strconv.ParseInt(sec, 10, 64)
	ns, err2 := strconv.ParseInt(frac, 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("date +%%s.%%N in the guest: %q", out)
	}
	mid := before.Add(after.Sub(before) / 2)
	return time.Unix(s, ns).Sub(mid)
}
