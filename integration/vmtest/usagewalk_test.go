package vmtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/unitlet/unitlet/integration/harness"
)

// mklinksSource is a static helper a pod runs from a hostPath: in DIR it makes files f<j> of
// one byte and N hard links l<i> to them, PER links to a file (ext4 allows 65000 a file),
// then prints LINKED. busybox makes one process per link, which the emulated guest runs at
// some ten a second.
const mklinksSource = `package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

func main() {
	dir := os.Args[1]
	n, _ := strconv.Atoi(os.Args[2])
	per, _ := strconv.Atoi(os.Args[3])
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fmt.Println("FAILED", err)
		os.Exit(1)
	}
	start := time.Now()
	var target string
	for i := 0; i < n; i++ {
		if i%per == 0 {
			target = filepath.Join(dir, "f"+strconv.Itoa(i/per))
			if err := os.WriteFile(target, []byte("x"), 0o644); err != nil {
				fmt.Println("FAILED", err)
				os.Exit(1)
			}
		}
		if err := os.Link(target, filepath.Join(dir, "l"+strconv.Itoa(i))); err != nil {
			fmt.Println("FAILED", err)
			os.Exit(1)
		}
		if i > 0 && i%100000 == 0 {
			fmt.Println("PROGRESS", i, time.Since(start).Round(time.Second))
		}
	}
	fmt.Println("LINKED", n, time.Since(start).Round(time.Second))
}
`

