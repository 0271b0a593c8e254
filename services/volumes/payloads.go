package volumes

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/unitlet/unitlet/services/volumes/atomicwriter"
	"github.com/unitlet/unitlet/services/volumes/projection"
	"github.com/unitlet/unitlet/services/volumes/token"
)

// apiPayloads builds volume files from the API server's objects (read with the node's
// credentials, which the Node authorizer allows for pods bound to this node) and tokens.
type apiPayloads struct {
	client      kubernetes.Interface // nil: standalone
	tokens      *token.Manager
	allocatable corev1.ResourceList
}

func (a *apiPayloads) Payload(ctx context.Context, pod *corev1.Pod, v *corev1.Volume) (map[string]atomicwriter.FileProjection, error) {
	src := projection.Sources{Allocatable: a.allocatable}
	if a.client != nil {
		src.ConfigMaps, src.Secrets = objects{a.client}, objects{a.client}
		src.Tokens = podTokens{a.tokens}
	}
	return projection.VolumePayload(ctx, v, pod, src)
}

// objects reads configMaps and secrets from the API server.
type objects struct{ client kubernetes.Interface }

func (o objects) ConfigMap(ctx context.Context, ns, name string) (*corev1.ConfigMap, error) {
	return o.client.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
}

func (o objects) Secret(ctx context.Context, ns, name string) (*corev1.Secret, error) {
	return o.client.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
}

// podTokens asks for the token of the pod's own service account.
type podTokens struct{ m *token.Manager }

func (t podTokens) Token(ctx context.Context, pod *corev1.Pod, audience string, expirationSeconds int64) ([]byte, error) {
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	b, err := t.m.Token(ctx, pod, sa, audience, expirationSeconds)
	if err != nil {
		return nil, fmt.Errorf("service account token for %s/%s: %w", pod.Namespace, sa, err)
	}
	return b, nil
}
