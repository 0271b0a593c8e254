package podworker

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

// withEphemeral is a copy of pod with the ephemeral container name added (as the
// pods/ephemeralcontainers subresource adds it), targeting target when set.
func withEphemeral(pod *corev1.Pod, name, target string) *corev1.Pod {
	p := pod.DeepCopy()
	p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, corev1.EphemeralContainer{
		EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: name, Image: "busybox:1", Stdin: true, TTY: true},
		TargetContainerName:      target,
	})
	return p
}

func ephemeralStatusOf(o Observed, name string) *corev1.ContainerStatus {
	for i, cs := range o.Status.EphemeralContainerStatuses {
		if cs.Name == name {
			return &o.Status.EphemeralContainerStatuses[i]
		}
	}
	return nil
}

func ephemeralRunning(o Observed, name string) bool {
	cs := ephemeralStatusOf(o, name)
	return cs != nil && cs.State.Running != nil
}

// config is the CRI config the runtime got for the newest instance of the named container.
func (f *memCRI) config(name string) (*runtimeapi.ContainerConfig, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var newest *memContainer
	for _, c := range f.containers {
		if c.cfg.GetMetadata().GetName() == name && (newest == nil || c.created > newest.created) {
			newest = c
		}
	}
	if newest == nil {
		return nil, ""
	}
	return newest.cfg, newest.id
}

// probeLog records which containers were handed to the prober.
type probeLog struct {
	mu  sync.Mutex
	set []string
}

func (p *probeLog) SetContainer(_ *corev1.Pod, _ string, c *corev1.Container, _ string, _ time.Time) {
	p.mu.Lock()
	p.set = append(p.set, c.Name)
	p.mu.Unlock()
}
func (p *probeLog) RemoveContainer(types.UID, string) {}
func (p *probeLog) RemovePod(types.UID)               {}
func (p *probeLog) Ready(types.UID, string) bool      { return true }
func (p *probeLog) Started(types.UID, string) bool    { return true }

func (p *probeLog) has(name string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Contains(p.set, name)
}

func TestEphemeralContainerStartsOnceInTheTargetsPIDNamespace(t *testing.T) {
	cri := newMemCRI("busybox:1")
	h := newHarness(t, cri)
	probes := &probeLog{}
	h.m.o.Probes = probes
	pod := syncPod(corev1.RestartPolicyAlways, nil, "app")
	h.m.Update(pod, "api")
	h.ev.waitFor(t, "app running", func(o Observed) bool { return isRunning(o, "app") })
	_, appID := cri.config("app")

	debug := withEphemeral(pod, "debugger", "app")
	h.m.Update(debug, "api")
	o := h.ev.waitFor(t, "debugger running", func(o Observed) bool { return ephemeralRunning(o, "debugger") })
	cfg, _ := cri.config("debugger")
	ns := cfg.GetLinux().GetSecurityContext().GetNamespaceOptions()
	if ns.GetPid() != runtimeapi.NamespaceMode_TARGET || ns.GetTargetId() != appID {
		t.Errorf("debugger pid namespace %v target %q, want TARGET %s (app's)", ns.GetPid(), ns.GetTargetId(), appID)
	}
	cs := ephemeralStatusOf(o, "debugger")
	if cs.Ready || cs.Started != nil || cs.RestartCount != 0 || cs.Image != "busybox:1" || cs.ContainerID == "" {
		t.Errorf("debugger status %+v, want running, not ready, no started, restartCount 0, with its image and ID", cs)
	}
	if len(o.Status.ContainerStatuses) != 1 || o.Status.Phase != corev1.PodRunning {
		t.Errorf("the pod's own statuses changed: phase %s, %d app statuses", o.Status.Phase, len(o.Status.ContainerStatuses))
	}
	if i := slices.IndexFunc(o.Containers, func(r ContainerRef) bool { return r.Name == "debugger" }); i < 0 || o.Containers[i].ID == "" || o.Containers[i].LogPath == "" || o.Containers[i].Init {
		t.Errorf("container refs %+v, want the debugger with its ID and log", o.Containers)
	}
	if probes.has("debugger") {
		t.Errorf("the debugger was handed to the prober: %v", probes)
	}

	// It exits: the pod's restartPolicy Always does not restart it, now or later.
	cri.exit(t, "debugger", 1)
	h.m.Trigger(pod.UID)
	o = h.ev.waitFor(t, "debugger terminated", func(o Observed) bool {
		cs := ephemeralStatusOf(o, "debugger")
		return cs != nil && cs.State.Terminated != nil
	})
	if cs := ephemeralStatusOf(o, "debugger"); cs.State.Terminated.ExitCode != 1 || cs.RestartCount != 0 || cs.LastTerminationState.Terminated != nil {
		t.Errorf("debugger status %+v, want terminated with 1, no restart", cs)
	}
	for range 3 {
		h.m.Trigger(pod.UID)
		time.Sleep(20 * time.Millisecond)
	}
	if got := cri.callsOf("CreateContainer"); !slices.Equal(got, []string{"app attempt=0", "debugger attempt=0"}) {
		t.Errorf("created %v, want app and the debugger once", got)
	}

	// A second one is added: the first stays as it is.
	h.m.Update(withEphemeral(debug, "debugger2", ""), "api")
	o = h.ev.waitFor(t, "debugger2 running", func(o Observed) bool { return ephemeralRunning(o, "debugger2") })
	if names := []string{o.Status.EphemeralContainerStatuses[0].Name, o.Status.EphemeralContainerStatuses[1].Name}; !slices.Equal(names, []string{"debugger", "debugger2"}) {
		t.Errorf("ephemeral statuses %v, want sorted by name", names)
	}
	if cfg, _ := cri.config("debugger2"); cfg.GetLinux().GetSecurityContext().GetNamespaceOptions().GetPid() != runtimeapi.NamespaceMode_CONTAINER {
		t.Errorf("debugger2 without a target got pid namespace %v, want its own", cfg.GetLinux().GetSecurityContext().GetNamespaceOptions().GetPid())
	}
	if got := len(cri.callsOf("CreateContainer")); got != 3 {
		t.Errorf("%d creates, want 3 (debugger not restarted)", got)
	}
}

