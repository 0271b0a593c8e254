package nodestatus

import (
	"slices"

	"k8s.io/apimachinery/pkg/util/version"
	ndf "k8s.io/component-helpers/nodedeclaredfeatures"
)

// implementedFeatures are the node-declared features (the v1.36 registry of
// k8s.io/component-helpers/nodedeclaredfeatures) that unitlet implements:
//
//   - ExtendWebSocketsToKubelet: the node API serves exec, attach and port-forward over
//     WebSockets (v5.channel.k8s.io and port-forward tunnelling), so the API server
//     proxies those streams to it rather than translating them to SPDY itself.
//   - RestartAllContainersOnContainerExits: podsync restarts a pod's every container in
//     place when one exits with a restart rule's RestartAllContainers action.
//   - InPlacePodLevelResourcesVerticalScaling, InPlacePodVerticalScalingInitContainers:
//     podsync resizes pod-level resources and non-sidecar init containers in place.
//
// Not declared, so the API server and scheduler keep what needs them away:
// UserNamespacesHostNetwork (podsync does not give a host-network pod a user namespace).
var implementedFeatures = []string{"ExtendWebSocketsToKubelet", "RestartAllContainersOnContainerExits",
	"InPlacePodLevelResourcesVerticalScaling", "InPlacePodVerticalScalingInitContainers"}

// implemented is the feature-gate view the registry discovers features through: a
// feature's gate is on only when unitlet implements the feature (any other gate holds its
// default, or unitlet-config refuses it).
type implemented struct{}

func (implemented) Enabled(key string) bool { return slices.Contains(implementedFeatures, key) }

// DeclaredFeatures is the Node's status.declaredFeatures, as the kubelet discovers them,
// for a node of kubelet version v.
func DeclaredFeatures(v string) []string {
	cfg := &ndf.NodeConfiguration{FeatureGates: implemented{}}
	if parsed, err := version.ParseSemantic(v); err == nil {
		cfg.Version = parsed
	}
	return ndf.DefaultFramework.DiscoverNodeFeatures(cfg)
}
