package podsync

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"

	"google.golang.org/grpc"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/unitlet/unitlet/services/podsync/criconfig"
)

// reclaimRuntime is what disk reclaim needs of the CRI runtime.
type reclaimRuntime interface {
	ListContainers(ctx context.Context, in *runtimeapi.ListContainersRequest, opts ...grpc.CallOption) (*runtimeapi.ListContainersResponse, error)
	ListPodSandbox(ctx context.Context, in *runtimeapi.ListPodSandboxRequest, opts ...grpc.CallOption) (*runtimeapi.ListPodSandboxResponse, error)
	ContainerStatus(ctx context.Context, in *runtimeapi.ContainerStatusRequest, opts ...grpc.CallOption) (*runtimeapi.ContainerStatusResponse, error)
	StopContainer(ctx context.Context, in *runtimeapi.StopContainerRequest, opts ...grpc.CallOption) (*runtimeapi.StopContainerResponse, error)
	RemoveContainer(ctx context.Context, in *runtimeapi.RemoveContainerRequest, opts ...grpc.CallOption) (*runtimeapi.RemoveContainerResponse, error)
	StopPodSandbox(ctx context.Context, in *runtimeapi.StopPodSandboxRequest, opts ...grpc.CallOption) (*runtimeapi.StopPodSandboxResponse, error)
	RemovePodSandbox(ctx context.Context, in *runtimeapi.RemovePodSandboxRequest, opts ...grpc.CallOption) (*runtimeapi.RemovePodSandboxResponse, error)
}

// containerLogs removes a container's log files and link (containerlogs.Manager).
type containerLogs interface {
	Removing(ctx context.Context, id string) error
}

// unusedImages removes the images no container uses (imagegc.Manager).
type unusedImages interface {
	RemoveUnused(ctx context.Context) (removed int, freed uint64, err error)
}

// podStates tells which pods podsync still runs (the Service).
type podStates interface {
	// RuntimeRemovable returns, as of the call, whether all that is dead of a pod in the
	// runtime may go; when it says no, the pod's newest dead instances are kept.
	RuntimeRemovable() func(uid types.UID) bool
}

// Reclaimed is what a disk reclaim removed.
type Reclaimed struct {
	Containers, Sandboxes, Images int
	// ImageBytes are the removed images' sizes as the runtime reported them.
	ImageBytes uint64
}

// diskReclaimer frees disk as the kubelet's eviction manager does before it evicts pods
// for disk pressure: container garbage collection that spares no pod that has ended
// (DeleteAllUnusedContainers), then, for the image filesystem, every unused image
// (DeleteUnusedImages). Nothing that runs is touched: running containers, ready sandboxes
// and a running pod's newest dead instance of each container (its last state) stay.
type diskReclaimer struct {
	rt     reclaimRuntime
	pods   podStates
	images unusedImages // nil: no image removal
	// logs removes a container's log files and link before the container goes.
	logs containerLogs
	log  *slog.Logger
	mu   sync.Mutex // one reclaim at a time
}

// Reclaim removes the dead containers and sandboxes, and with images every unused image
// after them (images that only dead containers used are unused then). A step that cannot
// list what the runtime has is an error; the other steps still run. A container, sandbox
// or image that cannot be removed is logged and skipped, as the kubelet does.
func (r *diskReclaimer) Reclaim(ctx context.Context, images bool) (Reclaimed, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out Reclaimed
	var errs []error
	n, err := r.removeDeadContainers(ctx)
	out.Containers = n
	errs = append(errs, err)
	n, err = r.removeDeadSandboxes(ctx)
	out.Sandboxes = n
	errs = append(errs, err)
	if images && r.images != nil {
		out.Images, out.ImageBytes, err = r.images.RemoveUnused(ctx)
		errs = append(errs, err)
	}
	r.log.Info("reclaimed disk", "containers", out.Containers, "sandboxes", out.Sandboxes, "images", out.Images, "imageBytes", out.ImageBytes)
	return out, errors.Join(errs...)
}

// deadUnit is a container of a pod: its dead instances are counted together.
type deadUnit struct {
	uid  types.UID
	name string
}

