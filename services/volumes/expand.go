package volumes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/strategicpatch"

	"github.com/unitlet/unitlet/services/volumes/csi"
)

// The claim conditions of a resize, which a finished node expansion clears.
var resizeConditions = []corev1.PersistentVolumeClaimConditionType{
	corev1.PersistentVolumeClaimResizing, corev1.PersistentVolumeClaimFileSystemResizePending,
	corev1.PersistentVolumeClaimControllerResizeError, corev1.PersistentVolumeClaimNodeResizeError,
}

// ExpandClaims finishes the expansions the node owes: each CSI claim volume the node's pods
// use whose claim says node expansion is pending (allocatedResourceStatuses storage
// NodeResizePending, or NodeResizeInProgress after a restart) has its driver grow the file
// system to the PV's new capacity (NodeExpandVolume), then the claim's status says so
// (capacity, the resize status and conditions cleared), with the kubelet's
// FileSystemResizeSuccessful events on the pod and the claim; a failure is a
// FileSystemResizeFailed event and is tried again at the next round. Called by the
// reconcile round: as with the kubelet, a resize reaches a running pod within a sync
// period.
func (m *Manager) ExpandClaims(ctx context.Context) {
	if m.csi == nil || m.claims == nil {
		return
	}
	type use struct {
		pod *corev1.Pod
		vol *volume
	}
	var uses []use
	seen := map[string]bool{}
	m.mu.Lock()
	for _, pv := range m.pods {
		for _, v := range pv.volumes {
			if pv.pod != nil && v.plugin == csi.PluginName && v.claim != "" && !v.block && !seen[pv.pod.Namespace+"/"+v.claim] {
				seen[pv.pod.Namespace+"/"+v.claim] = true
				uses = append(uses, use{pv.pod, v})
			}
		}
	}
	m.mu.Unlock()
	for _, u := range uses {
		if err := m.expandClaim(ctx, u.pod, u.vol); err != nil {
			m.log.Warn("expand a volume on the node", "pod", u.pod.Namespace+"/"+u.pod.Name, "volume", u.vol.name, "err", err)
			if m.recorder != nil {
				m.recorder.Event(u.pod, corev1.EventTypeWarning, "FileSystemResizeFailed", fmt.Sprintf("MountVolume.NodeExpandVolume failed for volume %q: %v", u.vol.name, err))
			}
		}
	}
}

func (m *Manager) expandClaim(ctx context.Context, pod *corev1.Pod, v *volume) error {
	pvc, err := m.claims.Claim(ctx, pod.Namespace, v.claim)
	if err != nil {
		return err
	}
	status := pvc.Status.AllocatedResourceStatuses[corev1.ResourceStorage]
	if status != corev1.PersistentVolumeClaimNodeResizePending && status != corev1.PersistentVolumeClaimNodeResizeInProgress {
		return nil
	}
	pv, err := m.claims.Volume(ctx, pvc.Spec.VolumeName)
	if err != nil {
		return err
	}
	newSize, ok := pv.Spec.Capacity[corev1.ResourceStorage]
	if !ok {
		return fmt.Errorf("PersistentVolume %s has no storage capacity", pv.Name)
	}
	if status == corev1.PersistentVolumeClaimNodeResizePending {
		if pvc, err = m.patchClaimStatus(ctx, pvc, func(s *corev1.PersistentVolumeClaimStatus) {
			s.AllocatedResourceStatuses[corev1.ResourceStorage] = corev1.PersistentVolumeClaimNodeResizeInProgress
		}); err != nil {
			return fmt.Errorf("mark node expansion in progress: %w", err)
		}
	}
	got, err := m.csi.Expand(ctx, v.path, pv, newSize.Value())
	if err != nil && !errors.Is(err, csi.ErrNoNodeExpansion) {
		return err
	}
	if err == nil {
		m.log.Info("expanded a volume on the node", "pod", pod.Namespace+"/"+pod.Name, "volume", v.name, "claim", pvc.Name, "capacity", got)
	}
	if _, err := m.patchClaimStatus(ctx, pvc, func(s *corev1.PersistentVolumeClaimStatus) {
		if s.Capacity == nil {
			s.Capacity = corev1.ResourceList{}
		}
		s.Capacity[corev1.ResourceStorage] = newSize
		delete(s.AllocatedResourceStatuses, corev1.ResourceStorage)
		if len(s.AllocatedResourceStatuses) == 0 {
			s.AllocatedResourceStatuses = nil
		}
		var keep []corev1.PersistentVolumeClaimCondition
		for _, c := range s.Conditions {
			if !slices.Contains(resizeConditions, c.Type) {
				keep = append(keep, c)
			}
		}
		s.Conditions = keep
	}); err != nil {
		return fmt.Errorf("record the node expansion in claim %s/%s: %w", pvc.Namespace, pvc.Name, err)
	}
	if m.recorder != nil {
		msg := fmt.Sprintf("MountVolume.NodeExpandVolume succeeded for volume %q %s", v.name, pod.Spec.NodeName)
		m.recorder.Event(pod, corev1.EventTypeNormal, "FileSystemResizeSuccessful", msg)
		m.recorder.Event(pvc, corev1.EventTypeNormal, "FileSystemResizeSuccessful", msg)
	}
	return nil
}

// patchClaimStatus patches the claim's status with edit's change, as the kubelet does: a
// strategic merge patch of the status subresource that fails if the claim changed since
// it was read (its resourceVersion in the patch).
func (m *Manager) patchClaimStatus(ctx context.Context, pvc *corev1.PersistentVolumeClaim, edit func(*corev1.PersistentVolumeClaimStatus)) (*corev1.PersistentVolumeClaim, error) {
	changed := pvc.DeepCopy()
	edit(&changed.Status)
	oldJSON, err := json.Marshal(pvc)
	if err != nil {
		return nil, err
	}
	newJSON, err := json.Marshal(changed)
	if err != nil {
		return nil, err
	}
	patch, err := strategicpatch.CreateTwoWayMergePatch(oldJSON, newJSON, corev1.PersistentVolumeClaim{})
	if err != nil {
		return nil, err
	}
	var withVersion map[string]any
	if err := json.Unmarshal(patch, &withVersion); err != nil {
		return nil, err
	}
	withVersion["metadata"] = map[string]any{"resourceVersion": pvc.ResourceVersion}
	if patch, err = json.Marshal(withVersion); err != nil {
		return nil, err
	}
	return m.claims.PatchClaimStatus(ctx, pvc.Namespace, pvc.Name, patch)
}
