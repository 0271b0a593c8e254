package podworker

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/unitlet/unitlet/services/podsync/pullrecords"
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

// A private image another pod pulled is not handed to a pod without the secret: it must
// pull (and fails with the registry's refusal), and with pull policy Never it is told the
// image is absent. A pod with the same secret uses the image without a pull.
func TestAPulledPrivateImageNeedsThePodsOwnCredentials(t *testing.T) {
	cri := newMemCRI()
	cri.pullUser = "right"
	policy, err := pullrecords.NewPolicy(kubeletv1beta1.NeverVerifyPreloadedImages, nil)
	if err != nil {
		t.Fatal(err)
	}
	records, err := pullrecords.Open(t.TempDir(), policy, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	h := newHarnessOpts(t, cri, func(o *Options) {
		o.Objects = secretObjects{"right": pullSecret("right", "right")}
		o.PullRecords = records
	})
	owner := syncPod(corev1.RestartPolicyAlways, nil, "owner")
	owner.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "right"}}
	h.m.Update(owner, "api")
	h.ev.waitFor(t, "owner running", func(o Observed) bool { return isRunning(o, "owner") })

	thief := syncPod(corev1.RestartPolicyAlways, nil, "thief")
	h.m.Update(thief, "api")
	h.ev.waitFor(t, "the thief told to pull", func(o Observed) bool {
		w := statusOf(o, "thief").State.Waiting
		return w != nil && w.Reason == "ErrImagePull" && strings.Contains(w.Message, "401 Unauthorized")
	})

	never := syncPod(corev1.RestartPolicyAlways, nil, "never")
	never.Spec.Containers[0].ImagePullPolicy = corev1.PullNever
	h.m.Update(never, "api")
	h.ev.waitFor(t, "the Never pod told the image is absent", func(o Observed) bool {
		w := statusOf(o, "never").State.Waiting
		return w != nil && w.Reason == "ErrImageNeverPull" && w.Message == `Container image "busybox:1" is not present with pull policy of Never`
	})

	friend := syncPod(corev1.RestartPolicyAlways, nil, "friend")
	friend.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "right"}}
	pullsBefore := len(cri.callsOf("PullImage"))
	h.m.Update(friend, "api")
	h.ev.waitFor(t, "friend running", func(o Observed) bool { return isRunning(o, "friend") })
	pullsAfter := len(cri.callsOf("PullImage"))
	if pullsAfter != pullsBefore {
		t.Errorf("the pod with the pulling secret pulled again: %v", cri.callsOf("PullImage")[pullsBefore:])
	}
	h.ev.mu.Lock()
	defer h.ev.mu.Unlock()
	want := `Pulled: Container image "busybox:1" already present on machine and can be accessed by the pod`
	if !slices.Contains(h.ev.recorded, want) {
		t.Errorf("events %v, want %q", h.ev.recorded, want)
	}
}
