package nodestatus

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
)

func TestRegisterCreatesTheNodeWithItsStatus(t *testing.T) {
	h := newHarness(t, nil)
	node, err := h.c.tryRegister(context.Background())
	if err != nil {
		t.Fatalf("tryRegister: %v", err)
	}
	h.c.setRegistered(node, nil)
	n := h.node(t)

	if n.Labels["pool"] != "blue" || n.Labels[corev1.LabelHostname] != testNode {
		t.Errorf("labels = %v", n.Labels)
	}
	if len(n.Spec.Taints) != 1 || n.Spec.Taints[0].Key != "unitlet.io/new" {
		t.Errorf("taints = %v, want registerWithTaints", n.Spec.Taints)
	}
	if n.Annotations[attachDetachAnnotation] != "true" {
		t.Errorf("annotations = %v", n.Annotations)
	}
	info := n.Status.NodeInfo
	for name, got := range map[string][2]string{
		"machineID":               {info.MachineID, "0123456789abcdef0123456789abcdef"},
		"systemUUID":              {info.SystemUUID, "4C4C4544-0000-1010-8000-B1C04F333532"},
		"bootID":                  {info.BootID, "b3f0c1de-1111-2222-3333-444455556666"},
		"kernelVersion":           {info.KernelVersion, "6.1.0-18-amd64"},
		"osImage":                 {info.OSImage, "Debian GNU/Linux 12 (bookworm)"},
		"containerRuntimeVersion": {info.ContainerRuntimeVersion, "containerd://1.7.24"},
		"operatingSystem":         {info.OperatingSystem, "linux"},
	} {
		if got[0] != got[1] {
			t.Errorf("nodeInfo.%s = %q, want %q", name, got[0], got[1])
		}
	}
	if !strings.HasPrefix(info.KubeletVersion, "v1.36.3-unitlet+") {
		t.Errorf("kubeletVersion = %q, want v1.36.3-unitlet+<version>", info.KubeletVersion)
	}
	if p := n.Status.DaemonEndpoints.KubeletEndpoint.Port; p != 10250 {
		t.Errorf("kubelet endpoint port = %d, want 10250", p)
	}
	if len(n.Status.Addresses) != 2 || n.Status.Addresses[0].Address != "10.0.0.5" {
		t.Errorf("addresses = %v", n.Status.Addresses)
	}
	if q := n.Status.Allocatable[corev1.ResourceMemory]; q.Cmp(resource.MustParse("3900Mi")) != 0 {
		t.Errorf("allocatable memory = %s", q.String())
	}
	// Images: biggest first, at most five names each.
	if len(n.Status.Images) != 3 || n.Status.Images[0].SizeBytes != 1000 || n.Status.Images[2].SizeBytes != 10 {
		t.Errorf("images = %+v, want biggest first", n.Status.Images)
	}
	if names := n.Status.Images[0].Names; len(names) != 5 || names[0] != "big@sha256:1" {
		t.Errorf("biggest image names = %v, want the first five", names)
	}
	ready := condition(t, n, corev1.NodeReady)
	if ready.Status != corev1.ConditionTrue || ready.Reason != "KubeletReady" {
		t.Errorf("Ready = %+v", ready)
	}
	if last := n.Status.Conditions[len(n.Status.Conditions)-1]; last.Type != corev1.NodeReady {
		t.Errorf("last condition = %s, want Ready last as the kubelet", last.Type)
	}
	// New pressure conditions record the kubelet's events; a new Ready condition does not.
	ev := h.events()
	containsAll(t, ev, "Normal NodeHasSufficientMemory Node node-a status is now: NodeHasSufficientMemory",
		"NodeHasNoDiskPressure", "NodeHasSufficientPID")
	for _, e := range ev {
		if strings.Contains(e, "NodeReady") {
			t.Errorf("unexpected event %q for a node created Ready", e)
		}
	}
	st := h.c.Status()
	if !st.GetRegistered() || st.GetRegistrationError() != "" || st.GetLastStatusUpdate() == nil {
		t.Errorf("Status() = %v", st)
	}
}