func TestEphemeralContainerStoppedWithThePod(t *testing.T) {
	cri := newMemCRI("busybox:1")
	h := newHarness(t, cri)
	pod := syncPod(corev1.RestartPolicyAlways, nil, "app")
	pod.Spec.TerminationGracePeriodSeconds = new(int64)
	*pod.Spec.TerminationGracePeriodSeconds = 5
	h.m.Update(pod, "api")
	h.ev.waitFor(t, "app running", func(o Observed) bool { return isRunning(o, "app") })
	h.m.Update(withEphemeral(pod, "debugger", "app"), "api")
	h.ev.waitFor(t, "debugger running", func(o Observed) bool { return ephemeralRunning(o, "debugger") })

	h.m.Terminate(pod.UID, nil, "", "")
	h.ev.waitFor(t, "removed", func(o Observed) bool { return o.Removed })
	stops := cri.callsOf("StopContainer")
	slices.Sort(stops)
	if want := []string{"app timeout=5", "debugger timeout=5"}; !slices.Equal(stops, want) {
		t.Errorf("stops %v, want %v", stops, want)
	}
}

func TestEphemeralContainerNotStartedInATerminatingPod(t *testing.T) {
	cri := newMemCRI("busybox:1")
	h := newHarness(t, cri)
	pod := syncPod(corev1.RestartPolicyAlways, nil, "app")
	h.m.Update(pod, "api")
	h.ev.waitFor(t, "app running", func(o Observed) bool { return isRunning(o, "app") })
	h.m.Kill(pod.UID, nil, "Evicted", "gone")
	h.ev.waitFor(t, "terminated", func(o Observed) bool { return o.Terminated })
	h.m.Update(withEphemeral(pod, "debugger", ""), "api")
	h.m.Trigger(pod.UID)
	time.Sleep(50 * time.Millisecond)
	if got := cri.callsOf("CreateContainer"); !slices.Equal(got, []string{"app attempt=0"}) {
		t.Errorf("created %v in a terminated pod, want only app", got)
	}
}

func TestEphemeralContainerStartsWhileInitRuns(t *testing.T) {
	cri := newMemCRI("busybox:1")
	h := newHarness(t, cri)
	pod := syncPod(corev1.RestartPolicyAlways, []string{"init"}, "app")
	h.m.Update(pod, "api")
	h.ev.waitFor(t, "init running", func(o Observed) bool { return isRunning(o, "init") })

	// Two debuggers: one targets app, which has never run; the other starts at once.
	debug := withEphemeral(withEphemeral(pod, "debug-app", "app"), "debug-init", "init")
	h.m.Update(debug, "api")
	o := h.ev.waitFor(t, "debug-init running, debug-app refused", func(o Observed) bool {
		cs := ephemeralStatusOf(o, "debug-app")
		return ephemeralRunning(o, "debug-init") && cs != nil && cs.State.Waiting != nil && cs.State.Waiting.Reason == "CreateContainerConfigError"
	})
	if w := ephemeralStatusOf(o, "debug-app").State.Waiting; w.Message != "unable to find target container app" {
		t.Errorf("debug-app waiting message %q, want the kubelet's", w.Message)
	}
	if !h.ev.hasEvent("Failed: Error: unable to find target container app") {
		t.Errorf("no Failed event with the kubelet's message: %v", h.ev.recorded)
	}
	if o.Status.Phase != corev1.PodPending {
		t.Errorf("phase %s, want Pending while init runs", o.Status.Phase)
	}

	// Once app runs, the start is retried (a second later) and finds its target.
	cri.exit(t, "init", 0)
	h.m.Trigger(pod.UID)
	h.ev.waitFor(t, "app running", func(o Observed) bool { return isRunning(o, "app") })
	clk := h.m.o.Clock.(*clocktesting.FakeClock)
	h.ev.waitFor(t, "debug-app running", func(o Observed) bool {
		clk.Step(ephemeralRetry)
		return ephemeralRunning(o, "debug-app")
	})
	if got := cri.callsOf("CreateContainer"); !slices.Equal(got, []string{"init attempt=0", "debug-init attempt=0", "app attempt=0", "debug-app attempt=0"}) {
		t.Errorf("created %v, want init, debug-init, app, debug-app", got)
	}
}

