package podworker

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/unitlet/unitlet/services/podsync/pullcreds"
	"github.com/unitlet/unitlet/services/podsync/pullrecords"
)

// CredentialProviders give the node's own credentials for an image: the kubelet's
// credential provider plugins.
type CredentialProviders interface {
	// Lookup gives the credentials for repo, an image's normalized name without tag or
	// digest (pullcreds.Repository).
	Lookup(ctx context.Context, repo string) []pullcreds.Auth
}

// pullCredentials are the credentials to try, in turn, to pull image for pod, as the
// kubelet's image manager finds them: those of the pod's imagePullSecrets that match the
// image's registry, then the credential providers'. A secret that cannot be read is left
// out with a FailedToRetrieveImagePullSecret warning, and the pull goes on.
func (w *worker) pullCredentials(ctx context.Context, pod *corev1.Pod, image string) ([]pullcreds.Auth, error) {
	repo, err := pullcreds.Repository(image)
	if err != nil {
		return nil, fmt.Errorf("parse image name %q: %w", image, err)
	}
	var secrets []*corev1.Secret
	var missing []string
	for _, ref := range pod.Spec.ImagePullSecrets {
		if ref.Name == "" {
			// The API once let empty names through; the kubelet passes over them quietly.
			continue
		}
		s, err := w.m.o.Objects.Secret(ctx, pod.Namespace, ref.Name)
		if err != nil {
			w.m.o.Log.Info("unable to retrieve an image pull secret; the pull may not succeed", "pod", pod.Namespace+"/"+pod.Name, "secret", ref.Name, "err", err)
			missing = append(missing, ref.Name)
			continue
		}
		secrets = append(secrets, s)
	}
	if len(missing) > 0 {
		w.event(pod, corev1.EventTypeWarning, "FailedToRetrieveImagePullSecret", fmt.Sprintf(
			"Unable to retrieve some image pull secrets (%s); attempting to pull the image may not succeed.", strings.Join(missing, ", ")))
	}
	keyring, err := pullcreds.FromSecrets(secrets)
	if err != nil {
		return nil, err
	}
	creds := keyring.Lookup(repo)
	if w.m.o.CredentialProviders != nil {
		creds = append(creds, w.m.o.CredentialProviders.Lookup(ctx, repo)...)
	}
	return creds, nil
}

// pull pulls spec without credentials when there are none, else with each in turn until
// one succeeds, as the kubelet does (no anonymous try after them); the error then lists
// every attempt's. It returns the image's reference and the credential that pulled it
// (nil: none).
func (w *worker) pull(ctx context.Context, spec *runtimeapi.ImageSpec, sbCfg *runtimeapi.PodSandboxConfig, creds []pullcreds.Auth) (string, *pullcreds.Auth, error) {
	if len(creds) == 0 {
		resp, err := w.m.o.Runtime.PullImage(ctx, &runtimeapi.PullImageRequest{Image: spec, SandboxConfig: sbCfg})
		return resp.GetImageRef(), nil, err
	}
	var errs []string
	for i, c := range creds {
		resp, err := w.m.o.Runtime.PullImage(ctx, &runtimeapi.PullImageRequest{Image: spec, SandboxConfig: sbCfg, Auth: &runtimeapi.AuthConfig{
			Username: c.Username, Password: c.Password, Auth: c.Auth, ServerAddress: c.ServerAddress,
			IdentityToken: c.IdentityToken, RegistryToken: c.RegistryToken,
		}})
		if err == nil {
			return resp.GetImageRef(), &creds[i], nil
		}
		errs = append(errs, err.Error())
	}
	if len(errs) == 1 {
		return "", nil, errors.New(errs[0])
	}
	// As the kubelet's aggregate error reads.
	return "", nil, errors.New("[" + strings.Join(errs, ", ") + "]")
}

// secretsOf are the pull secrets among creds, as the pull records know them: coordinates
// and the credential's hash.
func secretsOf(creds []pullcreds.Auth, err error) ([]kubeletv1beta1.ImagePullSecret, error) {
	if err != nil {
		return nil, err
	}
	var out []kubeletv1beta1.ImagePullSecret
	for _, c := range creds {
		if c.Secret != nil {
			out = append(out, kubeletv1beta1.ImagePullSecret{UID: c.Secret.UID, Namespace: c.Secret.Namespace, Name: c.Secret.Name, CredentialHash: c.Hash()})
		}
	}
	return out, nil
}

// pulledWith is the record of a pull with used: its secret, or node-wide access for no
// credential or the node's own (a credential provider plugin's), as the kubelet records.
func pulledWith(used *pullcreds.Auth) pullrecords.Credential {
	if used == nil || used.Secret == nil {
		return pullrecords.Credential{}
	}
	s := used.Secret
	return pullrecords.Credential{Secret: &kubeletv1beta1.ImagePullSecret{UID: s.UID, Namespace: s.Namespace, Name: s.Name, CredentialHash: used.Hash()}}
}
