package kubeapi

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

func TestDropManagedFieldsKeepsTheRest(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "p", Namespace: "default", Labels: map[string]string{"app": "a"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply}},
		},
		Spec: corev1.PodSpec{NodeName: "node-1"},
	}
	out, err := DropManagedFields(pod)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*corev1.Pod)
	if got.ManagedFields != nil {
		t.Errorf("managedFields %v left", got.ManagedFields)
	}
	if got.Name != "p" || got.Labels["app"] != "a" || got.Spec.NodeName != "node-1" {
		t.Errorf("the rest changed: %+v", got)
	}
}

func TestDropManagedFieldsPassesATombstone(t *testing.T) {
	tomb := cache.DeletedFinalStateUnknown{Key: "default/p", Obj: &corev1.Pod{}}
	out, err := DropManagedFields(tomb)
	if err != nil || out != tomb {
		t.Fatalf("DropManagedFields(tombstone) = %v, %v; want it unchanged", out, err)
	}
}
