package podstatus

import (
	"encoding/json"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var (
	t0 = metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	t1 = metav1.NewTime(t0.Add(time.Hour))
)

func cond(typ corev1.PodConditionType, ok bool, at metav1.Time) corev1.PodCondition {
	c := corev1.PodCondition{Type: typ, Status: corev1.ConditionFalse, LastTransitionTime: at}
	if ok {
		c.Status = corev1.ConditionTrue
	}
	return c
}

func TestMergeKeepsTransitionTimesStartTimeAndOthersConditions(t *testing.T) {
	api := corev1.PodStatus{
		Phase:     corev1.PodRunning,
		StartTime: &t0,
		Conditions: []corev1.PodCondition{
			cond(corev1.PodScheduled, true, t0),
			cond("example.com/gate", true, t0),
			cond(corev1.PodReady, true, t0),
			cond(corev1.ContainersReady, true, t0),
		},
		NominatedNodeName: "other",
	}
	want := corev1.PodStatus{
		Phase:     corev1.PodRunning,
		StartTime: &t1,
		Conditions: []corev1.PodCondition{
			cond(corev1.PodReadyToStartContainers, true, t1),
			cond(corev1.ContainersReady, false, t1),
			cond(corev1.PodReady, true, t1),
			cond(corev1.PodScheduled, true, t1),
		},
	}
	got := merge(api, want)
	if !got.StartTime.Equal(&t0) {
		t.Errorf("startTime = %v, want the API's %v", got.StartTime, t0)
	}
	if got.NominatedNodeName != "other" {
		t.Errorf("nominatedNodeName = %q, want the API's", got.NominatedNodeName)
	}
	wantOrder := []struct {
		typ corev1.PodConditionType
		at  metav1.Time
	}{
		{corev1.PodScheduled, t0}, {"example.com/gate", t0}, {corev1.PodReady, t0},
		{corev1.ContainersReady, t1}, // status changed: podsync's time
		{corev1.PodReadyToStartContainers, t1},
	}
	if len(got.Conditions) != len(wantOrder) {
		t.Fatalf("conditions = %+v, want %d", got.Conditions, len(wantOrder))
	}
	for i, w := range wantOrder {
		c := got.Conditions[i]
		if c.Type != w.typ || !c.LastTransitionTime.Equal(&w.at) {
			t.Errorf("condition %d = %s at %v, want %s at %v", i, c.Type, c.LastTransitionTime, w.typ, w.at)
		}
	}
	if _, changed, err := statusPatch("u", got, merge(got, want)); err != nil || changed {
		t.Errorf("merging the same observation again: changed=%v err=%v, want no change", changed, err)
	}
}

func TestMergeNeverLeavesTerminalPhase(t *testing.T) {
	for _, p := range []corev1.PodPhase{corev1.PodSucceeded, corev1.PodFailed} {
		got := merge(corev1.PodStatus{Phase: p}, corev1.PodStatus{Phase: corev1.PodRunning})
		if got.Phase != p {
			t.Errorf("API %s, podsync Running: phase = %s, want %s", p, got.Phase, p)
		}
	}
	got := merge(corev1.PodStatus{Phase: corev1.PodRunning}, corev1.PodStatus{Phase: corev1.PodFailed})
	if got.Phase != corev1.PodFailed {
		t.Errorf("API Running, podsync Failed: phase = %s, want Failed", got.Phase)
	}
}

func TestStatusPatchCarriesUIDAndOnlyTheChange(t *testing.T) {
	old := corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{cond("example.com/gate", true, t0)}}
	next := merge(old, corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{cond(corev1.PodReady, true, t1)}})
	patch, changed, err := statusPatch("uid-1", old, next)
	if err != nil || !changed {
		t.Fatalf("statusPatch: changed=%v err=%v", changed, err)
	}
	var p struct {
		Metadata map[string]any `json:"metadata"`
		Status   map[string]any `json:"status"`
		Spec     any            `json:"spec"`
	}
	if err := json.Unmarshal(patch, &p); err != nil {
		t.Fatal(err)
	}
	if p.Metadata["uid"] != "uid-1" || len(p.Metadata) != 1 {
		t.Errorf("metadata = %v, want only uid-1", p.Metadata)
	}
	if p.Spec != nil {
		t.Errorf("patch touches spec: %s", patch)
	}
	if p.Status["phase"] != "Running" {
		t.Errorf("status.phase = %v in %s", p.Status["phase"], patch)
	}
	if _, changed, _ := statusPatch("uid-1", next, next); changed {
		t.Error("equal statuses gave a patch")
	}
}