// buildMklinks builds mklinksSource for the guest (linux/amd64, static) and returns it.
func buildMklinks(t *testing.T) []byte {
	t.Helper()
	dir := t.TempDir()
	for name, content := range map[string]string{"main.go": mklinksSource, "go.mod": "module mklinks\n\ngo 1.26\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("go", "build", "-trimpath", "-o", "mklinks", ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64", "GOWORK=off", "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the link helper: %v\n%s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(dir, "mklinks"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// oomKills is the oom_kill count of a unit's cgroup (memory.events).
func oomKills(t *testing.T, node, unit string) string {
	t.Helper()
	for _, line := range strings.Split(cgroupFile(t, node, unit, "memory.events"), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok && k == "oom_kill" {
			return v
		}
	}
	t.Fatalf("%s: no oom_kill in memory.events", unit)
	return ""
}

// TestMillionLinkEmptyDirIsMeasuredUnderTheShippedUnits: a pod makes a million hard links
// in one directory of an emptyDir (UNITLET_VM_LINKS for another count). unitlet-eviction
// (MemoryMax=128M) and unitlet-volumes (MemoryMax=256M) walk it on their rounds: neither is
// OOM-killed nor restarted (their cgroups' oom_kill and systemd's NRestarts unchanged),
// unitlet-volumes reports the volume's usage (the directory's blocks) in /stats/summary,
// unitlet-eviction still admits a new pod with its verdict, and it still evicts: the pod
// then writes past the emptyDir's sizeLimit and is evicted with the kubelet's message,
// which takes a complete walk of that volume. Reading a directory whole, as the walks once
// did, took some 140 MiB for a million entries: unitlet-eviction was killed in a loop.
func TestMillionLinkEmptyDirIsMeasuredUnderTheShippedUnits(t *testing.T) {
	n := vmNode(t)
	harness.HeavyPhase(t, "the vm's million-link walk")
	node := n.Name
	links := 1_000_000
	if v := os.Getenv("UNITLET_VM_LINKS"); v != "" {
		var err error
		if links, err = strconv.Atoi(v); err != nil || links <= 0 {
			t.Fatalf("UNITLET_VM_LINKS=%q: want a positive count", v)
		}
	}
	c := admin(t)
	ctx := context.Background()

	const helper = "/var/tmp/unitlet-test-mklinks"
	install := stack.Exec(node, []string{"sh", "-c", "cat > " + helper + ".tmp && chmod 0755 " + helper + ".tmp && mv " + helper + ".tmp " + helper})
	install.Stdin = bytes.NewReader(buildMklinks(t))
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("install the link helper in %s: %v\n%s", node, err, out)
	}
	t.Cleanup(func() { _ = stack.Exec(node, []string{"rm", "-f", helper}).Run() })

	units := []string{"unitlet-eviction.service", "unitlet-volumes.service"}
	type unitState struct{ restarts, pid, oom string }
	before := map[string]unitState{}
	for _, u := range units {
		p := stack.UnitProps(t, node, u, "NRestarts", "MainPID")
		before[u] = unitState{p["NRestarts"], p["MainPID"], oomKills(t, node, u)}
	}
	unchanged := func(when string) {
		t.Helper()
		for _, u := range units {
			p := stack.UnitProps(t, node, u, "NRestarts", "MainPID", "ActiveState", "Result")
			now := unitState{p["NRestarts"], p["MainPID"], oomKills(t, node, u)}
			if now != before[u] || p["ActiveState"] != "active" {
				journal, _ := stack.Exec(node, []string{"journalctl", "-u", u, "--no-pager", "-o", "short-precise", "-n", "60"}).CombinedOutput()
				t.Fatalf("%s: %s: NRestarts %s, MainPID %s, oom_kill %s, %s (%s); was %s, %s, %s\n%s",
					when, u, now.restarts, now.pid, now.oom, p["ActiveState"], p["Result"], before[u].restarts, before[u].pid, before[u].oom, journal)
			}
		}
	}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, u := range units {
			p, _ := stack.Exec(node, []string{"systemctl", "show", u, "-p", "NRestarts", "-p", "Result", "-p", "MainPID"}).CombinedOutput()
			ev, _ := stack.Exec(node, []string{"sh", "-c", "cat /sys/fs/cgroup$(systemctl show -p ControlGroup --value " + u + ")/memory.events"}).CombinedOutput()
			journal, _ := stack.Exec(node, []string{"journalctl", "-u", u, "--no-pager", "-o", "short-precise", "-n", "40"}).CombinedOutput()
			t.Logf("%s: %s\nmemory.events: %s\n%s", u, strings.Join(strings.Fields(string(p)), " "), strings.Join(strings.Fields(string(ev)), " "), journal)
		}
	})
	// How often unitlet-eviction's rounds end while the volume is there, in the log.
	sampling, sampled := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-sampling:
				return
			case <-time.After(time.Minute):
			}
			out, err := stack.Exec(node, []string{"sh", "-c", "unitletctl eviction -o json | grep -m1 '\"observed\"'; systemctl show -p NRestarts --value unitlet-eviction"}).CombinedOutput()
			t.Logf("unitlet-eviction: %v %s", err, strings.Join(strings.Fields(string(out)), " "))
		}
	}()
	defer func() {
		close(sampling)
		<-sampled
	}()

	const sizeLimit = "96Mi"
	limit := resource.MustParse(sizeLimit)
	fileType := corev1.HostPathFile
	pod := vmPod("walk-links", map[string]string{"c": fmt.Sprintf("/mklinks /data/links %d 60000 || exit 1; "+
		"while [ ! -s /data/fill ]; do sleep 1; done; dd if=/dev/zero of=/data/big bs=1M count=$(cat /data/fill); echo FILLED; exec sleep 100000", links)})
	pod.Spec.Volumes = []corev1.Volume{
		{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: &limit}}},
		{Name: "helper", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: helper, Type: &fileType}}},
	}
	pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}, {Name: "helper", MountPath: "/mklinks", ReadOnly: true}}
	created := runVMPod(t, pod)
	logFile := fmt.Sprintf("/var/log/pods/%s_%s_%s/c/0.log", pod.Namespace, pod.Name, created.UID)
	volume := fmt.Sprintf("/var/lib/unitlet/pods/%s/volumes/kubernetes.io~empty-dir/data", created.UID)

	start := time.Now()
	var out, progress string
	stack.WaitFor(t, 90*time.Minute, fmt.Sprintf("%d links made in the emptyDir", links), func(context.Context) (bool, string) {
		o, _ := stack.Exec(node, []string{"cat", logFile}).CombinedOutput()
		out = string(o)
		if strings.Contains(out, "FAILED") {
			t.Fatalf("the link helper failed:\n%s", out)
		}
		if last := lastLines(strings.TrimSpace(out), 1); last != progress {
			progress = last
			t.Logf("%s: %s", time.Since(start).Round(time.Second), last)
		}
		return strings.Contains(out, "LINKED"), lastLines(strings.TrimSpace(out), 2)
	})
	made := time.Since(start)
	t.Logf("%d links made in %s (the helper: %s)", links, made.Round(time.Second), lastLines(strings.TrimSpace(out), 1))
	unchanged("after the links were made")
	duStart := time.Now()
	used, err := strconv.ParseInt(strings.Fields(stack.InNode(t, node, "du", "-s", "-B1", volume))[0], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("du of the emptyDir: %.1f MiB, in %s (the guest's own walk of it)", float64(used)/(1<<20), time.Since(duStart).Round(time.Second))
	if used >= limit.Value()-16*mi {
		t.Fatalf("the emptyDir already uses %d bytes, too close to its sizeLimit %s for the test", used, sizeLimit)
	}

	// unitlet-volumes measured the volume after the links were made (every 30 s): the
	// directory's blocks are in its usage.
	walked := time.Now()
	var lastSummary string
	var asked time.Time
	stack.WaitFor(t, 10*time.Minute, "the emptyDir's usage with its links in /stats/summary", func(ctx context.Context) (ok bool, why string) {
		// Each request starts a relay process in the guest, which its one emulated CPU
		// shares with the walks: ask every 15 s.
		if time.Since(asked) < 15*time.Second {
			return false, lastSummary
		}
		asked = time.Now()
		defer func() {
			if why != lastSummary {
				lastSummary = why
				t.Logf("%s: /stats/summary: %s", time.Since(walked).Round(time.Second), why)
			}
		}()
		code, body, err := guestNodeAPIGet(ctx, t, "/stats/summary")
		if err != nil || code != http.StatusOK {
			return false, fmt.Sprintf("%d %v: %.300s", code, err, body)
		}
		var s statsv1alpha1.Summary
		if err := json.Unmarshal([]byte(body), &s); err != nil {
			return false, err.Error()
		}
		for _, p := range s.Pods {
			if p.PodRef.Name != pod.Name {
				continue
			}
			for _, v := range p.VolumeStats {
				if v.Name == "data" && v.UsedBytes != nil {
					return int64(*v.UsedBytes) >= used*9/10, fmt.Sprintf("data: %d bytes used, want about %d", *v.UsedBytes, used)
				}
			}
			return false, fmt.Sprintf("pod %s: no volume data: %+v", pod.Name, p.VolumeStats)
		}
		return false, "pod " + pod.Name + " not in the summary"
	})
	t.Logf("unitlet-volumes' usage of the emptyDir reached /stats/summary %s after the links were made", time.Since(walked).Round(time.Second))

	// unitlet-eviction still answers admission with a verdict: a new pod runs without an
	// event saying it waited for one or went without.
	admitted := vmPod("walk-admitted", map[string]string{"c": "exec sleep 100000"})
	runVMPod(t, admitted)
	evs, err := c.CoreV1().Events(admitted.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + admitted.Name})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Items {
		if e.Reason == "WaitingForEvictionCheck" || e.Reason == "AdmittedWithoutEvictionCheck" {
			t.Errorf("%s: event %s %q: unitlet-eviction did not give its verdict", admitted.Name, e.Reason, e.Message)
		}
	}

	// And it evicts from that volume: past the sizeLimit by a file, which only a walk of
	// the whole volume sees.
	fill := (limit.Value()-used)/mi + 16
	stack.InNode(t, node, "sh", "-c", fmt.Sprintf("echo %d > %s/fill.tmp && mv %s/fill.tmp %s/fill", fill, volume, volume, volume))
	filled := time.Now()
	evicted := waitEvicted(t, pod.Namespace, pod.Name, 10*time.Minute)
	t.Logf("evicted %s after the fill: %q", time.Since(filled).Round(time.Second), evicted.Status.Message)
	if want := `Usage of EmptyDir volume "data" exceeds the limit "` + sizeLimit + `". `; evicted.Status.Message != want {
		t.Errorf("message %q, want the kubelet's %q", evicted.Status.Message, want)
	}
	unchanged("after the eviction")
	for _, u := range units {
		limit := wantMemoryMax(t, "systemd/"+u, unitLimits(t, strings.TrimSuffix(strings.TrimPrefix(u, "unitlet-"), ".service"))["MemoryMax"])
		peak, _ := stack.Exec(node, []string{"sh", "-c", "cat /sys/fs/cgroup$(systemctl show -p ControlGroup --value " + u + ")/memory.peak"}).CombinedOutput()
		t.Logf("%s: memory.peak %s bytes (page cache included), memory.max %s", u, strings.TrimSpace(string(peak)), limit)
	}
}
