package criconfig

import (
	"encoding/json"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestHashMatchesKubelet(t *testing.T) {
	// The kubelet's own test pins this container to 0x8e45cbd0 since v1.31; a container
	// it created carries that value, and podsync must read it as "unchanged".
	const spec = `{"name":"test_container","image":"foo/image:v1","command":["/bin/testcmd"],
	  "args":["/bin/sh","-c","echo abc"],"ports":[{"containerPort":8001}],
	  "env":[{"name":"ENV_FOO","value":"bar"}],"resources":{"limits":{"foo":"1G"},"requests":{"foo":"500M"}}}`
	var c corev1.Container
	if err := json.Unmarshal([]byte(spec), &c); err != nil {
		t.Fatal(err)
	}
	if got := Hash(&c); got != 0x8e45cbd0 {
		t.Errorf("Hash = %#x, want 0x8e45cbd0", got)
	}
}

func TestHashStableAndSensitive(t *testing.T) {
	base := corev1.Container{Name: "app", Image: "busybox:1.36", Command: []string{"sh"}}
	tests := []struct {
		name   string
		mutate func(*corev1.Container)
		change bool
	}{
		{"same spec", func(*corev1.Container) {}, false},
		{"image changed", func(c *corev1.Container) { c.Image = "busybox:1.37" }, true},
		{"name changed", func(c *corev1.Container) { c.Name = "other" }, true},
		// Like the kubelet, only name and image count: other fields cannot change in a
		// running pod (resources are resized in place, not by recreating).
		{"args changed", func(c *corev1.Container) { c.Args = []string{"-c", "true"} }, false},
		{"env changed", func(c *corev1.Container) { c.Env = []corev1.EnvVar{{Name: "A", Value: "b"}} }, false},
	}
	want := Hash(&base)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := *base.DeepCopy()
			tt.mutate(&c)
			if got := Hash(&c); (got != want) != tt.change {
				t.Errorf("Hash = %#x, base %#x, want changed=%v", got, want, tt.change)
			}
		})
	}
}