// removeDeadContainers removes the dead containers of pods whose runtime may go, and of
// the other pods every exited instance of a container but the newest. For a pod that
// still runs only exited instances count: a created one may be a start in flight.
func (r *diskReclaimer) removeDeadContainers(ctx context.Context) (int, error) {
	list, err := r.rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		return 0, fmt.Errorf("list containers: %w", err)
	}
	// Asked after the list: a pod's state can only move on from what the list shows.
	removable := r.pods.RuntimeRemovable()
	dead := map[deadUnit][]*runtimeapi.Container{}
	for _, c := range list.GetContainers() {
		uid := types.UID(c.GetLabels()[criconfig.LabelPodUID])
		if uid == "" || c.GetState() == runtimeapi.ContainerState_CONTAINER_RUNNING {
			continue // not a pod's, or running
		}
		if !removable(uid) && c.GetState() != runtimeapi.ContainerState_CONTAINER_EXITED {
			continue
		}
		name := c.GetLabels()[criconfig.LabelContainerName]
		if name == "" {
			name = c.GetMetadata().GetName()
		}
		u := deadUnit{uid, name}
		dead[u] = append(dead[u], c)
	}
	removed := 0
	for u, cs := range dead {
		keep := 1
		if removable(u.uid) {
			keep = 0
		}
		// Newest first: the highest attempt (each instance is one more than the newest
		// before; creation times are readings of a wall clock that may have stepped back).
		sort.Slice(cs, func(i, j int) bool { return newerContainer(cs[i], cs[j]) })
		for _, c := range cs[min(keep, len(cs)):] {
			if r.removeContainer(ctx, c) {
				removed++
			}
		}
	}
	return removed, nil
}

// removeContainer removes a dead container and, first, its log files and link (the
// runtime leaves them): a container in an unknown state is stopped first.
func (r *diskReclaimer) removeContainer(ctx context.Context, c *runtimeapi.Container) bool {
	log := r.log.With("container", c.GetId(), "name", c.GetMetadata().GetName(), "pod", c.GetLabels()[criconfig.LabelPodNamespace]+"/"+c.GetLabels()[criconfig.LabelPodName])
	if c.GetState() == runtimeapi.ContainerState_CONTAINER_UNKNOWN {
		if _, err := r.rt.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: c.GetId()}); err != nil {
			log.Warn("stop a container in an unknown state before its removal", "err", err)
			return false
		}
	}
	if err := r.logs.Removing(ctx, c.GetId()); err != nil {
		log.Warn("remove a dead container's logs", "err", err)
		return false
	}
	if _, err := r.rt.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: c.GetId()}); err != nil {
		log.Warn("remove a dead container", "err", err)
		return false
	}
	log.Debug("removed a dead container")
	return true
}

// removeDeadSandboxes removes the sandboxes that are not ready and hold no container: of
// a pod whose runtime may go all of them, of another pod all but its newest sandbox.
func (r *diskReclaimer) removeDeadSandboxes(ctx context.Context) (int, error) {
	sbs, err := r.rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return 0, fmt.Errorf("list pod sandboxes: %w", err)
	}
	ctrs, err := r.rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		return 0, fmt.Errorf("list containers: %w", err)
	}
	removable := r.pods.RuntimeRemovable()
	inUse := map[string]bool{}
	for _, c := range ctrs.GetContainers() {
		inUse[c.GetPodSandboxId()] = true
	}
	byPod := map[types.UID][]*runtimeapi.PodSandbox{}
	for _, sb := range sbs.GetItems() {
		uid := types.UID(sb.GetLabels()[criconfig.LabelPodUID])
		if uid == "" {
			uid = types.UID(sb.GetMetadata().GetUid())
		}
		if uid == "" {
			continue
		}
		byPod[uid] = append(byPod[uid], sb)
	}
	removed := 0
	for uid, list := range byPod {
		keep := 1
		if removable(uid) {
			keep = 0
		}
		sort.Slice(list, func(i, j int) bool { return newerSandbox(list[i], list[j]) })
		for _, sb := range list[min(keep, len(list)):] {
			if sb.GetState() == runtimeapi.PodSandboxState_SANDBOX_READY || inUse[sb.GetId()] {
				continue
			}
			log := r.log.With("sandbox", sb.GetId(), "pod", sb.GetMetadata().GetNamespace()+"/"+sb.GetMetadata().GetName())
			// Stopped first, in case it was not (its network torn down), as the kubelet does.
			if _, err := r.rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb.GetId()}); err != nil {
				log.Warn("stop a dead sandbox before its removal", "err", err)
				continue
			}
			if _, err := r.rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb.GetId()}); err != nil {
				log.Warn("remove a dead sandbox", "err", err)
				continue
			}
			log.Debug("removed a dead sandbox")
			removed++
		}
	}
	return removed, nil
}

// newerContainer reports whether a is a newer instance than b of the same container: the
// higher attempt, or the later creation for the same attempt.
func newerContainer(a, b *runtimeapi.Container) bool {
	if x, y := a.GetMetadata().GetAttempt(), b.GetMetadata().GetAttempt(); x != y {
		return x > y
	}
	return a.GetCreatedAt() > b.GetCreatedAt()
}

// newerSandbox reports whether a is a newer sandbox than b of the same pod, as
// newerContainer.
func newerSandbox(a, b *runtimeapi.PodSandbox) bool {
	if x, y := a.GetMetadata().GetAttempt(), b.GetMetadata().GetAttempt(); x != y {
		return x > y
	}
	return a.GetCreatedAt() > b.GetCreatedAt()
}
