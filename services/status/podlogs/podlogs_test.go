package podlogs

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"
)

// current is the log of the current instance (restart count 1) of container "app".
const current = `2016-10-06T00:17:09.669794202Z stdout F first
2016-10-06T00:17:10.113242941Z stderr F oops
2016-10-06T00:17:11.000000000Z stdout P par
2016-10-06T00:17:11.100000000Z stdout F tial
2016-10-06T00:17:12.000000000Z stdout F last
`

const previous = `2016-10-06T00:10:00.000000000Z stdout F before restart
`

type fakePods struct {
	logs map[string]ContainerLog // by "ns/pod/container"
}

func (f fakePods) Container(_ context.Context, namespace, pod, container string) (ContainerLog, error) {
	cl, ok := f.logs[namespace+"/"+pod+"/"+container]
	if !ok {
		return ContainerLog{}, apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, pod)
	}
	return cl, nil
}

// fakeRuntime reports the container running until exited is set.
type fakeRuntime struct {
	exited atomic.Bool
	asked  atomic.Int32
}

func (f *fakeRuntime) ContainerStatus(_ context.Context, in *runtimeapi.ContainerStatusRequest, _ ...grpc.CallOption) (*runtimeapi.ContainerStatusResponse, error) {
	f.asked.Add(1)
	state := runtimeapi.ContainerState_CONTAINER_RUNNING
	if f.exited.Load() {
		state = runtimeapi.ContainerState_CONTAINER_EXITED
	}
	return &runtimeapi.ContainerStatusResponse{Status: &runtimeapi.ContainerStatus{Id: in.ContainerId, State: state}}, nil
}

// syncBuffer is a bytes.Buffer safe to read while the reader writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// setup writes a pod's log directory with 0.log (previous) and 1.log (current) of "app" and
// 0.log of "single" (never restarted).
func setup(t *testing.T) (*Reader, *fakeRuntime, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "default_web_uid1")
	write := func(rel, content string) string {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("app/0.log", previous)
	appPath := write("app/1.log", current)
	singlePath := write("single/0.log", "2016-10-06T00:17:09.669794202Z stdout F only\n")
	pods := fakePods{logs: map[string]ContainerLog{
		"default/web/app":     {PodUID: "uid1", ContainerID: "c-app", Path: appPath, RestartCount: 1},
		"default/web/single":  {PodUID: "uid1", ContainerID: "c-single", Path: singlePath},
		"default/web/waiting": {PodUID: "uid1"},
	}}
	rt := &fakeRuntime{}
	r := New(pods, rt)
	r.now = func() time.Time { return time.Date(2016, 10, 6, 0, 17, 12, 500000000, time.UTC) }
	return r, rt, appPath
}

func TestContainerLogs(t *testing.T) {
	since := metav1.NewTime(time.Date(2016, 10, 6, 0, 17, 10, 500000000, time.UTC))
	for _, tc := range []struct {
		name      string
		container string
		opts      *corev1.PodLogOptions
		stdout    string
		stderr    string
	}{
		{name: "all", container: "app", opts: nil,
			stdout: "first\npartial\nlast\n", stderr: "oops\n"},
		{name: "tail", container: "app", opts: &corev1.PodLogOptions{TailLines: ptr.To[int64](1)},
			stdout: "last\n"},
		{name: "tail zero", container: "app", opts: &corev1.PodLogOptions{TailLines: ptr.To[int64](0)}},
		{name: "timestamps", container: "app", opts: &corev1.PodLogOptions{Timestamps: true, TailLines: ptr.To[int64](2)},
			stdout: "2016-10-06T00:17:11.100000000Z tial\n2016-10-06T00:17:12.000000000Z last\n"},
		{name: "since time", container: "app", opts: &corev1.PodLogOptions{SinceTime: &since},
			stdout: "partial\nlast\n"},
		{name: "since seconds", container: "app", opts: &corev1.PodLogOptions{SinceSeconds: ptr.To[int64](1)},
			stdout: "last\n"},
		{name: "limit bytes", container: "app", opts: &corev1.PodLogOptions{LimitBytes: ptr.To[int64](8)},
			stdout: "first\n", stderr: "oo"},
		{name: "previous", container: "app", opts: &corev1.PodLogOptions{Previous: true},
			stdout: "before restart\n"},
		{name: "previous follow ends", container: "app", opts: &corev1.PodLogOptions{Previous: true, Follow: true},
			stdout: "before restart\n"},
		{name: "stdout only", container: "app", opts: &corev1.PodLogOptions{Stream: ptr.To(corev1.LogStreamStdout)},
			stdout: "first\npartial\nlast\n"},
		{name: "stderr only", container: "app", opts: &corev1.PodLogOptions{Stream: ptr.To(corev1.LogStreamStderr)},
			stderr: "oops\n"},
		{name: "never restarted", container: "single", opts: &corev1.PodLogOptions{},
			stdout: "only\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, _, _ := setup(t)
			var stdout, stderr bytes.Buffer
			if err := r.ContainerLogs(context.Background(), "default", "web", tc.container, tc.opts, &stdout, &stderr); err != nil {
				t.Fatalf("ContainerLogs: %v", err)
			}
			if got := stdout.String(); got != tc.stdout {
				t.Errorf("stdout = %q, want %q", got, tc.stdout)
			}
			if got := stderr.String(); got != tc.stderr {
				t.Errorf("stderr = %q, want %q", got, tc.stderr)
			}
		})
	}
}

