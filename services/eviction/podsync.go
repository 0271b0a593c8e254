package eviction

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"

	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	podsyncv1 "github.com/unitlet/unitlet/proto/unitlet/podsync/v1"
	"github.com/unitlet/unitlet/shared/bus"
	"github.com/unitlet/unitlet/shared/payload"
)

// busPodSync is unitlet-podsync over the bus.
type busPodSync struct {
	conn   *grpc.ClientConn
	client podsyncv1.PodSyncServiceClient
	log    *slog.Logger
}

func dialPodSync(socketDir string, log *slog.Logger) (*busPodSync, error) {
	conn, err := bus.Dial(socketDir, "podsync")
	if err != nil {
		return nil, err
	}
	return &busPodSync{conn: conn, client: podsyncv1.NewPodSyncServiceClient(conn), log: log}, nil
}

// Close closes the connection.
func (p *busPodSync) Close() error { return p.conn.Close() }

// ActivePods are the pods podsync runs and is not stopping: the candidates for eviction.
func (p *busPodSync) ActivePods(ctx context.Context) ([]ActivePod, error) {
	pods, err := bus.ListPods(ctx, p.client)
	if err != nil {
		return nil, err
	}
	return activePods(pods, p.log)
}

// activePods are the candidates for eviction among podsync's pods. A pod in a schema this
// build does not know (a newer podsync's) is no candidate; a status in one is left out.
// Both are logged.
func activePods(pods []*podsyncv1.Pod, log *slog.Logger) ([]ActivePod, error) {
	out := make([]ActivePod, 0, len(pods))
	for _, bp := range pods {
		if bp.GetTerminating() || bp.GetTerminated() || bp.GetRemoved() || len(bp.GetPod()) == 0 {
			continue
		}
		name := bp.GetNamespace() + "/" + bp.GetName()
		if err := payload.PodsyncPod.Check(bp.GetPodSchema()); err != nil {
			log.Warn("a pod from unitlet-podsync is in an unknown schema; it is no candidate for eviction", "pod", name, "err", err)
			continue
		}
		pod := &corev1.Pod{}
		if err := json.Unmarshal(bp.GetPod(), pod); err != nil {
			return nil, fmt.Errorf("pod %s from unitlet-podsync: %w", name, err)
		}
		if err := payload.PodsyncPodStatus.Check(bp.GetStatusSchema()); err != nil {
			log.Warn("a pod's status from unitlet-podsync is in an unknown schema; the pod is judged by its spec", "pod", name, "err", err)
		} else if len(bp.GetStatus()) > 0 {
			// Best effort: the status tells the QoS class and the phase when the spec
			// alone does not; a status that does not decode leaves the spec's view.
			_ = json.Unmarshal(bp.GetStatus(), &pod.Status)
		}
		if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		out = append(out, ActivePod{Pod: pod, Static: bp.GetSource() != "" && bp.GetSource() != "api"})
	}
	return out, nil
}

// Gone reports whether podsync has stopped the pod for good or forgotten it.
func (p *busPodSync) Gone(ctx context.Context, uid types.UID) (bool, error) {
	pods, err := bus.ListPods(ctx, p.client)
	if err != nil {
		return false, err
	}
	for _, bp := range pods {
		if types.UID(bp.GetUid()) == uid {
			return bp.GetTerminated() || bp.GetRemoved(), nil
		}
	}
	return true, nil
}

// Kill asks podsync to stop the pod and mark it Failed with reason and message.
func (p *busPodSync) Kill(ctx context.Context, uid types.UID, reason, message string, grace int64) error {
	_, err := p.client.KillPod(ctx, &podsyncv1.KillPodRequest{Uid: string(uid), Reason: reason, Message: message, GracePeriodSeconds: &grace})
	return err
}

// ReclaimDisk asks podsync to remove dead containers, and with images unused images.
func (p *busPodSync) ReclaimDisk(ctx context.Context, images bool) (Reclaimed, error) {
	r, err := p.client.ReclaimDisk(ctx, &podsyncv1.ReclaimDiskRequest{Images: images})
	if err != nil {
		return Reclaimed{}, err
	}
	return Reclaimed{Containers: int(r.GetContainersRemoved()), Sandboxes: int(r.GetSandboxesRemoved()), Images: int(r.GetImagesRemoved()), ImageBytes: r.GetImageBytesFreed()}, nil
}
