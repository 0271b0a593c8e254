package podworker

import (
	"context"
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// secretObjects serves secrets by name; others are not found.
type secretObjects map[string]*corev1.Secret

func (o secretObjects) ConfigMap(_ context.Context, ns, name string) (*corev1.ConfigMap, error) {
	return nil, fmt.Errorf("configmap %s/%s not found", ns, name)
}

func (o secretObjects) Secret(_ context.Context, ns, name string) (*corev1.Secret, error) {
	if s, ok := o[name]; ok {
		return s, nil
	}
	return nil, fmt.Errorf("secrets %q not found", name)
}

func pullSecret(name, user string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: fmt.Appendf(nil, `{"auths": {"docker.io": {"username": %q, "password": "p"}}}`, user)},
	}
}

func TestSyncPullsWithEachMatchingSecretInTurn(t *testing.T) {
	cri := newMemCRI()
	cri.pullUser = "right"
	h := newHarnessOpts(t, cri, func(o *Options) {
		o.Objects = secretObjects{"wrong": pullSecret("wrong", "wrong"), "right": pullSecret("right", "right")}
	})
	pod := syncPod(corev1.RestartPolicyAlways, nil, "app")
	pod.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "missing"}, {Name: "wrong"}, {Name: ""}, {Name: "right"}}
	h.m.Update(pod, "api")
	h.ev.waitFor(t, "app running", func(o Observed) bool { return isRunning(o, "app") })
	if got := cri.callsOf("PullImage"); !slices.Equal(got, []string{"busybox:1", "auth wrong", "busybox:1", "auth right"}) {
		t.Errorf("pulls %v, want busybox:1 with wrong's credential, then right's", got)
	}
	h.ev.mu.Lock()
	defer h.ev.mu.Unlock()
	want := "FailedToRetrieveImagePullSecret: Unable to retrieve some image pull secrets (missing); attempting to pull the image may not succeed."
	if !slices.Contains(h.ev.warnings, want) {
		t.Errorf("warnings %v, want %q", h.ev.warnings, want)
	}
}