func TestEphemeralContainerWithForbiddenFieldsIsNotStarted(t *testing.T) {
	cri := newMemCRI("busybox:1")
	h := newHarness(t, cri)
	ran := make(chan string, 4)
	h.m.o.Hooks = func(_ context.Context, _ *corev1.Pod, c *corev1.Container, _, _ string, _ *corev1.LifecycleHandler) error {
		ran <- c.Name
		return nil
	}
	pod := syncPod(corev1.RestartPolicyAlways, nil, "app")
	h.m.Update(pod, "api")
	h.ev.waitFor(t, "app running", func(o Observed) bool { return isRunning(o, "app") })
	debug := withEphemeral(pod, "debugger", "")
	debug.Spec.EphemeralContainers[0].Lifecycle = &corev1.Lifecycle{PostStart: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}}
	h.m.Update(debug, "api")
	o := h.ev.waitFor(t, "debugger refused", func(o Observed) bool {
		cs := ephemeralStatusOf(o, "debugger")
		return cs != nil && cs.State.Waiting != nil && cs.State.Waiting.Reason == "CreateContainerConfigError"
	})
	want := "ephemeral container debugger: spec.ephemeralContainers[0].lifecycle: Forbidden: cannot be set for an Ephemeral Container"
	if got := ephemeralStatusOf(o, "debugger").State.Waiting.Message; got != want {
		t.Errorf("waiting message %q, want %q", got, want)
	}
	if got := cri.callsOf("CreateContainer"); !slices.Equal(got, []string{"app attempt=0"}) {
		t.Errorf("created %v, want only app", got)
	}
	select {
	case name := <-ran:
		t.Errorf("a hook ran for %s", name)
	default:
	}
}

func TestEphemeralStatusDefaults(t *testing.T) {
	for _, tc := range []struct {
		name  string
		inits []string
		want  string
	}{
		{"no init containers", nil, "ContainerCreating"},
		{"init containers", []string{"init"}, "PodInitializing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := withEphemeral(testPod(corev1.RestartPolicyAlways, tc.inits, "app"), "debugger", "")
			f := newStatusFixture(pod, nil)
			st := f.w.status(pod, runtimePod(inst("app", 0, cRunning, 0)), state{})
			if len(st.EphemeralContainerStatuses) != 1 {
				t.Fatalf("ephemeral statuses %+v", st.EphemeralContainerStatuses)
			}
			cs := st.EphemeralContainerStatuses[0]
			if cs.State.Waiting == nil || cs.State.Waiting.Reason != tc.want || cs.Started != nil || cs.Ready {
				t.Errorf("status %+v, want waiting %s", cs, tc.want)
			}
		})
	}
	// A start failure shows as Waiting only where the kubelet would retry an app container.
	for _, tc := range []struct {
		policy corev1.RestartPolicy
		exit   int32
		want   string
	}{
		{corev1.RestartPolicyAlways, 128, "waiting"},
		{corev1.RestartPolicyOnFailure, 128, "waiting"},
		{corev1.RestartPolicyNever, 128, "terminated"},
		{corev1.RestartPolicyOnFailure, 0, "terminated"},
	} {
		pod := withEphemeral(testPod(tc.policy, nil, "app"), "debugger", "")
		f := newStatusFixture(pod, nil)
		f.w.setWaiting("debugger", "RunContainerError", "failed to start")
		st := f.w.status(pod, runtimePod(inst("debugger", 0, cExited, tc.exit), inst("app", 0, cRunning, 0)), state{})
		cs := st.EphemeralContainerStatuses[0]
		got := "terminated"
		if cs.State.Waiting != nil {
			got = "waiting"
		}
		if got != tc.want || cs.State.Terminated == nil && cs.LastTerminationState.Terminated == nil {
			t.Errorf("%s exit %d: %+v, want %s", tc.policy, tc.exit, cs.State, tc.want)
		}
	}
}
