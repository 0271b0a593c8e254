package nodestatus

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"

	podsyncv1 "github.com/unitlet/unitlet/proto/unitlet/podsync/v1"
)

// registered returns a harness whose node is registered and Ready, events drained.
func registered(t *testing.T, edit func(*Options)) *harness {
	t.Helper()
	h := newHarness(t, edit)
	node, err := h.c.tryRegister(context.Background())
	if err != nil {
		t.Fatalf("tryRegister: %v", err)
	}
	h.c.setRegistered(node, nil)
	if err := h.c.syncNodeStatus(context.Background()); err != nil {
		t.Fatalf("first sync: %v", err)
	}
	h.events()
	return h
}

func (h *harness) tick(t *testing.T, d time.Duration) {
	t.Helper()
	h.clock.Step(d)
	if err := h.c.syncNodeStatus(context.Background()); err != nil {
		t.Fatalf("syncNodeStatus: %v", err)
	}
}

func TestReadyReasons(t *testing.T) {
	tests := []struct {
		name     string
		health   *podsyncv1.RuntimeHealth
		services error
		want     []string
	}{{
		name:   "runtime did not answer",
		health: &podsyncv1.RuntimeHealth{RelistHealthy: true, Message: "container runtime is down: rpc error: code = Unavailable"},
		want:   []string{"container runtime is down: rpc error: code = Unavailable"},
	}, {
		name:   "runtime not ready without a message",
		health: &podsyncv1.RuntimeHealth{NetworkReady: true, RelistHealthy: true},
		want:   []string{"container runtime is down"},
	}, {
		name:   "network not ready",
		health: &podsyncv1.RuntimeHealth{RuntimeReady: true, RelistHealthy: true, Message: "container runtime network not ready: NetworkPluginNotReady: cni plugin not initialized"},
		want:   []string{"container runtime network not ready: NetworkPluginNotReady: cni plugin not initialized"},
	}, {
		name:   "relist unhealthy with its error",
		health: &podsyncv1.RuntimeHealth{RuntimeReady: true, NetworkReady: true, Message: "relist took 4m0s"},
		want:   []string{"PLEG is not healthy: relist took 4m0s"},
	}, {
		name: "relist unhealthy without a message",
		health: &podsyncv1.RuntimeHealth{RuntimeReady: true, NetworkReady: true,
			LastRelistTime: timestamppb.New(t0.Add(20*time.Second - 4*time.Minute))}, // the test ticks 20 s
		want: []string{"PLEG is not healthy: pleg was last seen active 4m0s ago; threshold is 3m0s"},
	}, {
		name:     "a unitlet service unreachable",
		health:   healthy(),
		services: errors.New("unitlet-config unreachable: connection refused"),
		want:     []string{"unitlet-config unreachable: connection refused"},
	}, {
		name:   "node shutting down",
		health: &podsyncv1.RuntimeHealth{RuntimeReady: true, NetworkReady: true, RelistHealthy: true, NodeShuttingDown: true},
		want:   []string{"node is shutting down"},
	}, {
		name:   "network not ready and node shutting down, the kubelet's order",
		health: &podsyncv1.RuntimeHealth{RuntimeReady: true, RelistHealthy: true, NodeShuttingDown: true},
		want:   []string{"[container runtime network not ready, node is shutting down]"},
	}, {
		name:     "runtime and service together",
		health:   &podsyncv1.RuntimeHealth{RuntimeReady: true, RelistHealthy: true},
		services: errors.New("unitlet-config unreachable: connection refused"),
		want:     []string{"container runtime network not ready", "unitlet-config unreachable"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := registered(t, nil)
			h.runtime.set(tt.health, nil)
			h.setServices(tt.services)
			// Service failures count from the second check on.
			h.tick(t, 10*time.Second)
			h.tick(t, 10*time.Second)
			ready := condition(t, h.node(t), corev1.NodeReady)
			if ready.Status != corev1.ConditionFalse || ready.Reason != "KubeletNotReady" {
				t.Fatalf("Ready = %+v, want False KubeletNotReady", ready)
			}
			for _, w := range tt.want {
				if !strings.Contains(ready.Message, w) {
					t.Errorf("Ready message %q lacks %q", ready.Message, w)
				}
			}
			containsAll(t, h.events(), "Normal NodeNotReady Node node-a status is now: NodeNotReady")
			if got := h.c.Status().GetConditions(); len(got) != 4 || got[3].GetType() != "Ready" || got[3].GetStatus() != "False" {
				t.Errorf("Status().Conditions = %v", got)
			}
		})
	}
}

