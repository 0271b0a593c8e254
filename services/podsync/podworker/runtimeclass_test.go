package podworker

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
)

// classMap is RuntimeClasses from a map of class name to handler.
type classMap map[string]string

func (c classMap) Handler(name string) (string, error) {
	h, ok := c[name]
	if !ok {
		return "", apierrors.NewNotFound(nodev1.Resource("runtimeclass"), name)
	}
	return h, nil
}

func TestSandboxRunsOnTheRuntimeClassHandler(t *testing.T) {
	cri := newMemCRI("busybox:1")
	h := newHarnessOpts(t, cri, func(o *Options) { o.RuntimeClasses = classMap{"gvisor": "runsc"} })
	pod := syncPod(corev1.RestartPolicyAlways, nil, "app")
	pod.Spec.RuntimeClassName = ptr.To("gvisor")
	h.m.Update(pod, "api")
	h.ev.waitFor(t, "app running", func(o Observed) bool { return isRunning(o, "app") })
	if got := cri.callsOf("RunPodSandbox"); !slices.Equal(got, []string{"web attempt=0 handler=runsc"}) {
		t.Errorf("sandboxes run: %v, want one on handler runsc", got)
	}
}

func TestSandboxOfMissingRuntimeClassFails(t *testing.T) {
	for _, tc := range []struct {
		name    string
		classes RuntimeClasses
		event   string
	}{
		{"class not found", classMap{}, `FailedCreatePodSandBox: Failed to create pod sandbox: runtimeclass.node.k8s.io "gvisor" not found`},
		{"no API server", nil, `FailedCreatePodSandBox: Failed to create pod sandbox: spec.runtimeClassName "gvisor" of pod default/web cannot be resolved: the node has no API server to read RuntimeClasses from`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cri := newMemCRI("busybox:1")
			h := newHarnessOpts(t, cri, func(o *Options) { o.RuntimeClasses = tc.classes })
			pod := syncPod(corev1.RestartPolicyAlways, nil, "app")
			pod.Spec.RuntimeClassName = ptr.To("gvisor")
			h.m.Update(pod, "api")
			deadline := time.Now().Add(10 * time.Second)
			for !h.ev.hasEvent(tc.event) {
				if time.Now().After(deadline) {
					t.Fatalf("no event %q; events: %v", tc.event, h.ev.recorded)
				}
				time.Sleep(5 * time.Millisecond)
			}
			o := h.ev.waitFor(t, "app waiting", func(o Observed) bool { return statusOf(o, "app").State.Waiting != nil })
			if w := statusOf(o, "app").State.Waiting; o.Status.Phase != corev1.PodPending || w.Reason != "ContainerCreating" {
				t.Errorf("status phase %s, app waiting %+v; want Pending, ContainerCreating", o.Status.Phase, w)
			}
			if got := cri.callsOf("RunPodSandbox"); len(got) != 0 {
				t.Errorf("sandboxes run: %v, want none", got)
			}
		})
	}
}
