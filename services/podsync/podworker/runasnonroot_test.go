package podworker

import (
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestRunAsNonRootChecksTheImageUser: with runAsNonRoot and no runAsUser, only an image
// whose user is a non-zero uid runs; the others wait in CreateContainerConfigError with
// the kubelet's message and a Failed event, and are never created.
func TestRunAsNonRootChecksTheImageUser(t *testing.T) {
	cri := newMemCRI("root:1", "nouser:1", "named:1", "uid:1")
	cri.imageUsers = map[string]*runtimeapi.Image{
		"root:1":  {Uid: &runtimeapi.Int64Value{Value: 0}},
		"named:1": {Username: "app"},
		"uid:1":   {Uid: &runtimeapi.Int64Value{Value: 1000}},
	}
	h := newHarness(t, cri)
	pod := syncPod(corev1.RestartPolicyAlways, nil, "root", "nouser", "named", "uid")
	nonRoot := true
	pod.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsNonRoot: &nonRoot}
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		c.Image = c.Name + ":1"
	}
	h.m.Update(pod, "api")
	where := fmt.Sprintf("(pod: %q, container: ", pod.Name+"_"+pod.Namespace+"("+string(pod.UID)+")")
	want := map[string]string{
		"root":   "container has runAsNonRoot and image will run as root " + where + "root)",
		"nouser": "container has runAsNonRoot and image will run as root " + where + "nouser)",
		"named":  "container has runAsNonRoot and image has non-numeric user (app), cannot verify user is non-root " + where + "named)",
	}
	o := h.ev.waitFor(t, "refused containers waiting, uid:1 running", func(o Observed) bool {
		for name := range want {
			if w := statusOf(o, name).State.Waiting; w == nil || w.Reason != "CreateContainerConfigError" {
				return false
			}
		}
		return isRunning(o, "uid")
	})
	for name, msg := range want {
		if got := statusOf(o, name).State.Waiting.Message; got != msg {
			t.Errorf("%s: waiting message %q, want %q", name, got, msg)
		}
		if !h.ev.hasEvent("Failed: Error: " + msg) {
			t.Errorf("%s: no Failed event with the message", name)
		}
	}
	if got := cri.callsOf("CreateContainer"); !slices.Equal(got, []string{"uid attempt=0"}) {
		t.Errorf("created %v, want only the container whose image runs as uid 1000", got)
	}
}
