package harnesstest

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/unitlet/unitlet/integration/harness"
	podsyncv1 "github.com/unitlet/unitlet/proto/unitlet/podsync/v1"
)

// privateRegistry is the stack's registry; the image it holds is removed from the stack's
// containerd, so that the next pod using it pulls.
func privateRegistry(t *testing.T) *harness.RegistryAccess {
	t.Helper()
	reg, err := stack.Registry()
	if err != nil {
		t.Fatal(err)
	}
	forgetImage(t, reg.Busybox)
	return reg
}

func forgetImage(t *testing.T, image string) {
	t.Helper()
	if err := stack.ForgetImageName(context.Background(), image); err != nil {
		t.Fatal(err)
	}
}

// privatePod runs the registry's busybox, pulled at every start.
func privatePod(name, image string, secrets ...string) *corev1.Pod {
	p := busyboxPod(name, "echo pulled; while true; do sleep 1; done")
	p.Spec.Containers[0].Image = image
	p.Spec.Containers[0].ImagePullPolicy = corev1.PullAlways
	for _, s := range secrets {
		p.Spec.ImagePullSecrets = append(p.Spec.ImagePullSecrets, corev1.LocalObjectReference{Name: s})
	}
	return p
}

func running(_ *podsyncv1.Pod, st corev1.PodStatus) bool {
	return len(st.ContainerStatuses) == 1 && st.ContainerStatuses[0].State.Running != nil
}

// dockerConfigJSON is a kubernetes.io/dockerconfigjson secret with one registry's auth.
func dockerConfigJSON(t *testing.T, name, registry, user, password string) {
	t.Helper()
	auth := base64.StdEncoding.EncodeToString([]byte(user + ":" + password))
	secrets := admin(t).CoreV1().Secrets("default")
	createObject(t, secrets.Create, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name}, Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: fmt.Appendf(nil, `{"auths": {%q: {"auth": %q}}}`, registry, auth)},
	}, secrets.Delete, name)
}

func TestPullSecretsPrivateRegistryRefusesAnonymousPull(t *testing.T) {
	// Serial: removes the registry image the other pull-secret tests pull.
	reg := privateRegistry(t)
	createPod(t, privatePod("private-anonymous", reg.Busybox))
	waitPullRefused(t, "private-anonymous")
}

// waitPullRefused waits for the pod's pull to fail with the registry's 401, and returns
// the pod's events. ErrImagePull lasts until the next sync, which finds the pull backing
// off: either state will do, and the pull's failure is read from its Failed event.
func waitPullRefused(t *testing.T, name string) string {
	t.Helper()
	waitPod(t, time.Minute, "default/"+name, "waiting ErrImagePull or ImagePullBackOff", func(_ *podsyncv1.Pod, st corev1.PodStatus) bool {
		cs := st.ContainerStatuses
		return len(cs) == 1 && cs[0].State.Waiting != nil && (cs[0].State.Waiting.Reason == "ErrImagePull" || cs[0].State.Waiting.Reason == "ImagePullBackOff")
	})
	var evs string
	stack.WaitFor(t, 30*time.Second, "the pull's Failed event", func(ctx context.Context) (bool, string) {
		evs = podEvents(ctx, t, name)
		return strings.Contains(evs, "Failed: Failed to pull image"), evs
	})
	if !strings.Contains(evs, "401") && !strings.Contains(strings.ToLower(evs), "unauthorized") {
		t.Errorf("the pull's Failed event does not carry the registry's 401/unauthorized:\n%s", evs)
	}
	return evs
}

func TestPullSecretsEachMatchingCredentialInTurn(t *testing.T) {
	// Serial: removes the registry image the other pull-secret tests pull.
	reg := privateRegistry(t)
	// A wrong password for the same registry (the older kubernetes.io/dockercfg type, its
	// key a URL with the v1 path old configs carry), then the right one: the pull tries
	// both; a secret that does not exist is warned about and left out.
	secrets := admin(t).CoreV1().Secrets("default")
	createObject(t, secrets.Create, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "registry-wrong"}, Type: corev1.SecretTypeDockercfg,
		Data: map[string][]byte{corev1.DockerConfigKey: fmt.Appendf(nil, `{"https://%s/v1/": {"username": %q, "password": "wrong"}}`, reg.Host, reg.User)},
	}, secrets.Delete, "registry-wrong")
	dockerConfigJSON(t, "registry-right", reg.Host, reg.User, reg.Password)
	// Another registry's credential matches no image here and is not sent.
	dockerConfigJSON(t, "registry-other", "other.example:5000", "x", "y")
	createPod(t, privatePod("private-secret", reg.Busybox, "registry-missing", "registry-wrong", "registry-other", "registry-right"))
	waitPod(t, time.Minute, "default/private-secret", "running", running)
	stack.WaitFor(t, 20*time.Second, "the FailedToRetrieveImagePullSecret event", func(ctx context.Context) (bool, string) {
		evs := podEvents(ctx, t, "private-secret")
		want := "FailedToRetrieveImagePullSecret: Unable to retrieve some image pull secrets (registry-missing); attempting to pull the image may not succeed."
		return strings.Contains(evs, want) && strings.Contains(evs, "Successfully pulled image"), evs
	})
}

