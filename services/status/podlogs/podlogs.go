// Package podlogs reads the logs of a pod's containers from the files the container runtime
// writes (the CRI log format), for the node API's /containerLogs: the current instance or,
// with previous, the one before the last restart; follow stops when the container exits.
package podlogs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-client/pkg/logs"
)

// Pods tells where a pod's container logs are.
type Pods interface {
	// Container returns the log path and runtime container ID of the current instance of a
	// container of the pod namespace/name, and the pod's log directory and the container's
	// restart count; apierrors NotFound when unknown.
	Container(ctx context.Context, namespace, pod, container string) (ContainerLog, error)
}

// ContainerLog locates the log of the current instance of one container.
type ContainerLog struct {
	PodUID      string
	ContainerID string
	// Path is the CRI log path of the current instance,
	// e.g. <podLogsDir>/<ns>_<name>_<uid>/<ctr>/<restartCount>.log.
	Path         string
	RestartCount int
}

// Runtime is the part of the CRI runtime service the log reader needs: whether a followed
// container still runs. shared/cri.Client satisfies it.
type Runtime interface {
	ContainerStatus(ctx context.Context, in *runtimeapi.ContainerStatusRequest, opts ...grpc.CallOption) (*runtimeapi.ContainerStatusResponse, error)
}

// Reader serves container logs.
type Reader struct {
	pods Pods
	rt   Runtime
	now  func() time.Time
}

// New returns a Reader that finds logs through pods and asks rt whether followed containers
// still run.
func New(pods Pods, rt Runtime) *Reader {
	return &Reader{pods: pods, rt: rt, now: time.Now}
}

// ContainerLogs writes the log of a container of the pod namespace/name to stdout and stderr
// (each line to the stream it was written to) as opts asks. Bad options and a missing
// previous instance are BadRequest errors; an unknown pod or container is NotFound (from Pods).
// With opts.Follow it returns when the container stops running or ctx ends. The runtime's log
// reader logs through klog.FromContext(ctx).
func (r *Reader) ContainerLogs(ctx context.Context, namespace, pod, container string, opts *corev1.PodLogOptions, stdout, stderr io.Writer) error {
	if opts == nil {
		opts = &corev1.PodLogOptions{}
	}
	if err := validate(opts); err != nil {
		return err
	}
	stdout, stderr = selectStreams(opts.Stream, stdout, stderr)

	cl, err := r.pods.Container(ctx, namespace, pod, container)
	if err != nil {
		return err
	}
	path, follow := cl.Path, opts.Follow
	if opts.Previous {
		path, err = previousPath(cl)
		if err != nil {
			return apierrors.NewBadRequest(fmt.Sprintf("previous terminated container %q in pod %q not found", container, pod))
		}
		// The previous instance has exited: there is nothing to follow.
		follow = false
	} else if cl.ContainerID == "" || cl.Path == "" {
		return apierrors.NewBadRequest(fmt.Sprintf("container %q in pod %q is waiting to start - no logs yet", container, pod))
	}

	// A zero-byte write before reading, as the kubelet does: the caller's writer sees a first
	// write even when a followed log has nothing yet.
	if stdout != nil {
		if _, err := stdout.Write(nil); err != nil {
			return err
		}
	}
	lo := logOptions(opts, r.now())
	lo.Follow = follow
	read := func() error {
		return logs.ReadLogs(ctx, path, cl.ContainerID, lo, statusOnly{rt: r.rt}, stdout, stderr)
	}
	if follow {
		// Across rotations, without losing lines (follow.go).
		read = func() error { return followLog(ctx, path, cl.ContainerID, lo, r.rt, stdout, stderr) }
	}
	if err := read(); err != nil {
		return fmt.Errorf("read logs of container %q in pod %s/%s: %w", container, namespace, pod, err)
	}
	return nil
}

// validate rejects the options the API server would reject.
func validate(o *corev1.PodLogOptions) error {
	switch {
	case o.TailLines != nil && *o.TailLines < 0:
		return apierrors.NewBadRequest("tailLines: must be greater than or equal to 0")
	case o.LimitBytes != nil && *o.LimitBytes < 1:
		return apierrors.NewBadRequest("limitBytes: must be greater than 0")
	case o.SinceSeconds != nil && o.SinceTime != nil:
		return apierrors.NewBadRequest("at most one of sinceTime or sinceSeconds may be specified")
	case o.SinceSeconds != nil && *o.SinceSeconds < 1:
		return apierrors.NewBadRequest("sinceSeconds: must be greater than 0")
	}
	if o.Stream != nil {
		switch *o.Stream {
		case corev1.LogStreamAll:
		case corev1.LogStreamStdout, corev1.LogStreamStderr:
			if o.TailLines != nil {
				return apierrors.NewBadRequest(fmt.Sprintf("tailLines: must not be specified when stream is %q", *o.Stream))
			}
		default:
			return apierrors.NewBadRequest(fmt.Sprintf("stream: unsupported value %q: want %q, %q or %q", *o.Stream, corev1.LogStreamAll, corev1.LogStreamStdout, corev1.LogStreamStderr))
		}
	}
	return nil
}

// selectStreams drops the writer of the stream not asked for; the log reader neither writes
// nor counts lines of a nil stream.
func selectStreams(stream *string, stdout, stderr io.Writer) (io.Writer, io.Writer) {
	if stream == nil {
		return stdout, stderr
	}
	switch *stream {
	case corev1.LogStreamStdout:
		return stdout, nil
	case corev1.LogStreamStderr:
		return nil, stderr
	}
	return stdout, stderr
}

// logOptions converts the API's options to the log reader's: since is the later of
// sinceSeconds before now and sinceTime.
func logOptions(o *corev1.PodLogOptions, now time.Time) *logs.LogOptions {
	lo := &logs.LogOptions{
		TailLines:  o.TailLines,
		LimitBytes: o.LimitBytes,
		Follow:     o.Follow,
		Timestamp:  o.Timestamps,
	}
	if o.SinceSeconds != nil {
		lo.Since = now.Add(-time.Duration(*o.SinceSeconds) * time.Second)
	}
	if o.SinceTime != nil && o.SinceTime.After(lo.Since) {
		lo.Since = o.SinceTime.Time
	}
	return lo
}

// previousPath is the log of the instance before the current one: the runtime names each
// instance's log by its restart count in the container's log directory.
func previousPath(cl ContainerLog) (string, error) {
	if cl.RestartCount < 1 || cl.Path == "" {
		return "", fs.ErrNotExist
	}
	p := filepath.Join(filepath.Dir(cl.Path), strconv.Itoa(cl.RestartCount-1)+".log")
	if _, err := os.Stat(p); err != nil {
		return "", err
	}
	return p, nil
}

// statusOnly offers a Runtime as the CRI runtime service the log reader takes. The reader
// only asks for a container's status while following; any other call is a programming error
// and panics on the nil embedded interface.
type statusOnly struct {
	internalapi.RuntimeService
	rt Runtime
}

func (s statusOnly) ContainerStatus(ctx context.Context, id string, verbose bool) (*runtimeapi.ContainerStatusResponse, error) {
	if s.rt == nil {
		return nil, errors.New("no container runtime to ask whether the container runs")
	}
	return s.rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id, Verbose: verbose})
}
