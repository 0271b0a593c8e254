package harnesstest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// floodLines is how many numbered lines of 100 bytes the flooding container writes.
const floodLines = 900_000

// floodChunks is how many bursts the lines are written in.
const floodChunks = 10

// TestContainerLogsRotateWhileFollowed runs a container that writes 90 MB of numbered
// lines as fast as it can on node-1 (single-node.yaml: containerLogMaxSize 1Mi,
// containerLogMaxFiles 3, containerLogMonitorInterval 3s) and follows it with
// `kubectl logs -f` through the API server. The log rotates: rotated files appear, all but
// the newest rotated file are gzip files, never more than MaxFiles files; the follower
// gets every line in order across the rotations; the /var/log/containers link points at the
// log while the container runs, and the link and the log files are gone with the pod.
func TestContainerLogsRotateWhileFollowed(t *testing.T) {
	// Serial: 90 MB log flood (node-wide I/O load); rotation timing.
	waitNodeReady(t, 90*time.Second)
	// Each line: 8 digits, a space, 90 x's, a newline, as fast as awk and containerd go, in
	// floodChunks bursts 2 s apart: podsync looks every 3 s, so every look sees a log past
	// 1 MiB and rotates it, however fast the machine writes (a single burst ended within
	// two looks on a fast machine).
	script := fmt.Sprintf(`echo start; sleep 6; n=%d; c=0; while [ $c -lt %d ]; do
awk -v from=$((c*n+1)) -v to=$(((c+1)*n)) 'BEGIN { pad = sprintf("%%90s", ""); gsub(/ /, "x", pad);
for (i = from; i <= to; i++) printf "%%08d %%s\n", i, pad }'; c=$((c+1)); [ $c -lt %d ] && sleep 2; done; echo done; sleep 3600`,
		floodLines/floodChunks, floodChunks, floodChunks)
	p := busyboxPod("logflood", script)
	createPod(t, p)
	pod := apiPodRunningReady(t, "logflood", time.Minute)
	id := strings.TrimPrefix(pod.Status.ContainerStatuses[0].ContainerID, "containerd://")
	logPath := containerLogPath(t, id)

	link := "/var/log/containers/logflood_default_main-" + id + ".log"
	if got := stack.InNode(t, podsyncNode, "readlink", link); got != logPath {
		t.Errorf("%s on %s -> %q, want the container's log %s", link, podsyncNode, got, logPath)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	files := watchLogFiles(ctx, t, logPath)
	read, took, err := followNumbered(ctx, t, "logflood")
	seen := files()
	if err != nil {
		t.Errorf("kubectl logs -f: %v", err)
	}
	t.Logf("followed %d of %d lines in %s from the first line to the last (%d bursts 2 s apart); %d rotated files seen, at most %d files at once",
		read, floodLines, took.Round(100*time.Millisecond), floodChunks, len(seen.rotated), seen.most)
	if len(seen.rotated) < 3 {
		t.Errorf("rotated files seen: %q, want several rotations", seen.rotated)
	}
	if seen.most > 3 {
		t.Errorf("%d log files at once (%s), want at most containerLogMaxFiles = 3", seen.most, seen.mostAt)
	}
	for _, bad := range seen.problems {
		t.Error(bad)
	}

	if err := admin(t).CoreV1().Pods("default").Delete(context.Background(), "logflood", deleteNow()); err != nil {
		t.Fatal(err)
	}
	stack.WaitFor(t, time.Minute, "logflood's link and log files gone", func(ctx context.Context) (bool, string) {
		links := stack.InNode(t, podsyncNode, "ls", "/var/log/containers")
		left, _ := filepath.Glob(logPath + "*")
		return !strings.Contains(links, id) && len(left) == 0, fmt.Sprintf("links %q; log files %q", links, left)
	})
}

// TestContainerLogsRemovedPodsDirectoryGoes: as the kubelet's container garbage
// collection, podsync removes the log directory (<podLogsDir>/<namespace>_<name>_<uid>) of
// a pod that was deleted, within its period (a minute), and keeps that of a pod that ended
// but still exists, whose logs `kubectl logs` still reads.
func TestContainerLogsRemovedPodsDirectoryGoes(t *testing.T) {
	t.Parallel()
	waitNodeReady(t, 90*time.Second)
	ended := busyboxPod("logs-ended", "echo bye")
	ended.Spec.RestartPolicy = corev1.RestartPolicyNever
	ended = createPod(t, ended)
	createPod(t, busyboxPod("logs-deleted", "echo hi; while true; do sleep 1; done"))
	pod := apiPodRunningReady(t, "logs-deleted", time.Minute)
	dir := filepath.Dir(filepath.Dir(containerLogPath(t, strings.TrimPrefix(pod.Status.ContainerStatuses[0].ContainerID, "containerd://"))))
	if want := "default_logs-deleted_" + string(pod.UID); filepath.Base(dir) != want {
		t.Fatalf("the container's log is in %s, want a directory %s", dir, want)
	}
	endedDir := filepath.Join(filepath.Dir(dir), "default_logs-ended_"+string(ended.UID))
	stack.WaitFor(t, time.Minute, "logs-ended Succeeded", func(ctx context.Context) (bool, string) {
		p, err := admin(t).CoreV1().Pods("default").Get(ctx, "logs-ended", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return p.Status.Phase == corev1.PodSucceeded, string(p.Status.Phase)
	})
	if _, err := os.Stat(endedDir); err != nil {
		t.Fatalf("the ended pod's log directory: %v", err)
	}

	if err := admin(t).CoreV1().Pods("default").Delete(context.Background(), "logs-deleted", deleteNow()); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	stack.WaitFor(t, 90*time.Second, "logs-deleted's log directory gone", func(context.Context) (bool, string) {
		_, err := os.Stat(dir)
		return errors.Is(err, fs.ErrNotExist), fmt.Sprintf("%s: %v", dir, err)
	})
	t.Logf("the deleted pod's log directory was gone %s after the delete", time.Since(deleted).Round(time.Second))
	if _, err := os.Stat(endedDir); err != nil {
		t.Errorf("the log directory of the pod that ended and was not deleted: %v; want it kept", err)
	}
}

// containerLogPath is the log path the runtime has for a container.
func containerLogPath(t *testing.T, id string) string {
	t.Helper()
	rt, err := stack.CRI()
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	st, err := rt.Runtime.ContainerStatus(context.Background(), &runtimeapi.ContainerStatusRequest{ContainerId: id})
	if err != nil {
		t.Fatal(err)
	}
	return st.GetStatus().GetLogPath()
}

// logFiles is what watchLogFiles saw of a container's log files.
type logFiles struct {
	rotated  []string // rotated files, each once, in the order they appeared
	most     int      // the most files at once (a compression's temporary file not counted)
	mostAt   string
	problems []string
}

// watchLogFiles looks at the files of the log at path every 100 ms until ctx ends or the
// returned function is called, and checks that every rotated file but the newest is a
// gzip file.
func watchLogFiles(ctx context.Context, t *testing.T, path string) func() logFiles {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	var (
		wg  sync.WaitGroup
		out logFiles
	)
	known := map[string]bool{}
	wg.Go(func() {
		for ctx.Err() == nil {
			all, _ := filepath.Glob(path + "*")
			var files, plain []string
			for _, f := range all {
				if strings.HasSuffix(f, ".tmp") {
					continue
				}
				files = append(files, f)
				if f == path {
					continue
				}
				stamp := strings.TrimSuffix(strings.TrimPrefix(f, path+"."), ".gz")
				if !known[stamp] {
					known[stamp] = true
					out.rotated = append(out.rotated, filepath.Base(f))
				}
				if strings.HasSuffix(f, ".gz") {
					if b, err := readHead(f); err == nil && !bytes.HasPrefix(b, []byte{0x1f, 0x8b}) {
						out.problems = append(out.problems, f+" is not a gzip file")
					}
				} else {
					plain = append(plain, f)
				}
			}
			if len(files) > out.most {
				out.most, out.mostAt = len(files), strings.Join(files, " ")
			}
			// The newest rotated file stays plain for readers; a second plain one may only
			// be the moment before its compression ends.
			if len(plain) > 2 {
				out.problems = append(out.problems, fmt.Sprintf("uncompressed rotated files %q, want only the newest", plain))
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	})
	return func() logFiles {
		cancel()
		wg.Wait()
		return out
	}
}

func readHead(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, 2)
	_, err = io.ReadFull(f, b)
	return b, err
}

// followNumbered runs `kubectl logs -f` on a pod that prints "start", then numbered lines
// 1..floodLines, then "done", and returns how many numbered lines it read; an error names
// the first line out of sequence. took is the time from line 1 to "done".
func followNumbered(ctx context.Context, t *testing.T, pod string) (read int, took time.Duration, err error) {
	t.Helper()
	cmd := kubectlCmd(ctx, t, "logs", "-f", pod)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	sc := bufio.NewScanner(stdout)
	next := 1
	var first time.Time
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "start":
			continue
		case line == "done":
			if next != floodLines+1 {
				return next - 1, time.Since(first), fmt.Errorf("done after line %d, want %d lines", next-1, floodLines)
			}
			return next - 1, time.Since(first), nil
		}
		n, err := strconv.Atoi(strings.Fields(line + " ")[0])
		if err != nil || n != next {
			return next - 1, time.Since(first), fmt.Errorf("line %q after line %d, want line %d", line, next-1, next)
		}
		if next == 1 {
			first = time.Now()
		}
		next++
	}
	return next - 1, time.Since(first), fmt.Errorf("the log ended after line %d (%v): %s", next-1, sc.Err(), stderr.String())
}

// TestContainerLogLinksOfGoneContainersCleanedAfterRestart leaves in node-1's
// /var/log/containers a link to a log that is gone, of a container the runtime does not
// have (as when a container was removed while podsync was down), and a link to a live
// log; podsync, killed and started again, removes the first and keeps the second.
func TestContainerLogLinksOfGoneContainersCleanedAfterRestart(t *testing.T) {
	// Serial: SIGKILLs unitlet-podsync; edits /var/log/containers.
	waitNodeReady(t, 90*time.Second)
	createPod(t, busyboxPod("linked", "echo hello; sleep 3600"))
	pod := apiPodRunningReady(t, "linked", time.Minute)
	id := strings.TrimPrefix(pod.Status.ContainerStatuses[0].ContainerID, "containerd://")
	live := "/var/log/containers/linked_default_main-" + id + ".log"
	stale := "/var/log/containers/gone_default_main-0123456789abcdef.log"
	stack.InNode(t, podsyncNode, "ln", "-sf", "/var/log/pods/default_gone_x/main/0.log", stale)
	killPodsync(t)
	stack.WaitFor(t, time.Minute, "the stale link removed by the restarted podsync", func(context.Context) (bool, string) {
		links := stack.InNode(t, podsyncNode, "ls", "/var/log/containers")
		return !strings.Contains(links, filepath.Base(stale)), "links: " + links
	})
	if got := stack.InNode(t, podsyncNode, "readlink", live); got != containerLogPath(t, id) {
		t.Errorf("the running container's link %s -> %q after the restart, want its log", live, got)
	}
}

// TestContainerLogPolicyFollowsTheConfiguration changes containerLogMaxSize on node-1 with
// a drop-in in /etc/unitlet/config.d, which unitlet-config reloads: podsync, not
// restarted, stops rotating a 5 MB log at 1Gi, and rotates it once the drop-in is gone.
func TestContainerLogPolicyFollowsTheConfiguration(t *testing.T) {
	// Serial: changes the node configuration (config drop-in).
	waitNodeReady(t, 90*time.Second)
	const dropIn = "/etc/unitlet/config.d/90-container-logs-test.conf"
	changes := func() int {
		out := stack.InNode(t, podsyncNode, "sh", "-c", "journalctl -u unitlet-podsync --no-pager -o cat | grep -c 'container log rotation policy changed' || true")
		n, _ := strconv.Atoi(out)
		return n
	}
	before := changes()
	stack.InNode(t, podsyncNode, "sh", "-c", "printf 'apiVersion: kubelet.config.k8s.io/v1beta1\\nkind: KubeletConfiguration\\ncontainerLogMaxSize: 1Gi\\n' > "+dropIn+".tmp && chmod 0600 "+dropIn+".tmp && mv "+dropIn+".tmp "+dropIn)
	t.Cleanup(func() { _ = stack.Exec(podsyncNode, []string{"rm", "-f", dropIn}).Run() })
	stack.WaitFor(t, time.Minute, "podsync applies containerLogMaxSize 1Gi", func(context.Context) (bool, string) {
		n := changes()
		return n > before, fmt.Sprintf("%d policy changes logged", n)
	})

	createPod(t, busyboxPod("logpolicy", `awk 'BEGIN { for (i = 1; i <= 50000; i++) printf "%08d %090d\n", i, 0 }'; sleep 3600`))
	pod := apiPodRunningReady(t, "logpolicy", time.Minute)
	logPath := containerLogPath(t, strings.TrimPrefix(pod.Status.ContainerStatuses[0].ContainerID, "containerd://"))
	stack.WaitFor(t, time.Minute, "the 5 MB written", func(context.Context) (bool, string) {
		info, err := os.Stat(logPath)
		return err == nil && info.Size() >= 5_000_000, fmt.Sprint(info, err)
	})
	// Three checks (3 s each) at 1Gi: no rotation.
	time.Sleep(10 * time.Second)
	if rotated, _ := filepath.Glob(logPath + ".*"); len(rotated) != 0 {
		t.Fatalf("rotated at containerLogMaxSize 1Gi: %q", rotated)
	}

	stack.InNode(t, podsyncNode, "rm", dropIn)
	stack.WaitFor(t, time.Minute, "the 5 MB log rotated at the stack's 1Mi again", func(context.Context) (bool, string) {
		rotated, _ := filepath.Glob(logPath + ".*")
		return len(rotated) > 0, fmt.Sprintf("rotated files %q, %d policy changes logged", rotated, changes())
	})
}
