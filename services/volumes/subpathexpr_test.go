package volumes

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// A subPathExpr is podsync's to expand: the pod's mounts leave it out, and a container's
// start that sends it unexpanded is refused naming it.
func TestSubPathExprIsLeftToTheContainersStart(t *testing.T) {
	m, _ := newTestManager(t, &fakePayloads{})
	pod := testPod("uid-expr", []corev1.Volume{{Name: "logs", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		[]corev1.VolumeMount{{Name: "logs", MountPath: "/logs", SubPathExpr: "$(POD)"}, {Name: "logs", MountPath: "/all"}})
	cms, err := m.Prepare(context.Background(), pod)
	if err != nil {
		t.Fatal(err)
	}
	if got := mountsOf(t, cms, "main"); got["/logs"] != nil || got["/all"] == nil {
		t.Errorf("the pod's mounts %v, want /all only", got)
	}
	if _, err := m.PrepareContainer(context.Background(), pod, "main"); err == nil || !strings.Contains(err.Error(), `subPathExpr "$(POD)" reached unitlet-volumes unexpanded`) {
		t.Errorf("an unexpanded subPathExpr at the container's start: %v", err)
	}
}
