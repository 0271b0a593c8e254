// Package lifecycle runs a container's lifecycle handlers (postStart and preStop hooks:
// exec, httpGet, sleep) and holds the pieces httpGet probes share with them: request
// building, port resolution, the HTTP client and the dialer.
package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
)

// Execer runs a command in a container through CRI ExecSync (the consumer's interface;
// podsync passes its CRI client). timeout 0 means no timeout. A non-zero exit is reported
// in exitCode with a nil err; err is for the call itself failing. A command that ran out
// of time is an error for which errors.Is(err, context.DeadlineExceeded) holds or whose
// gRPC code is DeadlineExceeded.
type Execer interface {
	ExecSync(ctx context.Context, containerID string, cmd []string, timeout time.Duration) (stdout, stderr []byte, exitCode int32, err error)
}

// RunHook runs a postStart/preStop handler (exec, httpGet, sleep) for container c of pod,
// whose IP is podIP. It returns nil when the handler succeeded, else an error whose
// message names the hook, the container and the pod and carries the handler's output.
//
// As the kubelet: an exec hook fails on a non-zero exit; an httpGet hook fails only when
// no HTTP response came back (any status code counts as delivered), and an https hook
// answered in plain http is retried once in http; a sleep hook fails when ctx ends first.
func RunHook(ctx context.Context, ex Execer, pod *corev1.Pod, c *corev1.Container, containerID, podIP string, h *corev1.LifecycleHandler) error {
	switch {
	case h == nil:
		return fmt.Errorf("lifecycle hook for container %q in pod %s: no handler", c.Name, podName(pod))
	case h.Exec != nil:
		out, err := ExecOutput(ctx, ex, containerID, h.Exec.Command, 0)
		if err != nil {
			return fmt.Errorf("exec lifecycle hook (%v) for container %q in pod %s failed - error: %w, message: %q",
				h.Exec.Command, c.Name, podName(pod), err, string(out))
		}
		return nil
	case h.HTTPGet != nil:
		if err := runHTTPHook(ctx, c, podIP, h.HTTPGet); err != nil {
			return fmt.Errorf("http lifecycle hook (%s) for container %q in pod %s failed - error: %w",
				h.HTTPGet.Path, c.Name, podName(pod), err)
		}
		return nil
	case h.Sleep != nil:
		if err := sleep(ctx, time.Duration(h.Sleep.Seconds)*time.Second); err != nil {
			return fmt.Errorf("sleep lifecycle hook (%d) for container %q in pod %s failed - error: %w",
				h.Sleep.Seconds, c.Name, podName(pod), err)
		}
		return nil
	default:
		return fmt.Errorf("lifecycle hook for container %q in pod %s: handler has no exec, httpGet or sleep action", c.Name, podName(pod))
	}
}

// ExitError is a command that ran in a container and exited non-zero.
type ExitError struct {
	Cmd    []string
	Code   int32
	Stderr []byte
}

func (e *ExitError) Error() string {
	return fmt.Sprintf("command '%s' exited with %d: %s", strings.Join(e.Cmd, " "), e.Code, e.Stderr)
}

// ErrTimedOut marks a command that did not finish within its timeout.
var ErrTimedOut = errors.New("timed out")

// ExecOutput runs cmd in the container and returns its stdout followed by its stderr,
// at most MaxBodyBytes of it. A non-zero exit is an *ExitError; running out of time is
// an error wrapping ErrTimedOut; any other error is the runtime's.
func ExecOutput(ctx context.Context, ex Execer, containerID string, cmd []string, timeout time.Duration) ([]byte, error) {
	stdout, stderr, code, err := ex.ExecSync(ctx, containerID, cmd, timeout)
	out := append(stdout[:len(stdout):len(stdout)], stderr...)
	if len(out) > MaxBodyBytes {
		out = out[:MaxBodyBytes]
	}
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) || status.Code(err) == codes.DeadlineExceeded {
			return out, fmt.Errorf("command %q %w after %s: %w", strings.Join(cmd, " "), ErrTimedOut, timeout, err)
		}
		return out, fmt.Errorf("exec %q in container %s: %w", strings.Join(cmd, " "), containerID, err)
	}
	if code != 0 {
		return out, &ExitError{Cmd: cmd, Code: code, Stderr: stderr}
	}
	return out, nil
}

func runHTTPHook(ctx context.Context, c *corev1.Container, podIP string, h *corev1.HTTPGetAction) error {
	req, err := NewHTTPGetRequest(ctx, h, c, podIP, UserAgent("lifecycle"))
	if err != nil {
		return err
	}
	client := NewHTTPClient(0)
	resp, err := client.Do(req)
	drain(resp)
	if err != nil && isHTTPAnswerToHTTPS(err) {
		plain := req.Clone(ctx)
		plain.URL.Scheme = "http"
		plain.Header.Del("Authorization")
		resp, perr := client.Do(plain)
		drain(resp)
		if perr == nil {
			return nil
		}
	}
	return err
}

func drain(resp *http.Response) {
	if resp == nil {
		return
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, MaxBodyBytes))
	_ = resp.Body.Close()
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return fmt.Errorf("container terminated before sleep hook finished: %w", ctx.Err())
	case <-t.C:
		return nil
	}
}

// podName is how messages name a pod: namespace/name.
func podName(pod *corev1.Pod) string {
	return pod.Namespace + "/" + pod.Name
}
