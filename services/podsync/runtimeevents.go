package podsync

import (
	"context"
	"log/slog"

	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/unitlet/unitlet/services/podsync/relist"
)

// gateEventedPLEG is the kubelet's feature gate for following the runtime's container
// events (alpha, off in the kubelet). unitlet follows them unless the gate is set false:
// its workers read a pod afresh before they act, so an event is only a prompt to look,
// and the relist stays as the safety net.
const gateEventedPLEG = "EventedPLEG"

// followsContainerEvents reports whether the configuration has the runtime's container
// events followed: unless the EventedPLEG gate is set false.
func followsContainerEvents(kc *kubeletv1beta1.KubeletConfiguration) bool {
	on, set := kc.FeatureGates[gateEventedPLEG]
	return on || !set
}

// followContainerEvents is the loop that follows the runtime's container events; when the
// configuration turns them off, it only waits for ctx to end.
func followContainerEvents(kc *kubeletv1beta1.KubeletConfiguration, rt relist.EventSource, relister *relist.Relister, log *slog.Logger) func(context.Context) error {
	if !followsContainerEvents(kc) {
		log.Info("container events are not followed (feature gate " + gateEventedPLEG + " off): relisting every second")
		return untilDone
	}
	return func(ctx context.Context) error { return relister.FollowEvents(ctx, rt) }
}
