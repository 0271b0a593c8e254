package podsync

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	podsyncv1 "github.com/unitlet/unitlet/proto/unitlet/podsync/v1"
	"github.com/unitlet/unitlet/services/podsync/relist"
	"github.com/unitlet/unitlet/shared/cri"
)

// errNotRunning: the container or sandbox to stream to is not running.
var errNotRunning = errors.New("not running")

// streamer gets streaming URLs from the runtime for the pods' running containers.
type streamer struct {
	rt   *cri.Client
	view *relist.Relister
}

// StreamingURL asks the runtime for an exec, attach or port-forward URL.
func (s *streamer) StreamingURL(ctx context.Context, req *podsyncv1.GetStreamingURLRequest) (string, error) {
	rp, err := s.view.Inspect(ctx, types.UID(req.GetPodUid()))
	if err != nil {
		return "", err
	}
	if rp == nil {
		return "", fmt.Errorf("pod %s: %w", req.GetPodUid(), errUnknownPod)
	}
	if req.GetKind() == podsyncv1.StreamKind_STREAM_KIND_PORT_FORWARD {
		sb := rp.ReadySandbox()
		if sb == nil {
			return "", fmt.Errorf("pod %s/%s: sandbox %w", rp.Namespace, rp.Name, errNotRunning)
		}
		resp, err := s.rt.PortForward(ctx, &runtimeapi.PortForwardRequest{PodSandboxId: sb.ID, Port: req.GetPorts()})
		if err != nil {
			return "", fmt.Errorf("port-forward to pod %s/%s: %w", rp.Namespace, rp.Name, err)
		}
		return resp.Url, nil
	}
	c := rp.Latest(req.GetContainer())
	if c == nil || !c.Running() {
		return "", fmt.Errorf("container %s of pod %s/%s: %w", req.GetContainer(), rp.Namespace, rp.Name, errNotRunning)
	}
	switch req.GetKind() {
	case podsyncv1.StreamKind_STREAM_KIND_EXEC:
		resp, err := s.rt.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: c.ID, Cmd: req.GetCommand(), Tty: req.GetTty(), Stdin: req.GetStdin(), Stdout: req.GetStdout(), Stderr: req.GetStderr()})
		if err != nil {
			return "", fmt.Errorf("exec in %s of pod %s/%s: %w", c.Name, rp.Namespace, rp.Name, err)
		}
		return resp.Url, nil
	case podsyncv1.StreamKind_STREAM_KIND_ATTACH:
		resp, err := s.rt.Attach(ctx, &runtimeapi.AttachRequest{ContainerId: c.ID, Tty: req.GetTty(), Stdin: req.GetStdin(), Stdout: req.GetStdout(), Stderr: req.GetStderr()})
		if err != nil {
			return "", fmt.Errorf("attach to %s of pod %s/%s: %w", c.Name, rp.Namespace, rp.Name, err)
		}
		return resp.Url, nil
	}
	return "", fmt.Errorf("kind %v: %w", req.GetKind(), errBadRequest)
}

var errBadRequest = errors.New("want exec, attach or port-forward")
