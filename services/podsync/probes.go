package podsync

import (
	"context"

	"k8s.io/apimachinery/pkg/types"

	"github.com/unitlet/unitlet/services/podsync/podworker"
	"github.com/unitlet/unitlet/services/podsync/prober"
)

// containerRestarter is what probe results act on: the pod workers.
type containerRestarter interface {
	RestartContainer(uid types.UID, name, containerID string, reason podworker.KillReason)
	Trigger(uids ...types.UID)
}

// applyProbeResults acts on probe results until ctx ends: a failed liveness or startup probe
// restarts the container; any other result makes the pod's worker sync its status.
func applyProbeResults(ctx context.Context, results <-chan prober.Result, workers containerRestarter) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case r := <-results:
			switch {
			case r.Kind == prober.Liveness && !r.Success:
				workers.RestartContainer(r.PodUID, r.ContainerName, r.ContainerID, podworker.ReasonLivenessProbe)
			case r.Kind == prober.Startup && !r.Success:
				workers.RestartContainer(r.PodUID, r.ContainerName, r.ContainerID, podworker.ReasonStartupProbe)
			default:
				workers.Trigger(r.PodUID)
			}
		}
	}
}
