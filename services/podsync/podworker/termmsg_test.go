package podworker

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func writeLog(t *testing.T, lines ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "0.log")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "")), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func criLine(stream, tag, msg string) string {
	return "2026-01-01T00:00:00.000000000Z " + stream + " " + tag + " " + msg + "\n"
}

func TestLogTailAsTheKubelet(t *testing.T) {
	var hundred []string
	for i := range 100 {
		hundred = append(hundred, criLine("stdout", "F", fmt.Sprintf("line %d", i)))
	}
	var long []string
	for i := range 80 {
		long = append(long, criLine("stderr", "F", fmt.Sprintf("%02d%s", i, strings.Repeat("x", 97))))
	}
	missing := filepath.Join(t.TempDir(), "none.log")
	for _, tc := range []struct {
		name string
		path string
		want func(string) error
	}{
		{
			name: "the last 80 lines of 100",
			path: writeLog(t, hundred...),
			want: func(got string) error {
				if n := strings.Count(got, "\n"); n != 80 || !strings.HasPrefix(got, "line 20\n") || !strings.HasSuffix(got, "line 99\n") {
					return fmt.Errorf("%d lines from %q, want lines 20..99", n, got[:min(len(got), 10)])
				}
				return nil
			},
		},
		{
			name: "the last 2048 bytes of 80 lines of 100",
			path: writeLog(t, long...),
			want: func(got string) error {
				if len(got) != 2048 || !strings.HasSuffix(got, "79"+strings.Repeat("x", 97)+"\n") {
					return fmt.Errorf("%d bytes ending %q, want the last 2048", len(got), got[max(0, len(got)-20):])
				}
				return nil
			},
		},
		{
			name: "both streams, partial lines joined, a malformed line skipped",
			path: writeLog(t, criLine("stdout", "F", "out"), "not a log line\n", criLine("stderr", "P", "par"), criLine("stderr", "F", "tial")),
			want: exactly("out\npartial\n"),
		},
		{
			name: "a partial last line keeps no newline",
			path: writeLog(t, criLine("stdout", "F", "a"), criLine("stdout", "P", "b")),
			want: exactly("a\nb"),
		},
		{
			name: "no log: the kubelet's error text",
			path: missing,
			want: func(got string) error {
				if !strings.HasPrefix(got, "Error on reading termination message from logs: failed to try resolving symlinks in path \""+missing+"\"") {
					return fmt.Errorf("%q", got)
				}
				return nil
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.want(logTail(tc.path)); err != nil {
				t.Error(err)
			}
		})
	}
}

func exactly(want string) func(string) error {
	return func(got string) error {
		if got != want {
			return fmt.Errorf("got %q, want %q", got, want)
		}
		return nil
	}
}

func TestTerminationMessageAsTheKubelet(t *testing.T) {
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	custom := file("custom", "custom message")
	empty := file("empty", "")
	big := file("big", "head"+strings.Repeat("x", 5000)+"tail")
	log := writeLog(t, criLine("stdout", "F", "starting"), criLine("stderr", "F", "panic: boom"))
	for _, tc := range []struct {
		name    string
		policy  corev1.TerminationMessagePolicy
		file    string
		exit    int32
		reason  string
		runtime string
		want    string
	}{
		{name: "the file follows the runtime's message", policy: corev1.TerminationMessageReadFile, file: custom, exit: 1, runtime: "OOM", want: "OOM: custom message"},
		{name: "the last 4 KiB of a long file", policy: corev1.TerminationMessageReadFile, file: big, exit: 1, want: strings.Repeat("x", 4092) + "tail"},
		{name: "fallback with an empty file", policy: corev1.TerminationMessageFallbackToLogsOnError, file: empty, exit: 2, want: "starting\npanic: boom\n"},
		{name: "fallback with no file", policy: corev1.TerminationMessageFallbackToLogsOnError, file: filepath.Join(dir, "gone"), exit: 2, want: "starting\npanic: boom\n"},
		{name: "fallback, but the container never ran", policy: corev1.TerminationMessageFallbackToLogsOnError, exit: 128, reason: "ContainerCannotRun", runtime: "exec failed", want: "exec failed"},
		{name: "fallback, but it succeeded", policy: corev1.TerminationMessageFallbackToLogsOnError, file: empty, exit: 0, want: ""},
		{name: "an unreadable file: the kubelet's error text", policy: corev1.TerminationMessageFallbackToLogsOnError, file: dir, exit: 1, want: "Error on reading termination log " + dir + ": read " + dir + ": is a directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &corev1.Container{Name: "app", TerminationMessagePolicy: tc.policy}
			in := inst("app", 0, cExited, tc.exit)
			in.TerminationMessageHostPath, in.LogPath, in.Reason, in.Message = tc.file, log, tc.reason, tc.runtime
			if got := terminationMessage(c, in); got != tc.want {
				t.Errorf("message %q, want %q", got, tc.want)
			}
		})
	}
}

func TestTerminationMessagesShareThePodBudget(t *testing.T) {
	long := strings.Repeat("m", 5000)
	for _, tc := range []struct {
		inits, apps, ephemeral int
		want                   int
	}{
		{apps: 1, want: 5000},
		{apps: 3, want: 4096},
		{inits: 1, apps: 2, ephemeral: 1, want: 3072},
	} {
		pod := &corev1.Pod{}
		st := &corev1.PodStatus{}
		term := func() corev1.ContainerStatus {
			return corev1.ContainerStatus{
				State:                corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Message: long}},
				LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Message: long}},
			}
		}
		for range tc.inits {
			pod.Spec.InitContainers = append(pod.Spec.InitContainers, corev1.Container{})
			st.InitContainerStatuses = append(st.InitContainerStatuses, term())
		}
		for range tc.apps {
			pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{})
			st.ContainerStatuses = append(st.ContainerStatuses, term())
		}
		for range tc.ephemeral {
			pod.Spec.EphemeralContainers = append(pod.Spec.EphemeralContainers, corev1.EphemeralContainer{})
			st.EphemeralContainerStatuses = append(st.EphemeralContainerStatuses, term())
		}
		limitTerminationMessages(pod, st)
		for _, list := range [][]corev1.ContainerStatus{st.InitContainerStatuses, st.ContainerStatuses, st.EphemeralContainerStatuses} {
			for _, cs := range list {
				if n, m := len(cs.State.Terminated.Message), len(cs.LastTerminationState.Terminated.Message); n != tc.want || m != tc.want {
					t.Errorf("%d+%d+%d containers: messages of %d and %d bytes, want %d", tc.inits, tc.apps, tc.ephemeral, n, m, tc.want)
				}
			}
		}
	}
}
