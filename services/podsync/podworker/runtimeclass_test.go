package podworker

import (
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	clocktesting "k8s.io/utils/clock/testing"
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

// mutableClasses is RuntimeClasses whose classes a test changes.
type mutableClasses struct {
	mu      sync.Mutex
	classes classMap
}

func (m *mutableClasses) Handler(name string) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.classes.Handler(name)
}

func TestSandboxRetriedWhenTheRuntimeClassAppears(t *testing.T) {
	cri := newMemCRI("busybox:1")
	classes := &mutableClasses{classes: classMap{}}
	clk := clocktesting.NewFakeClock(time.Now())
	h := newHarnessOpts(t, cri, func(o *Options) { o.RuntimeClasses, o.Clock = classes, clk })
	pod := syncPod(corev1.RestartPolicyAlways, nil, "app")
	pod.Spec.RuntimeClassName = ptr.To("gvisor")
	h.m.Update(pod, "api")
	for !h.ev.hasEvent("FailedCreatePodSandBox: ") {
		time.Sleep(5 * time.Millisecond)
	}
	classes.mu.Lock()
	classes.classes["gvisor"] = "runsc"
	classes.mu.Unlock()
	// No other trigger: only the sandbox retry, 10 s on, runs it.
	deadline := time.Now().Add(10 * time.Second)
	for len(cri.callsOf("RunPodSandbox")) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the sandbox was not retried 10 s after it failed")
		}
		clk.Step(time.Second)
		time.Sleep(10 * time.Millisecond)
	}
	if got := cri.callsOf("RunPodSandbox"); !slices.Equal(got, []string{"web attempt=0 handler=runsc"}) {
		t.Errorf("sandboxes run: %v, want one on handler runsc", got)
	}
}
