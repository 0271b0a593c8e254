package csi

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/unitlet/unitlet/shared/kubeapi/adapt"
)

func newTestHandler(t *testing.T, labels map[string]string) (*Handler, *fake.Clientset) {
	t.Helper()
	cs := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", UID: "node-uid", Labels: labels}})
	h := NewHandler(NewAPINodeInfo(adapt.Clientset(cs), "node-1"), slog.New(slog.NewTextHandler(io.Discard, nil)))
	return h, cs
}

func replyWith(r NodeInfoReply, err error) func(context.Context, string) (NodeInfoReply, error) {
	return func(context.Context, string) (NodeInfoReply, error) { return r, err }
}

// A driver registered: in CSINode (owned by the Node) with its node ID, topology keys and
// volume limit; its node ID in the Node's annotation and its topology as labels. Taken out
// again on deregistration, its labels kept, as the kubelet.
func TestRegisteredDriverIsInCSINodeAndOnTheNode(t *testing.T) {
	ctx := context.Background()
	h, cs := newTestHandler(t, map[string]string{"kubernetes.io/hostname": "node-1"})
	h.info = replyWith(NodeInfoReply{NodeID: "n1", MaxVolumesPerNode: 7, AccessibleTopology: map[string]string{"topology.test/zone": "a", "topology.test/rack": "r1"}}, nil)
	if err := h.ValidatePlugin("test.csi.unitlet.io", "/x.sock", []string{"1.0.0"}); err != nil {
		t.Fatal(err)
	}
	if err := h.RegisterPlugin("test.csi.unitlet.io", "/x.sock", []string{"1.0.0"}, nil); err != nil {
		t.Fatal(err)
	}
	c, err := cs.StorageV1().CSINodes().Get(ctx, "node-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.OwnerReferences) != 1 || c.OwnerReferences[0].Kind != "Node" || c.OwnerReferences[0].UID != "node-uid" {
		t.Errorf("CSINode owners %+v, want the Node", c.OwnerReferences)
	}
	if len(c.Spec.Drivers) != 1 {
		t.Fatalf("CSINode drivers %+v, want one", c.Spec.Drivers)
	}
	d := c.Spec.Drivers[0]
	if d.Name != "test.csi.unitlet.io" || d.NodeID != "n1" || strings.Join(d.TopologyKeys, ",") != "topology.test/rack,topology.test/zone" || d.Allocatable == nil || *d.Allocatable.Count != 7 {
		t.Errorf("CSINode driver %+v", d)
	}
	node, _ := cs.CoreV1().Nodes().Get(ctx, "node-1", metav1.GetOptions{})
	if got := node.Annotations[annotationNodeID]; got != `{"test.csi.unitlet.io":"n1"}` {
		t.Errorf("node ID annotation %q", got)
	}
	if node.Labels["topology.test/zone"] != "a" || node.Labels["kubernetes.io/hostname"] != "node-1" {
		t.Errorf("node labels %v", node.Labels)
	}
	if ds := h.Drivers(); len(ds) != 1 || ds[0].Endpoint != "/x.sock" || ds[0].Version.String() != "1.0.0" {
		t.Errorf("Drivers() = %+v", ds)
	}

	// The same version again is refused; a higher one replaces it.
	if err := h.ValidatePlugin("test.csi.unitlet.io", "/y.sock", []string{"1.0.0"}); err == nil || !strings.Contains(err.Error(), "already registered with version 1.0.0") {
		t.Errorf("a second registration of the same version: %v", err)
	}
	if err := h.ValidatePlugin("test.csi.unitlet.io", "/y.sock", []string{"1.2.0"}); err != nil {
		t.Errorf("a higher version: %v", err)
	}

	h.DeRegisterPlugin("test.csi.unitlet.io", "/x.sock")
	c, _ = cs.StorageV1().CSINodes().Get(ctx, "node-1", metav1.GetOptions{})
	node, _ = cs.CoreV1().Nodes().Get(ctx, "node-1", metav1.GetOptions{})
	if len(c.Spec.Drivers) != 0 || node.Annotations[annotationNodeID] != "" || node.Labels["topology.test/zone"] != "a" {
		t.Errorf("after deregistration: CSINode drivers %+v, annotation %q, labels %v", c.Spec.Drivers, node.Annotations[annotationNodeID], node.Labels)
	}
	if _, err := h.Driver("test.csi.unitlet.io"); err == nil {
		t.Errorf("Driver after deregistration: found")
	}
}

// Refusals: no 1.x version, a failed NodeGetInfo or an empty node ID, a topology label the
// node has with another value; none leaves the driver registered.
func TestRegistrationRefusals(t *testing.T) {
	h, cs := newTestHandler(t, map[string]string{"topology.test/zone": "b"})
	if err := h.ValidatePlugin("d", "/x.sock", []string{"0.3.0", "2.0.0"}); err == nil || !strings.Contains(err.Error(), "unitlet speaks CSI 1.x") {
		t.Errorf("versions 0.3.0 and 2.0.0: %v", err)
	}
	if err := h.ValidatePlugin("d", "/x.sock", nil); err == nil {
		t.Errorf("no versions: accepted")
	}
	for what, c := range map[string]struct {
		reply NodeInfoReply
		err   error
		want  string
	}{
		"NodeGetInfo fails": {err: errors.New("boom"), want: "NodeGetInfo: boom"},
		"no node ID":        {reply: NodeInfoReply{}, want: "no node_id"},
		"label conflict":    {reply: NodeInfoReply{NodeID: "n", AccessibleTopology: map[string]string{"topology.test/zone": "a"}}, want: "conflicts with the node's topology.test/zone=b"},
	} {
		h.info = replyWith(c.reply, c.err)
		if err := h.RegisterPlugin("d", "/x.sock", []string{"1.0.0"}, nil); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", what, err, c.want)
		}
		if len(h.Drivers()) != 0 {
			t.Errorf("%s: registered anyway", what)
		}
	}
	if l, _ := cs.StorageV1().CSINodes().List(context.Background(), metav1.ListOptions{}); len(l.Items) != 0 && len(l.Items[0].Spec.Drivers) != 0 {
		t.Errorf("CSINode after refusals: %+v", l.Items[0].Spec.Drivers)
	}
}

// A standalone node has no API server to record a driver in: refused, saying so.
func TestStandaloneNodeRefusesDrivers(t *testing.T) {
	h := NewHandler(NewAPINodeInfo(nil, "node-1"), slog.New(slog.NewTextHandler(io.Discard, nil)))
	h.info = replyWith(NodeInfoReply{NodeID: "n"}, nil)
	if err := h.RegisterPlugin("d", "/x.sock", []string{"1.0.0"}, nil); err == nil || !strings.Contains(err.Error(), "standalone") {
		t.Errorf("standalone: %v", err)
	}
}
