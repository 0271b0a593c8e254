package nodestatus

import (
	"slices"
	"testing"
)

// The Node declares the features unitlet implements, by the registry's names, and none
// of those it does not.
func TestDeclaredFeatures(t *testing.T) {
	if got, want := DeclaredFeatures(KubeletVersion()), []string{"ExtendWebSocketsToKubelet", "InPlacePodLevelResourcesVerticalScaling", "InPlacePodVerticalScalingInitContainers", "RestartAllContainersOnContainerExits"}; !slices.Equal(got, want) {
		t.Errorf("declared %v, want %v", got, want)
	}
}
