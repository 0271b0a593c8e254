package status

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	podsyncv1 "github.com/unitlet/unitlet/proto/unitlet/podsync/v1"
	"github.com/unitlet/unitlet/services/status/podlogs"
	"github.com/unitlet/unitlet/shared/bus"
	"github.com/unitlet/unitlet/shared/payload"
)

// healthTimeout bounds a health call to another unitlet service: longer than a restart
// under socket activation takes (about 1 s), short enough to report an outage promptly.
const healthTimeout = 3 * time.Second

// podsyncClient adapts unitlet-podsync's bus API to what the node status, the node API and
// the log reader need.
type podsyncClient struct {
	c   podsyncv1.PodSyncServiceClient
	log *slog.Logger
}

var podsResource = schema.GroupResource{Resource: "pods"}

// RuntimeHealth is podsync's view of the runtime; an error means podsync did not answer.
func (p podsyncClient) RuntimeHealth(parent context.Context) (*podsyncv1.RuntimeHealth, error) {
	ctx, cancel := context.WithTimeout(parent, healthTimeout)
	defer cancel()
	// As healthy: a refusal fails at once, a call podsync's socket took waits.
	resp, err := p.c.GetRuntimeHealth(ctx, &podsyncv1.GetRuntimeHealthRequest{}, grpc.WaitForReady(false))
	if err != nil {
		return nil, waitedOrNot(parent, err, fmt.Errorf("unitlet-podsync unreachable: %s", grpcstatus.Convert(err).Message()))
	}
	return resp.GetHealth(), nil
}

func (p podsyncClient) list(ctx context.Context) ([]*podsyncv1.Pod, error) {
	pods, err := listPods(ctx, p.c)
	if err != nil {
		return nil, apierrors.NewServiceUnavailable(fmt.Sprintf("unitlet-podsync unreachable: %s", grpcstatus.Convert(err).Message()))
	}
	return pods, nil
}

// listPods is every pod podsync has, from ListPodsStream's parts (no message grows with
// the node's pods), or from ListPods when podsync predates ListPodsStream. Without a
// deadline in ctx, it waits bus.DefaultTimeout, as a unary call does.
func listPods(ctx context.Context, c podsyncv1.PodSyncServiceClient) ([]*podsyncv1.Pod, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, bus.DefaultTimeout)
		defer cancel()
	}
	stream, err := c.ListPodsStream(ctx, &podsyncv1.ListPodsStreamRequest{})
	var pods []*podsyncv1.Pod
	for err == nil {
		var part *podsyncv1.ListPodsStreamResponse
		if part, err = stream.Recv(); err == nil {
			pods = append(pods, part.GetPods()...)
		}
	}
	switch {
	case errors.Is(err, io.EOF):
		return pods, nil
	case grpcstatus.Code(err) == codes.Unimplemented:
		resp, err := c.ListPods(ctx, &podsyncv1.ListPodsRequest{})
		if err != nil {
			return nil, err
		}
		return resp.GetPods(), nil
	}
	return nil, err
}

// Pods are the node's pods with their observed status, as the kubelet's /pods lists them.
func (p podsyncClient) Pods(ctx context.Context) ([]*corev1.Pod, error) {
	pods, err := p.list(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]*corev1.Pod, 0, len(pods))
	for _, bp := range pods {
		if bp.GetRemoved() {
			continue
		}
		pod, err := decodePod(bp)
		if err != nil {
			p.log.Warn("a pod from unitlet-podsync is left out of /pods", "pod", bp.GetNamespace()+"/"+bp.GetName(), "err", err)
			continue
		}
		out = append(out, pod)
	}
	return out, nil
}

// decodePod rebuilds a v1 Pod from podsync's object and observed status; fields that do not
// decode are left empty (podsync may be newer than this reader). An object or status in a
// schema this reader does not know is an error: nothing of it is decoded.
func decodePod(bp *podsyncv1.Pod) (*corev1.Pod, error) {
	if err := errors.Join(payload.PodsyncPod.Check(bp.GetPodSchema()), payload.PodsyncPodStatus.Check(bp.GetStatusSchema())); err != nil {
		return nil, err
	}
	pod := &corev1.Pod{}
	_ = json.Unmarshal(bp.GetPod(), pod)
	pod.Kind, pod.APIVersion = "Pod", "v1"
	pod.Namespace, pod.Name, pod.UID = bp.GetNamespace(), bp.GetName(), types.UID(bp.GetUid())
	_ = json.Unmarshal(bp.GetStatus(), &pod.Status)
	return pod, nil
}

func (p podsyncClient) find(ctx context.Context, namespace, name string) (*podsyncv1.Pod, error) {
	pods, err := p.list(ctx)
	if err != nil {
		return nil, err
	}
	for _, bp := range pods {
		if bp.GetNamespace() == namespace && bp.GetName() == name && !bp.GetRemoved() {
			return bp, nil
		}
	}
	return nil, apierrors.NewNotFound(podsResource, namespace+"/"+name)
}

// PodUID is the UID of the pod namespace/name on this node.
func (p podsyncClient) PodUID(ctx context.Context, namespace, name string) (types.UID, error) {
	bp, err := p.find(ctx, namespace, name)
	if err != nil {
		return "", err
	}
	return types.UID(bp.GetUid()), nil
}

// StreamingURL asks podsync for the runtime's URL of one exec, attach or port-forward.
func (p podsyncClient) StreamingURL(ctx context.Context, req *podsyncv1.GetStreamingURLRequest) (string, error) {
	resp, err := p.c.GetStreamingURL(ctx, req)
	if err != nil {
		st := grpcstatus.Convert(err)
		switch st.Code() {
		case codes.NotFound:
			return "", apierrors.NewNotFound(podsResource, req.GetPodUid())
		case codes.InvalidArgument, codes.FailedPrecondition:
			return "", apierrors.NewBadRequest(st.Message())
		}
		return "", apierrors.NewServiceUnavailable(fmt.Sprintf("unitlet-podsync: %s", st.Message()))
	}
	return resp.GetUrl(), nil
}

// Container tells where a container's current log is.
func (p podsyncClient) Container(ctx context.Context, namespace, pod, container string) (podlogs.ContainerLog, error) {
	bp, err := p.find(ctx, namespace, pod)
	if err != nil {
		return podlogs.ContainerLog{}, err
	}
	if err := payload.PodsyncPodStatus.Check(bp.GetStatusSchema()); err != nil {
		return podlogs.ContainerLog{}, apierrors.NewServiceUnavailable(fmt.Sprintf("the status of pod %s/%s from unitlet-podsync: %v", namespace, pod, err))
	}
	var st corev1.PodStatus
	_ = json.Unmarshal(bp.GetStatus(), &st)
	for _, c := range bp.GetContainers() {
		if c.GetName() != container {
			continue
		}
		if c.GetLogPath() == "" {
			return podlogs.ContainerLog{}, apierrors.NewBadRequest(fmt.Sprintf("container %q in pod %q is waiting to start", container, pod))
		}
		out := podlogs.ContainerLog{PodUID: bp.GetUid(), ContainerID: c.GetId(), Path: c.GetLogPath()}
		for _, cs := range slices.Concat(st.InitContainerStatuses, st.ContainerStatuses, st.EphemeralContainerStatuses) {
			if cs.Name == container {
				out.RestartCount = int(cs.RestartCount)
			}
		}
		return out, nil
	}
	return podlogs.ContainerLog{}, apierrors.NewBadRequest(fmt.Sprintf("container %s is not valid for pod %s", container, pod))
}
