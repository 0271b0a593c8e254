package podsync

import (
	"io"
	"log/slog"
	"testing"

	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
)

// Container events are followed unless the EventedPLEG feature gate is set false.
func TestFollowContainerEventsFollowsTheGate(t *testing.T) {
	for _, tc := range []struct {
		gates  map[string]bool
		follow bool
	}{
		{nil, true},
		{map[string]bool{gateEventedPLEG: true}, true},
		{map[string]bool{gateEventedPLEG: false}, false},
		{map[string]bool{"HostnameOverride": false}, true},
	} {
		kc := &kubeletv1beta1.KubeletConfiguration{FeatureGates: tc.gates}
		if got := followsContainerEvents(kc); got != tc.follow {
			t.Errorf("featureGates %v: follows events %v, want %v", tc.gates, got, tc.follow)
		}
	}
}

// With the gate off, the loop follows nothing (no relister, no runtime) and ends with ctx.
func TestContainerEventsLoopWaitsWhenNotFollowed(t *testing.T) {
	kc := &kubeletv1beta1.KubeletConfiguration{FeatureGates: map[string]bool{gateEventedPLEG: false}}
	loop := followContainerEvents(kc, nil, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	endsWithCtx(t, loop)
}
