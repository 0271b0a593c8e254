package harnesstest

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/unitlet/unitlet/integration/csidriver"
)

// TestCSIDriverRegistersThroughThePluginWatcher: the harness's CSI test driver starts on
// node-1 as a node plugin with node-driver-registrar would (its CSI socket under
// <root-dir>/plugins, its registration socket in <root-dir>/plugins_registry).
// unitlet-volumes' plugin watcher registers it: within 2 s the node's CSINode lists it
// with its node ID, topology keys and volume limit, the Node carries its node ID in the
// csi.volume.kubernetes.io/nodeid annotation and its topology as a label, and the driver
// was told it is registered. Its registration socket removed, it leaves CSINode and the
// annotation again.
func TestCSIDriverRegistersThroughThePluginWatcher(t *testing.T) {
	t.Parallel()
	waitNodeReady(t, 90*time.Second)
	c := admin(t)
	// Short: the sockets' paths under the stack's root dir must fit a Unix socket address (108 bytes).
	const name = "reg.csi.unitlet.test"
	root := stack.NodeRootDir(podsyncNode)
	start := time.Now()
	d, err := csidriver.Start(csidriver.Options{
		Name: name, RegistrationDir: filepath.Join(root, "plugins_registry"),
		Endpoint: filepath.Join(root, "plugins", name, "csi.sock"),
		NodeID:   "unitlet-" + podsyncNode, MaxVolumesPerNode: 12,
		Topology: map[string]string{"topology.csi.unitlet.test/rack": "r1"},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)

	var listed time.Duration
	stack.WaitFor(t, 30*time.Second, "the driver in the node's CSINode", func(ctx context.Context) (bool, string) {
		cn, err := c.StorageV1().CSINodes().Get(ctx, podsyncNode, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, dr := range cn.Spec.Drivers {
			if dr.Name == name {
				listed = time.Since(start)
				ok := dr.NodeID == "unitlet-"+podsyncNode && strings.Join(dr.TopologyKeys, ",") == "topology.csi.unitlet.test/rack" &&
					dr.Allocatable != nil && dr.Allocatable.Count != nil && *dr.Allocatable.Count == 12
				return ok, fmt.Sprintf("%+v", dr)
			}
		}
		return false, fmt.Sprintf("drivers %+v", cn.Spec.Drivers)
	})
	t.Logf("the driver was in CSINode %s after its sockets were made", listed.Round(10*time.Millisecond))
	if listed > 2*time.Second {
		t.Errorf("the driver reached CSINode after %s, want within 2 s of its socket", listed.Round(10*time.Millisecond))
	}
	node, err := c.CoreV1().Nodes().Get(context.Background(), podsyncNode, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := node.Annotations["csi.volume.kubernetes.io/nodeid"]; !strings.Contains(got, `"`+name+`":"unitlet-`+podsyncNode+`"`) {
		t.Errorf("the Node's csi.volume.kubernetes.io/nodeid annotation %q, want the driver's node ID", got)
	}
	if got := node.Labels["topology.csi.unitlet.test/rack"]; got != "r1" {
		t.Errorf("the Node's topology label %q, want r1", got)
	}
	stack.WaitFor(t, 10*time.Second, "the driver told it is registered", func(context.Context) (bool, string) {
		n := d.Notified()
		return len(n) > 0 && n[len(n)-1].PluginRegistered, fmt.Sprintf("%+v", n)
	})

	// node-driver-registrar gone: the driver leaves CSINode and the annotation.
	if err := d.Unregister(); err != nil {
		t.Fatal(err)
	}
	stack.WaitFor(t, 30*time.Second, "the driver out of CSINode and the Node's annotation", func(ctx context.Context) (bool, string) {
		cn, err := c.StorageV1().CSINodes().Get(ctx, podsyncNode, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, dr := range cn.Spec.Drivers {
			if dr.Name == name {
				return false, "still in CSINode"
			}
		}
		n, err := c.CoreV1().Nodes().Get(ctx, podsyncNode, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		got := n.Annotations["csi.volume.kubernetes.io/nodeid"]
		return !strings.Contains(got, name), "annotation " + got
	})
}
