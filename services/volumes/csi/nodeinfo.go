package csi

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
	"sync"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/unitlet/unitlet/shared/kubeapi"
)

// The Node annotation holding each driver's node ID, as a JSON object by driver name.
const annotationNodeID = "csi.volume.kubernetes.io/nodeid"

// APINodeInfo records drivers in the node's CSINode object and on its Node, as the
// kubelet's node info manager does. The CSINode is owned by the Node (garbage-collected
// with it) and made when first needed.
type APINodeInfo struct {
	client kubeapi.Interface // nil: standalone
	node   string
	mu     sync.Mutex
}

// NewAPINodeInfo records drivers for node through client (nil: a standalone node, which
// refuses drivers).
func NewAPINodeInfo(client kubeapi.Interface, node string) *APINodeInfo {
	return &APINodeInfo{client: client, node: node}
}

// InstallDriver adds or updates the driver in CSINode (node ID, topology keys, the volume
// limit when the driver has one) and on the Node (its node ID in the annotation, its
// topology as labels; a label the node has with another value is a conflict, refused).
func (n *APINodeInfo) InstallDriver(ctx context.Context, name string, info NodeInfoReply) error {
	if n.client == nil {
		return errNoAPI
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.updateNode(ctx, func(node *corev1.Node) (bool, error) {
		changed, err := setNodeID(node, name, info.NodeID)
		if err != nil {
			return false, err
		}
		for k, v := range info.AccessibleTopology {
			if cur, ok := node.Labels[k]; ok && cur != v {
				return false, fmt.Errorf("topology label %s=%s of CSI driver %s conflicts with the node's %s=%s", k, v, name, k, cur)
			}
		}
		for k, v := range info.AccessibleTopology {
			if node.Labels == nil {
				node.Labels = map[string]string{}
			}
			if node.Labels[k] != v {
				node.Labels[k], changed = v, true
			}
		}
		return changed, nil
	}); err != nil {
		return err
	}
	return n.updateCSINode(ctx, func(c *storagev1.CSINode) bool {
		want := storagev1.CSINodeDriver{Name: name, NodeID: info.NodeID, TopologyKeys: sortedKeys(info.AccessibleTopology)}
		if limit := info.MaxVolumesPerNode; limit > 0 {
			count := int32(min(limit, math.MaxInt32))
			want.Allocatable = &storagev1.VolumeNodeResources{Count: &count}
		}
		i := slices.IndexFunc(c.Spec.Drivers, func(d storagev1.CSINodeDriver) bool { return d.Name == name })
		if i >= 0 && sameDriver(c.Spec.Drivers[i], want) {
			return false
		}
		if i >= 0 {
			c.Spec.Drivers = slices.Delete(c.Spec.Drivers, i, i+1)
		}
		c.Spec.Drivers = append(c.Spec.Drivers, want)
		return true
	})
}

// UninstallDriver takes the driver out of CSINode and the Node's annotation.
func (n *APINodeInfo) UninstallDriver(ctx context.Context, name string) error {
	if n.client == nil {
		return errNoAPI
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.updateCSINode(ctx, func(c *storagev1.CSINode) bool {
		before := len(c.Spec.Drivers)
		c.Spec.Drivers = slices.DeleteFunc(c.Spec.Drivers, func(d storagev1.CSINodeDriver) bool { return d.Name == name })
		return len(c.Spec.Drivers) != before
	}); err != nil {
		return err
	}
	return n.updateNode(ctx, func(node *corev1.Node) (bool, error) { return setNodeID(node, name, "") })
}

// updateNode applies change to the Node and writes it when it changed, again on a conflict.
func (n *APINodeInfo) updateNode(ctx context.Context, change func(*corev1.Node) (bool, error)) error {
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		node, err := n.client.CoreV1().Nodes().Get(ctx, n.node, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("read Node %s: %w", n.node, err)
		}
		changed, err := change(node)
		if err != nil || !changed {
			return err
		}
		_, err = n.client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
		return err
	})
}

// updateCSINode applies change to the node's CSINode (made, owned by the Node, when there
// is none) and writes it when it changed, again on a conflict.
func (n *APINodeInfo) updateCSINode(ctx context.Context, change func(*storagev1.CSINode) bool) error {
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		c, err := n.client.StorageV1().CSINodes().Get(ctx, n.node, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			node, err := n.client.CoreV1().Nodes().Get(ctx, n.node, metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("read Node %s to own its CSINode: %w", n.node, err)
			}
			c = &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: n.node, OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID,
			}}}}
			if !change(c) {
				return nil
			}
			_, err = n.client.StorageV1().CSINodes().Create(ctx, c, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				return apierrors.NewConflict(storagev1.Resource("csinodes"), n.node, err)
			}
			return err
		}
		if err != nil {
			return fmt.Errorf("read CSINode %s: %w", n.node, err)
		}
		if !change(c) {
			return nil
		}
		_, err = n.client.StorageV1().CSINodes().Update(ctx, c, metav1.UpdateOptions{})
		return err
	})
}

// setNodeID sets the driver's node ID in the Node's annotation ("" removes it), reporting
// whether it changed.
func setNodeID(node *corev1.Node, driver, id string) (bool, error) {
	ids := map[string]string{}
	if v := node.Annotations[annotationNodeID]; v != "" {
		if err := json.Unmarshal([]byte(v), &ids); err != nil {
			return false, fmt.Errorf("the Node's %s annotation %q is not a JSON object: %w", annotationNodeID, v, err)
		}
		if ids == nil { // "null"
			ids = map[string]string{}
		}
	}
	if ids[driver] == id {
		return false, nil
	}
	if id == "" {
		delete(ids, driver)
	} else {
		ids[driver] = id
	}
	if node.Annotations == nil {
		node.Annotations = map[string]string{}
	}
	if len(ids) == 0 {
		delete(node.Annotations, annotationNodeID)
		return true, nil
	}
	b, err := json.Marshal(ids)
	if err != nil {
		return false, err
	}
	node.Annotations[annotationNodeID] = string(b)
	return true, nil
}

func sameDriver(a, b storagev1.CSINodeDriver) bool {
	count := func(d storagev1.CSINodeDriver) int32 {
		if d.Allocatable == nil || d.Allocatable.Count == nil {
			return 0
		}
		return *d.Allocatable.Count
	}
	keys := slices.Clone(a.TopologyKeys)
	sort.Strings(keys)
	return a.NodeID == b.NodeID && slices.Equal(keys, b.TopologyKeys) && count(a) == count(b)
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
