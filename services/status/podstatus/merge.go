package podstatus

import (
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
)

// merge is the status to write: podsync's observation laid over what the API has, so a
// restart of podsync or of this service changes nothing that did not change.
//
//   - A condition whose status is unchanged keeps the API's lastTransitionTime and
//     lastProbeTime; conditions podsync does not send (readiness gates', DisruptionTarget)
//     are kept; the API's order of conditions is kept, new types follow in podsync's order.
//   - The API's startTime wins once set.
//   - A pod in a terminal phase (Succeeded, Failed) never goes back to a non-terminal one.
//   - Fields podsync leaves empty keep the API's value: those others own (nominatedNodeName,
//     resource claim statuses) and those that only move forward (qosClass,
//     observedGeneration).
func merge(api, want corev1.PodStatus) corev1.PodStatus {
	out := *want.DeepCopy()

	if api.StartTime != nil && !api.StartTime.IsZero() {
		out.StartTime = api.StartTime.DeepCopy()
	}
	if terminal(api.Phase) && !terminal(out.Phase) {
		out.Phase = api.Phase
	}
	if out.QOSClass == "" {
		out.QOSClass = api.QOSClass
	}
	if out.ObservedGeneration == 0 {
		out.ObservedGeneration = api.ObservedGeneration
	}
	if out.NominatedNodeName == "" {
		out.NominatedNodeName = api.NominatedNodeName
	}
	if len(out.ResourceClaimStatuses) == 0 {
		out.ResourceClaimStatuses = api.ResourceClaimStatuses
	}
	if out.ExtendedResourceClaimStatus == nil {
		out.ExtendedResourceClaimStatus = api.ExtendedResourceClaimStatus
	}
	out.Conditions = mergeConditions(api.Conditions, want.Conditions)
	return out
}

// dropWhenUnsent are the conditions only the node agent sets and that go when podsync no
// longer sends them: a resize's, which end with the resize.
var dropWhenUnsent = map[corev1.PodConditionType]bool{corev1.PodResizePending: true, corev1.PodResizeInProgress: true}

func mergeConditions(api, want []corev1.PodCondition) []corev1.PodCondition {
	sent := make(map[corev1.PodConditionType]int, len(want))
	for i, c := range want {
		sent[c.Type] = i
	}
	out := make([]corev1.PodCondition, 0, len(api)+len(want))
	used := make(map[corev1.PodConditionType]bool, len(want))
	for _, a := range api {
		i, ok := sent[a.Type]
		if !ok {
			if !dropWhenUnsent[a.Type] {
				out = append(out, *a.DeepCopy())
			}
			continue
		}
		if used[a.Type] {
			continue
		}
		used[a.Type] = true
		c := *want[i].DeepCopy()
		if c.Status == a.Status {
			c.LastTransitionTime = a.LastTransitionTime
			if !a.LastProbeTime.IsZero() || c.LastProbeTime.IsZero() {
				c.LastProbeTime = a.LastProbeTime
			}
		}
		out = append(out, c)
	}
	for _, c := range want {
		if !used[c.Type] {
			used[c.Type] = true
			out = append(out, *c.DeepCopy())
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

func terminal(p corev1.PodPhase) bool {
	return p == corev1.PodSucceeded || p == corev1.PodFailed
}

// statusPatch is the strategic merge patch that turns the API's status into want, with
// the pod's UID as a precondition (the API server refuses it for another pod of the same
// name). changed is false when there is nothing to write.
func statusPatch(uid types.UID, api, want corev1.PodStatus) (patch []byte, changed bool, err error) {
	oldJSON, err := json.Marshal(corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: uid}, Status: api})
	if err != nil {
		return nil, false, fmt.Errorf("encode current status: %w", err)
	}
	newJSON, err := json.Marshal(corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: uid}, Status: want})
	if err != nil {
		return nil, false, fmt.Errorf("encode wanted status: %w", err)
	}
	diff, err := strategicpatch.CreateTwoWayMergePatch(oldJSON, newJSON, corev1.Pod{})
	if err != nil {
		return nil, false, fmt.Errorf("compute status patch: %w", err)
	}
	var m map[string]any
	if err := json.Unmarshal(diff, &m); err != nil {
		return nil, false, fmt.Errorf("decode status patch: %w", err)
	}
	if len(m) == 0 {
		return nil, false, nil
	}
	m["metadata"] = map[string]any{"uid": string(uid)}
	patch, err = json.Marshal(m)
	if err != nil {
		return nil, false, fmt.Errorf("encode status patch: %w", err)
	}
	return patch, true, nil
}
