package podworker

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// A pod keeps the resources it was admitted with, through a restart of podsync (the
// checkpoint); a resize is named, and the pod with its allocation applied asks for the
// admitted resources; the checkpoint goes with the pod.
func TestAllocationKeepsTheAdmittedResources(t *testing.T) {
	m := &Manager{o: Options{StateDir: t.TempDir(), Log: slog.New(slog.NewTextHandler(io.Discard, nil))}}
	mem := func(q string) corev1.ResourceRequirements {
		return corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(q)}}
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "u1", Name: "p", Namespace: "ns"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Resources: mem("64Mi")}}}}
	a := m.allocate(pod)
	resized := pod.DeepCopy()
	resized.Spec.Containers[0].Resources = mem("128Mi")
	if got := a.differs(resized); !slices.Equal(got, []string{"app"}) {
		t.Errorf("differs = %v, want [app]", got)
	}
	if got := a.apply(resized, a.differs(resized)).Spec.Containers[0].Resources.Limits.Memory().String(); got != "64Mi" {
		t.Errorf("applied: %s, want the admitted 64Mi", got)
	}
	// A restarted podsync sees only the resized pod: the checkpoint keeps 64Mi.
	again := m.allocate(resized)
	if got := again.apply(resized, again.differs(resized)).Spec.Containers[0].Resources.Limits.Memory().String(); got != "64Mi" {
		t.Errorf("after a restart: %s, want the checkpointed 64Mi", got)
	}
	m.forgetAllocation(pod)
	if got := func() *corev1.Pod { a := m.allocate(resized); return a.apply(resized, a.differs(resized)) }().Spec.Containers[0].Resources.Limits.Memory().String(); got != "128Mi" {
		t.Errorf("a new pod of the same UID after forget: %s, want its own 128Mi", got)
	}
}

// The sweep removes the checkpoints of pods whose content may go, and only those.
func TestSweepAllocations(t *testing.T) {
	dir := t.TempDir()
	m := &Manager{o: Options{StateDir: dir, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}}
	for _, uid := range []types.UID{"gone", "kept"} {
		m.allocate(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: uid}})
	}
	if err := SweepAllocations(dir, func() func(types.UID) bool { return func(u types.UID) bool { return u == "gone" } }); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(filepath.Join(dir, "allocated"))
	if len(entries) != 1 || entries[0].Name() != "kept.json" {
		t.Errorf("left %v, want kept.json only", entries)
	}
}