func TestPullSecretsFromTheServiceAccount(t *testing.T) {
	// Serial: removes the registry image the other pull-secret tests pull.
	reg := privateRegistry(t)
	dockerConfigJSON(t, "registry-sa", "https://"+reg.Host, reg.User, reg.Password)
	sas := admin(t).CoreV1().ServiceAccounts("default")
	createObject(t, sas.Create, &corev1.ServiceAccount{
		ObjectMeta:       metav1.ObjectMeta{Name: "puller"},
		ImagePullSecrets: []corev1.LocalObjectReference{{Name: "registry-sa"}},
	}, sas.Delete, "puller")
	p := privatePod("private-sa", reg.Busybox)
	p.Spec.ServiceAccountName = "puller"
	created := createPod(t, p)
	// The API server's ServiceAccount admission copies the account's pull secrets.
	if got := created.Spec.ImagePullSecrets; len(got) != 1 || got[0].Name != "registry-sa" {
		t.Fatalf("the created pod's imagePullSecrets %v, want the service account's [registry-sa]", got)
	}
	waitPod(t, time.Minute, "default/private-sa", "running", running)
}

// ensureSecretPulledImages: once a pod pulled the private image with its secret, a pod
// without the secret does not get the image for free with IfNotPresent (it pulls and the
// registry refuses it), nor with Never (told the image is absent); a pod whose own secret
// holds the same credential uses the present image without a pull.
func TestPullSecretsAPulledPrivateImageIsNotFreeForOtherPods(t *testing.T) {
	// Serial: needs the registry image to stay present (the others remove it).
	reg := privateRegistry(t)
	dockerConfigJSON(t, "registry-owner", reg.Host, reg.User, reg.Password)
	dockerConfigJSON(t, "registry-friend", reg.Host, reg.User, reg.Password)
	ifNotPresent := func(name string, secrets ...string) *corev1.Pod {
		p := privatePod(name, reg.Busybox, secrets...)
		p.Spec.Containers[0].ImagePullPolicy = corev1.PullIfNotPresent
		return p
	}
	createPod(t, ifNotPresent("private-owner", "registry-owner"))
	waitPod(t, time.Minute, "default/private-owner", "running", running)

	createPod(t, ifNotPresent("private-thief"))
	evs := waitPullRefused(t, "private-thief")
	if strings.Contains(evs, "already present") {
		t.Errorf("the pod without the secret was given the present image:\n%s", evs)
	}

	never := ifNotPresent("private-never")
	never.Spec.Containers[0].ImagePullPolicy = corev1.PullNever
	createPod(t, never)
	waitPod(t, time.Minute, "default/private-never", "waiting ErrImageNeverPull", func(_ *podsyncv1.Pod, st corev1.PodStatus) bool {
		cs := st.ContainerStatuses
		return len(cs) == 1 && cs[0].State.Waiting != nil && cs[0].State.Waiting.Reason == "ErrImageNeverPull" &&
			strings.Contains(cs[0].State.Waiting.Message, "is not present with pull policy of Never")
	})

	createPod(t, ifNotPresent("private-friend", "registry-friend"))
	waitPod(t, time.Minute, "default/private-friend", "running", running)
	stack.WaitFor(t, 20*time.Second, "the friend's Pulled event", func(ctx context.Context) (bool, string) {
		evs := podEvents(ctx, t, "private-friend")
		return strings.Contains(evs, "already present on machine and can be accessed by the pod"), evs
	})
	if evs := podEvents(context.Background(), t, "private-friend"); strings.Contains(evs, "Pulling image") {
		t.Errorf("the pod whose secret holds the pulling credential pulled again:\n%s", evs)
	}
}