func TestRegisterReconcilesAnExistingNode(t *testing.T) {
	existing := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: testNode, UID: "uid-old",
			Labels: map[string]string{
				corev1.LabelHostname: "old-hostname", "team": "storage",
				corev1.LabelOSStable: "linux", corev1.LabelArchStable: "amd64",
			},
		},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "admin/drain", Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{
			Capacity: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse("2"), "hugepages-1Gi": resource.MustParse("2Gi"),
				"example.com/gpu": resource.MustParse("1"),
			},
			Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), "hugepages-1Gi": resource.MustParse("2Gi")},
		},
	}
	h := newHarness(t, nil, existing)
	node, err := h.c.tryRegister(context.Background())
	if err != nil {
		t.Fatalf("tryRegister: %v", err)
	}
	if node.UID != "uid-old" {
		t.Errorf("registered node uid = %q, want the existing node's", node.UID)
	}
	n := h.node(t)
	if n.Labels[corev1.LabelHostname] != testNode {
		t.Errorf("hostname label = %q, want reconciled to %q", n.Labels[corev1.LabelHostname], testNode)
	}
	if n.Labels["team"] != "storage" {
		t.Errorf("a label someone else set was lost: %v", n.Labels)
	}
	if _, ok := n.Labels["pool"]; ok {
		t.Errorf("registration-only label applied to an existing node: %v", n.Labels)
	}
	if len(n.Spec.Taints) != 1 || n.Spec.Taints[0].Key != "admin/drain" {
		t.Errorf("taints = %v, want the existing ones kept", n.Spec.Taints)
	}
	if n.Annotations[attachDetachAnnotation] != "true" {
		t.Errorf("attach/detach annotation not reconciled: %v", n.Annotations)
	}
	if _, ok := n.Status.Capacity["hugepages-1Gi"]; ok {
		t.Errorf("huge page size the machine no longer has is still there: %v", n.Status.Capacity)
	}
	if _, ok := n.Status.Capacity["hugepages-2Mi"]; !ok {
		t.Errorf("huge page size not added: %v", n.Status.Capacity)
	}
	if _, ok := n.Status.Capacity["example.com/gpu"]; !ok {
		t.Errorf("extended resource lost: %v", n.Status.Capacity)
	}

	// The first status sync then fills in the rest and keeps what others set.
	h.c.setRegistered(node, nil)
	if err := h.c.syncNodeStatus(context.Background()); err != nil {
		t.Fatalf("syncNodeStatus: %v", err)
	}
	n = h.node(t)
	if q := n.Status.Capacity[corev1.ResourceMemory]; q.Cmp(resource.MustParse("4Gi")) != 0 {
		t.Errorf("capacity memory = %s after the first sync", q.String())
	}
	if _, ok := n.Status.Capacity["example.com/gpu"]; !ok {
		t.Errorf("extended resource lost by the status sync: %v", n.Status.Capacity)
	}
	if h.runtime.calls != 1 {
		t.Errorf("podsync asked %d times for registration and the first sync, want once", h.runtime.calls)
	}
}

func TestRegisterReconcileRemovesTheAttachDetachAnnotation(t *testing.T) {
	existing := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name: testNode, Annotations: map[string]string{attachDetachAnnotation: "true", "other": "x"},
	}}
	h := newHarness(t, func(o *Options) {
		o.Build = func() (*corev1.Node, error) {
			n := builtNode()
			n.Annotations = nil
			return n, nil
		}
	}, existing)
	if _, err := h.c.tryRegister(context.Background()); err != nil {
		t.Fatal(err)
	}
	n := h.node(t)
	if _, ok := n.Annotations[attachDetachAnnotation]; ok || n.Annotations["other"] != "x" {
		t.Errorf("annotations = %v, want attach/detach removed and others kept", n.Annotations)
	}
}

func TestRunRetriesRegistrationThenSyncs(t *testing.T) {
	h := newHarness(t, nil)
	var failures atomic.Int32
	h.client.PrependReactor("create", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		if failures.Add(1) <= 2 {
			return true, nil, errors.New("connection refused")
		}
		return false, nil, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.c.Run(ctx) }()

	waitFor(t, "the first registration attempt to fail", func() bool {
		return strings.Contains(h.c.Status().GetRegistrationError(), "connection refused")
	})
	if h.c.Status().GetRegistered() {
		t.Error("registered after a failed create")
	}
	for !h.c.Status().GetRegistered() {
		waitFor(t, "a backoff timer", h.clock.HasWaiters)
		h.clock.Step(7 * time.Second)
	}
	if got := failures.Load(); got != 3 {
		t.Errorf("create attempts = %d, want 3", got)
	}
	waitFor(t, "the status loop to wait for its next tick", h.clock.HasWaiters)
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v, want nil on cancel", err)
	}
	containsAll(t, h.events(), "Normal Starting Starting kubelet.")
	if condition(t, h.node(t), corev1.NodeReady).Status != corev1.ConditionTrue {
		t.Error("node not Ready after Run")
	}
}

func TestRunRegistersAgainWhenTheNodeIsDeleted(t *testing.T) {
	h := newHarness(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- h.c.Run(ctx) }()
	waitFor(t, "registration", func() bool { return h.c.Status().GetRegistered() })
	waitFor(t, "the status loop to wait", h.clock.HasWaiters)
	if err := h.client.CoreV1().Nodes().Delete(ctx, testNode, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.clock.Step(10 * time.Second)
	waitFor(t, "the node to be created again", func() bool {
		_, err := h.client.CoreV1().Nodes().Get(ctx, testNode, metav1.GetOptions{})
		return err == nil
	})
	cancel()
	<-done
}