func TestContainerLogsErrors(t *testing.T) {
	now := metav1.Now()
	for _, tc := range []struct {
		name      string
		container string
		opts      *corev1.PodLogOptions
		check     func(error) bool
		message   string
	}{
		{name: "negative tail", container: "app", opts: &corev1.PodLogOptions{TailLines: ptr.To[int64](-1)},
			check: apierrors.IsBadRequest},
		{name: "both since", container: "app", opts: &corev1.PodLogOptions{SinceSeconds: ptr.To[int64](5), SinceTime: &now},
			check: apierrors.IsBadRequest},
		{name: "zero since seconds", container: "app", opts: &corev1.PodLogOptions{SinceSeconds: ptr.To[int64](0)},
			check: apierrors.IsBadRequest},
		{name: "zero limit bytes", container: "app", opts: &corev1.PodLogOptions{LimitBytes: ptr.To[int64](0)},
			check: apierrors.IsBadRequest},
		{name: "tail with one stream", container: "app", opts: &corev1.PodLogOptions{TailLines: ptr.To[int64](1), Stream: ptr.To(corev1.LogStreamStderr)},
			check: apierrors.IsBadRequest},
		{name: "unknown stream", container: "app", opts: &corev1.PodLogOptions{Stream: ptr.To("Both")},
			check: apierrors.IsBadRequest},
		{name: "unknown container", container: "nope", opts: &corev1.PodLogOptions{},
			check: apierrors.IsNotFound},
		{name: "no previous", container: "single", opts: &corev1.PodLogOptions{Previous: true},
			check: apierrors.IsBadRequest, message: `previous terminated container "single" in pod "web" not found`},
		{name: "waiting", container: "waiting", opts: &corev1.PodLogOptions{},
			check: apierrors.IsBadRequest, message: `container "waiting" in pod "web" is waiting to start - no logs yet`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, _, _ := setup(t)
			var stdout, stderr bytes.Buffer
			err := r.ContainerLogs(context.Background(), "default", "web", tc.container, tc.opts, &stdout, &stderr)
			if err == nil || !tc.check(err) {
				t.Fatalf("ContainerLogs error = %v, want a %s error", err, tc.name)
			}
			if tc.message != "" && err.Error() != tc.message {
				t.Errorf("error = %q, want %q", err.Error(), tc.message)
			}
			if stdout.Len()+stderr.Len() != 0 {
				t.Errorf("wrote %q %q on error", stdout.String(), stderr.String())
			}
		})
	}
}

func TestContainerLogsPreviousMissingFile(t *testing.T) {
	r, _, appPath := setup(t)
	if err := os.Remove(filepath.Join(filepath.Dir(appPath), "0.log")); err != nil {
		t.Fatal(err)
	}
	err := r.ContainerLogs(context.Background(), "default", "web", "app", &corev1.PodLogOptions{Previous: true}, &bytes.Buffer{}, &bytes.Buffer{})
	if !apierrors.IsBadRequest(err) {
		t.Fatalf("error = %v, want BadRequest", err)
	}
}

func TestContainerLogsFollow(t *testing.T) {
	r, rt, appPath := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var stdout, stderr syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- r.ContainerLogs(ctx, "default", "web", "app", &corev1.PodLogOptions{Follow: true, TailLines: ptr.To[int64](1)}, &stdout, &stderr)
	}()
	waitFor(t, &stdout, "last\n")

	appendLine(t, appPath, "2016-10-06T00:17:13.000000000Z stdout F more\n")
	waitFor(t, &stdout, "last\nmore\n")
	select {
	case err := <-done:
		t.Fatalf("ContainerLogs returned while the container runs: %v", err)
	default:
	}

	// The container exits after a last line: the reader drains the file and stops.
	appendLine(t, appPath, "2016-10-06T00:17:14.000000000Z stderr F bye\n")
	rt.exited.Store(true)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("ContainerLogs: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("ContainerLogs kept following an exited container")
	}
	if got := stdout.String(); got != "last\nmore\n" {
		t.Errorf("stdout = %q", got)
	}
	if got := stderr.String(); got != "bye\n" {
		t.Errorf("stderr = %q", got)
	}
	if rt.asked.Load() == 0 {
		t.Error("the runtime was never asked whether the container runs")
	}
}

