package podworker

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/cri-client/pkg/logs"
	"k8s.io/klog/v2"
	"k8s.io/utils/buffer"

	"github.com/unitlet/unitlet/services/podsync/relist"
)

// The kubelet's termination message limits (pkg/kubelet/container/runtime.go): the tail of
// the message file kept per container, the tail of the log that stands in for it, and the
// budget of one pod's status, shared equally by all its containers.
const (
	maxTerminationMessage     = 4 << 10
	maxTerminationLogBytes    = 2 << 10
	maxTerminationLogLines    = 80
	maxPodTerminationMessages = 12 << 10
)

// cannotRunReason is the runtime's reason for a container that never started: it has no log
// to fall back to.
const cannotRunReason = "ContainerCannotRun"

// terminationMessage is a finished instance's message as the kubelet's
// convertToKubeContainerStatus makes it: the runtime's message, then ": " and what the
// container left in its termination message file, or, with FallbackToLogsOnError after a
// failure and no file content, the tail of its log.
func terminationMessage(c *corev1.Container, inst *relist.Container) string {
	fallback := c.TerminationMessagePolicy == corev1.TerminationMessageFallbackToLogsOnError &&
		inst.ExitCode != 0 && inst.Reason != cannotRunReason
	msg, useLog := messageFile(inst.TerminationMessageHostPath, fallback)
	if useLog {
		msg = logTail(inst.LogPath)
	}
	switch {
	case msg == "":
		return inst.Message
	case inst.Message == "":
		return msg
	}
	return inst.Message + ": " + msg
}

// messageFile reads the last maxTerminationMessage bytes of the host file behind the
// container's terminationMessagePath, and says whether the log should be read instead: no
// file, or an empty one, under the fallback policy. A file that cannot be read gives the
// kubelet's error text as the message.
func messageFile(path string, fallback bool) (string, bool) {
	if path == "" {
		return "", fallback
	}
	b, err := readTail(path, maxTerminationMessage)
	switch {
	case os.IsNotExist(err):
		return "", fallback
	case err != nil:
		return fmt.Sprintf("Error on reading termination log %s: %v", path, err), false
	}
	return string(b), fallback && len(b) == 0
}

// readTail reads at most n bytes from the end of the file.
func readTail(path string, n int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.Size() < n {
		n = fi.Size()
	}
	if n == 0 {
		return nil, nil
	}
	if _, err := f.Seek(-n, io.SeekEnd); err != nil {
		return nil, err
	}
	return io.ReadAll(f)
}

// logTail is the last maxTerminationLogLines entries of a CRI log, both streams, cut to
// their last maxTerminationLogBytes: full lines keep their newline, partial ones none. It
// reads the log with the same reader the kubelet uses, so the cut is the kubelet's.
func logTail(path string) string {
	lines := int64(maxTerminationLogLines)
	ring, _ := buffer.NewTypedRingFixed[byte](maxTerminationLogBytes)
	// The log reader reports malformed lines through klog; they are skipped, as the
	// kubelet skips them, and not worth a log line here.
	ctx := klog.NewContext(context.Background(), logr.Discard())
	if err := logs.ReadLogs(ctx, path, "", &logs.LogOptions{TailLines: &lines}, nil, ring, ring); err != nil {
		return fmt.Sprintf("Error on reading termination message from logs: %v", err)
	}
	return string(ring.Slice())
}

// limitTerminationMessages cuts every termination message in the status to the pod's
// budget divided equally among its containers (init, app and ephemeral), keeping the
// start of each, as the kubelet's status manager does before it sends a status.
func limitTerminationMessages(pod *corev1.Pod, st *corev1.PodStatus) {
	per := maxPodTerminationMessages
	if n := len(pod.Spec.InitContainers) + len(pod.Spec.Containers) + len(pod.Spec.EphemeralContainers); n > 0 {
		per /= n
	}
	cut := func(t *corev1.ContainerStateTerminated) {
		if t != nil && len(t.Message) > per {
			t.Message = t.Message[:per]
		}
	}
	for _, list := range [][]corev1.ContainerStatus{st.InitContainerStatuses, st.ContainerStatuses, st.EphemeralContainerStatuses} {
		for i := range list {
			cut(list[i].State.Terminated)
			cut(list[i].LastTerminationState.Terminated)
		}
	}
}