func TestPodsyncUnreachableCountsFromTheSecondCheck(t *testing.T) {
	h := registered(t, nil)
	before := condition(t, h.node(t), corev1.NodeReady)

	h.runtime.set(nil, errDown)
	h.tick(t, 10*time.Second)
	ready := condition(t, h.node(t), corev1.NodeReady)
	if ready.Status != corev1.ConditionTrue {
		t.Fatalf("Ready = %+v after one failed check, want it kept True", ready)
	}
	if !ready.LastTransitionTime.Equal(&before.LastTransitionTime) {
		t.Error("Ready's transition time moved without a transition")
	}

	// podsync is back before the second check: nothing happened.
	h.runtime.set(healthy(), nil)
	h.tick(t, 10*time.Second)
	h.runtime.set(nil, errDown)
	h.tick(t, 10*time.Second)
	if ready := condition(t, h.node(t), corev1.NodeReady); ready.Status != corev1.ConditionTrue {
		t.Fatalf("Ready = %+v after a failure, a success and a failure", ready)
	}
	if ev := h.events(); len(ev) != 0 {
		t.Errorf("events %q during a podsync restart", ev)
	}

	h.tick(t, 10*time.Second)
	ready = condition(t, h.node(t), corev1.NodeReady)
	if ready.Status != corev1.ConditionFalse || !strings.HasPrefix(ready.Message, "unitlet-podsync unreachable: dial unix") {
		t.Fatalf("Ready = %+v after two failed checks, want unitlet-podsync unreachable", ready)
	}
	if !ready.LastTransitionTime.Time.Equal(h.clock.Now()) {
		t.Errorf("transition time = %v, want now %v", ready.LastTransitionTime, h.clock.Now())
	}
	containsAll(t, h.events(), "NodeNotReady")

	h.runtime.set(healthy(), nil)
	h.tick(t, 10*time.Second)
	if ready := condition(t, h.node(t), corev1.NodeReady); ready.Status != corev1.ConditionTrue || ready.Message != messageReady {
		t.Fatalf("Ready = %+v after podsync came back", ready)
	}
	containsAll(t, h.events(), "Normal NodeReady Node node-a status is now: NodeReady")
}

func TestPodsyncUnreachableAtStartIsReported(t *testing.T) {
	// No Ready condition to keep: the first failure is said at once.
	h := newHarness(t, nil)
	h.runtime.set(nil, errDown)
	if _, err := h.c.tryRegister(context.Background()); err != nil {
		t.Fatal(err)
	}
	ready := condition(t, h.node(t), corev1.NodeReady)
	if ready.Status != corev1.ConditionFalse || !strings.Contains(ready.Message, "unitlet-podsync unreachable") {
		t.Errorf("Ready = %+v", ready)
	}
}

func TestAServiceRestartingBehindItsSocketIsReportedAfterTheWatchdogGrace(t *testing.T) {
	h := registered(t, nil)
	waiting := NoAnswerYet(errors.New("unitlet-eviction does not answer GetInfo: context deadline exceeded"))
	if !errors.Is(waiting, ErrNoAnswerYet) || waiting.Error() != "unitlet-eviction does not answer GetInfo: context deadline exceeded" {
		t.Fatalf("NoAnswerYet = %q (Is ErrNoAnswerYet: %t)", waiting, errors.Is(waiting, ErrNoAnswerYet))
	}

	// Calls queued on the socket for 20 s (a restart on a slow machine): Ready is kept.
	h.setServices(waiting)
	for range 3 {
		h.tick(t, 10*time.Second)
		if ready := condition(t, h.node(t), corev1.NodeReady); ready.Status != corev1.ConditionTrue {
			t.Fatalf("Ready = %+v while a service's calls waited on its socket", ready)
		}
	}
	// 30 s of waiting: the service is stuck.
	h.tick(t, 10*time.Second)
	if ready := condition(t, h.node(t), corev1.NodeReady); ready.Status != corev1.ConditionFalse || ready.Message != waiting.Error() {
		t.Fatalf("Ready = %+v after 30 s of unanswered calls, want the service named", ready)
	}
	h.setServices(nil)
	h.tick(t, 10*time.Second)
	if ready := condition(t, h.node(t), corev1.NodeReady); ready.Status != corev1.ConditionTrue {
		t.Fatalf("Ready = %+v after the service answered again", ready)
	}

	// Waiting does not excuse refusals: a refused check, a wait, a refused check is two
	// failed checks.
	refused := errors.New("unitlet-eviction unreachable: connection refused")
	for i, err := range []error{refused, waiting, refused} {
		h.setServices(err)
		h.tick(t, 5*time.Second)
		ready := condition(t, h.node(t), corev1.NodeReady)
		if want := i == 2; (ready.Status == corev1.ConditionFalse) != want {
			t.Fatalf("check %d (%v): Ready = %+v, want False only after the second refusal", i, err, ready)
		}
	}
}