func TestContainerLogsFollowStopsWithContext(t *testing.T) {
	r, _, _ := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	var stdout syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- r.ContainerLogs(ctx, "default", "web", "app", &corev1.PodLogOptions{Follow: true}, &stdout, &bytes.Buffer{})
	}()
	waitFor(t, &stdout, "last\n")
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("ContainerLogs did not return after its context ended")
	}
}

func appendLine(t *testing.T, path, line string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(line); err != nil {
		t.Fatal(err)
	}
}

func waitFor(t *testing.T, b *syncBuffer, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.HasSuffix(b.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("output %q never ended with %q", b.String(), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// followFromLast follows the app container's log from its last line (for at most 20 s) and
// returns once that line is out: the runtime, the log's path, the follower's stdout, and
// where its end is reported.
func followFromLast(t *testing.T) (*fakeRuntime, string, *syncBuffer, <-chan error) {
	t.Helper()
	r, rt, appPath := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	stdout := &syncBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- r.ContainerLogs(ctx, "default", "web", "app", &corev1.PodLogOptions{Follow: true, TailLines: ptr.To[int64](1)}, stdout, &bytes.Buffer{})
	}()
	waitFor(t, stdout, "last\n")
	return rt, appPath, stdout, done
}

// TestContainerLogsFollowAcrossRotations rotates the followed log twice in a row (renamed
// to <log>.<stamp>, a new live file each time): the follower reads every line once, in
// order, whenever it wakes.
func TestContainerLogsFollowAcrossRotations(t *testing.T) {
	rt, appPath, stdout, done := followFromLast(t)
	for _, stamp := range []string{"20261125-000001", "20261125-000002"} {
		appendLine(t, appPath, "2016-10-06T00:17:20.000000000Z stdout F before "+stamp+"\n")
		if err := os.Rename(appPath, appPath+"."+stamp); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(appPath, []byte("2016-10-06T00:17:21.000000000Z stdout F after "+stamp+"\n"), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	appendLine(t, appPath, "2016-10-06T00:17:22.000000000Z stdout F end\n")
	waitFor(t, stdout, "end\n")
	rt.exited.Store(true)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	want := "last\nbefore 20261125-000001\nafter 20261125-000001\nbefore 20261125-000002\nafter 20261125-000002\nend\n"
	if got := stdout.String(); got != want {
		t.Errorf("followed %q, want %q", got, want)
	}
}

// TestFollowWaitsForTheOldFilesLastEntry: containerd's ReopenContainerLog starts the new
// file's writer before the old one has flushed a line's start, which it writes as a
// partial (P) entry to the old file after the new file's first entry, the line's end.
// The follower reads the old file to its last entry before it goes on: the line comes
// out whole.
func TestFollowWaitsForTheOldFilesLastEntry(t *testing.T) {
	rt, appPath, stdout, done := followFromLast(t)
	old := appPath + ".20261127-000001"
	if err := os.Rename(appPath, old); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(appPath, []byte("2016-10-06T00:17:21.000000000Z stdout F xxx\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	time.Sleep(settleQuiet / 3)
	appendLine(t, old, "2016-10-06T00:17:20.000000000Z stdout P 00128515 xxxxxx\n")
	appendLine(t, appPath, "2016-10-06T00:17:22.000000000Z stdout F end\n")
	waitFor(t, stdout, "end\n")
	rt.exited.Store(true)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got, want := stdout.String(), "last\n00128515 xxxxxxxxx\nend\n"; got != want {
		t.Errorf("followed %q, want %q", got, want)
	}
}

// TestFollowReadsOnIntoACompressedFile: after a rotated file, the next one in time comes
// next, through gzip when it was compressed; after the newest rotated file, the live one.
func TestFollowReadsOnIntoACompressedFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.log")
	write := func(name, content string, compressed bool) {
		f, err := os.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		var w io.Writer = f
		if compressed {
			zw := gzip.NewWriter(f)
			defer zw.Close()
			w = zw
		}
		if _, err := io.WriteString(w, content); err != nil {
			t.Fatal(err)
		}
	}
	write(path+".20261125-000001", "one\n", false)
	write(path+".20261125-000002.gz", "two\n", true)
	write(path+".20261125-000003", "three\n", false)
	write(path, "live\n", false)
	f, err := os.Open(path + ".20261125-000001")
	if err != nil {
		t.Fatal(err)
	}
	cur := &logFile{f: f, r: f, stamp: "20261125-000001"}
	var got []string
	for cur != nil {
		b, err := io.ReadAll(cur.r)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(b))
		next, err := successor(path, cur)
		if err != nil {
			t.Fatal(err)
		}
		if next == nil {
			break
		}
		cur.f.Close()
		cur = next
	}
	cur.f.Close()
	if strings.Join(got, "") != "one\ntwo\nthree\nlive\n" {
		t.Errorf("read %q, want one, two (gzip), three, then the live file", got)
	}
}
