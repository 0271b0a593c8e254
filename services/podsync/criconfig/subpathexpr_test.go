package criconfig

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// subPathExpr expands from the container's environment (the downward API's pod name
// here) into subPath; a missing or empty variable, an absolute result and a ".." are
// errors naming the mount.
func TestExpandSubPathExprs(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: "default"}}
	c := &corev1.Container{Name: "app", Env: []corev1.EnvVar{
		{Name: "POD", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
		{Name: "EMPTY", Value: ""}, {Name: "ABS", Value: "/etc"}, {Name: "UP", Value: ".."},
	}, VolumeMounts: []corev1.VolumeMount{{Name: "logs", MountPath: "/logs", SubPathExpr: "$(POD)/logs"}, {Name: "data", MountPath: "/data"}}}
	pod.Spec.Containers = []corev1.Container{*c}
	got, err := ExpandSubPathExprs(context.Background(), pod, c, PodEnv{}, newObjects())
	if err != nil {
		t.Fatal(err)
	}
	if vm := got.VolumeMounts[0]; vm.SubPath != "web-0/logs" || vm.SubPathExpr != "" {
		t.Errorf("expanded mount %+v, want subPath web-0/logs", vm)
	}
	if c.VolumeMounts[0].SubPathExpr == "" {
		t.Error("the container itself was changed")
	}
	if p := WithContainer(pod, got); p.Spec.Containers[0].VolumeMounts[0].SubPath != "web-0/logs" || pod.Spec.Containers[0].VolumeMounts[0].SubPath != "" {
		t.Errorf("WithContainer: %+v (the pod's own %+v)", p.Spec.Containers[0].VolumeMounts[0], pod.Spec.Containers[0].VolumeMounts[0])
	}
	for expr, want := range map[string]string{
		"$(NOPE)/$(EMPTY)": "missing value for EMPTY, NOPE",
		"$(ABS)/x":         `expands to "/etc/x", which must not be an absolute path`,
		"a/$(UP)/b":        `expands to "a/../b", which must not contain '..'`,
	} {
		bad := c.DeepCopy()
		bad.VolumeMounts[0].SubPathExpr = expr
		if _, err := ExpandSubPathExprs(context.Background(), pod, bad, PodEnv{}, newObjects()); err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), `volumeMount "logs" of container app`) {
			t.Errorf("subPathExpr %q: %v, want an error naming the mount and saying %q", expr, err, want)
		}
	}
}