func TestPatchOnlyOnChangeOrReportFrequency(t *testing.T) {
	h := registered(t, nil)
	patches := h.statusPatches()
	firstHeartbeat := condition(t, h.node(t), corev1.NodeReady).LastHeartbeatTime

	h.tick(t, 10*time.Second)
	h.tick(t, 10*time.Second)
	if got := h.statusPatches(); got != patches {
		t.Fatalf("status patches = %d after two unchanged syncs, want %d", got, patches)
	}
	if hb := condition(t, h.node(t), corev1.NodeReady).LastHeartbeatTime; !hb.Equal(&firstHeartbeat) {
		t.Errorf("heartbeat written without a write: %v", hb)
	}

	// A change is written at once.
	h.runtime.set(&podsyncv1.RuntimeHealth{RuntimeReady: true, NetworkReady: true, RelistHealthy: true, RuntimeName: "containerd", RuntimeVersion: "1.7.25"}, nil)
	h.tick(t, 10*time.Second)
	if got := h.statusPatches(); got != patches+1 {
		t.Fatalf("status patches = %d after a runtime upgrade, want %d", got, patches+1)
	}
	n := h.node(t)
	if v := n.Status.NodeInfo.ContainerRuntimeVersion; v != "containerd://1.7.25" {
		t.Errorf("containerRuntimeVersion = %q", v)
	}
	ready := condition(t, n, corev1.NodeReady)
	if !ready.LastHeartbeatTime.Time.Equal(h.clock.Now()) {
		t.Errorf("heartbeat = %v, want the write's time %v", ready.LastHeartbeatTime, h.clock.Now())
	}
	if !ready.LastTransitionTime.Time.Equal(t0) {
		t.Errorf("transition time = %v, want unchanged %v", ready.LastTransitionTime, t0)
	}

	// Nothing changes: written again once nodeStatusReportFrequency passed.
	for range 29 {
		h.tick(t, 10*time.Second)
	}
	if got := h.statusPatches(); got != patches+1 {
		t.Fatalf("status patches = %d before the report period, want %d", got, patches+1)
	}
	h.tick(t, 10*time.Second)
	if got := h.statusPatches(); got != patches+2 {
		t.Fatalf("status patches = %d after the report period, want %d", got, patches+2)
	}
	if got := counter(t, h.registry, "unitlet_status_node_status_updates_total", "result", "success"); got < 3 {
		t.Errorf("successful status updates = %v, want at least 3", got)
	}
	if got := counter(t, h.registry, "kubelet_node_name", "node", testNode); got != 1 {
		t.Errorf("kubelet_node_name = %v, want 1", got)
	}
}

func TestNodeControllerUnknownIsOverwritten(t *testing.T) {
	h := registered(t, nil)
	n := h.node(t)
	for i := range n.Status.Conditions {
		n.Status.Conditions[i].Status = corev1.ConditionUnknown
		n.Status.Conditions[i].Reason = "NodeStatusUnknown"
	}
	if _, err := h.client.CoreV1().Nodes().UpdateStatus(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.events()
	h.tick(t, 10*time.Second)
	if ready := condition(t, h.node(t), corev1.NodeReady); ready.Status != corev1.ConditionTrue {
		t.Errorf("Ready = %+v, want True again at the next sync", ready)
	}
	containsAll(t, h.events(), "NodeReady", "NodeHasSufficientMemory")
}

func TestStatusWriteRetriesThenWaits(t *testing.T) {
	h := registered(t, nil)
	failures := 0
	h.client.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		failures++
		return true, nil, errors.New("http2: client connection lost")
	})
	closes := 0
	h.c.onHeartbeatFailure = func() { closes++ }
	h.runtime.set(&podsyncv1.RuntimeHealth{RuntimeReady: true, NetworkReady: true, RelistHealthy: true, RuntimeName: "containerd", RuntimeVersion: "2.0"}, nil)
	h.clock.Step(10 * time.Second)
	err := h.c.syncNodeStatus(context.Background())
	if err == nil {
		t.Fatal("syncNodeStatus succeeded with every patch failing")
	}
	if failures != 5 {
		t.Errorf("patch tries = %d, want 5", failures)
	}
	if closes != 4 {
		t.Errorf("heartbeat connections closed %d times, want 4 (after each failed retry)", closes)
	}
	if got := counter(t, h.registry, "unitlet_status_node_status_updates_total", "result", "error"); got != 5 {
		t.Errorf("failed status updates = %v, want 5", got)
	}
	if h.runtime.calls != 2 {
		t.Errorf("podsync asked %d times, want once per sync (2)", h.runtime.calls)
	}
}

func TestPressureConditions(t *testing.T) {
	t.Run("no eviction service", func(t *testing.T) {
		h := registered(t, nil)
		for _, k := range pressureKinds {
			c := condition(t, h.node(t), k.Type)
			if c.Status != corev1.ConditionFalse || c.Reason != k.OKReason || c.Message != messageUnmonitored {
				t.Errorf("%s = %+v, want False %s %q", k.Type, c, k.OKReason, messageUnmonitored)
			}
		}
	})
	t.Run("eviction service reports memory pressure", func(t *testing.T) {
		p := &fakePressure{}
		h := registered(t, func(o *Options) { o.Pressure = p })
		if c := condition(t, h.node(t), corev1.NodeMemoryPressure); c.Message != messageUnmonitored {
			t.Errorf("MemoryPressure with an empty answer = %+v", c)
		}
		p.conds = []corev1.NodeCondition{
			{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionTrue},
			{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse},
			{Type: corev1.NodePIDPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientPID", Message: "kubelet has sufficient PID available"},
		}
		h.tick(t, 10*time.Second)
		n := h.node(t)
		mem := condition(t, n, corev1.NodeMemoryPressure)
		if mem.Status != corev1.ConditionTrue || mem.Reason != "KubeletHasInsufficientMemory" || !mem.LastTransitionTime.Time.Equal(h.clock.Now()) {
			t.Errorf("MemoryPressure = %+v", mem)
		}
		if disk := condition(t, n, corev1.NodeDiskPressure); disk.Message != "kubelet has no disk pressure" || !disk.LastTransitionTime.Time.Equal(t0) {
			t.Errorf("DiskPressure = %+v, want the kubelet's message and no transition", disk)
		}
		ev := h.events()
		containsAll(t, ev, "Normal NodeHasInsufficientMemory Node node-a status is now: NodeHasInsufficientMemory")
		if len(ev) != 1 {
			t.Errorf("events = %q, want only the memory transition", ev)
		}

		p.err = errors.New("unitlet-eviction unreachable")
		h.tick(t, 10*time.Second)
		if c := condition(t, h.node(t), corev1.NodeMemoryPressure); c.Status != corev1.ConditionFalse || c.Message != messageUnmonitored {
			t.Errorf("MemoryPressure while eviction fails = %+v", c)
		}
		containsAll(t, h.events(), "NodeHasSufficientMemory")
	})
}

func TestImagesLimit(t *testing.T) {
	limit := int32(1)
	h := registered(t, func(o *Options) {
		o.Config = &kubeletconfigv1beta1.KubeletConfiguration{}
		o.Config.NodeStatusMaxImages = &limit
	})
	if imgs := h.node(t).Status.Images; len(imgs) != 1 || imgs[0].SizeBytes != 1000 {
		t.Errorf("images = %+v, want the biggest only", imgs)
	}
}

// The runtime's version in nodeInfo is the kubelet's reading of CRI Version's: containerd
// 2.x reports its tag, Debian's package a revision suffix.
func TestRuntimeVersionAsTheKubeletWritesIt(t *testing.T) {
	checkMapping(t, "runtimeVersion", runtimeVersion, map[string]string{
		"v2.4.2":             "2.4.2",
		"1.6.20~ds1":         "1.6.20",
		"1.7.25":             "1.7.25",
		"2.1.0-rc.1+unknown": "2.1.0-rc.1+unknown",
		"":                   "Unknown",
		"main":               "Unknown",
	})
}

// The Node's volumesInUse is unitlet-volumes' list; when unitlet-volumes cannot tell, the
// Node's list stays as it was (dropping a volume would let the attach/detach controller
// detach it under a mount).
func TestVolumesInUseFromUnitletVolumes(t *testing.T) {
	var list []corev1.UniqueVolumeName
	var listErr error
	h := registered(t, func(o *Options) {
		o.VolumesInUse = func(context.Context) ([]corev1.UniqueVolumeName, error) { return list, listErr }
	})
	list = []corev1.UniqueVolumeName{"kubernetes.io/csi/a^1", "kubernetes.io/csi/b^2"}
	h.tick(t, time.Second)
	if got := h.node(t).Status.VolumesInUse; !slices.Equal(got, list) {
		t.Fatalf("volumesInUse = %v, want %v", got, list)
	}
	list, listErr = nil, errors.New("unitlet-volumes: unavailable")
	h.tick(t, time.Second)
	if got := h.node(t).Status.VolumesInUse; len(got) != 2 {
		t.Errorf("volumesInUse while unitlet-volumes cannot tell = %v, want it kept", got)
	}
	listErr = nil
	h.tick(t, time.Second)
	if got := h.node(t).Status.VolumesInUse; len(got) != 0 {
		t.Errorf("volumesInUse after the volumes went = %v, want none", got)
	}
}
