package volumes

import (
	"context"
	"fmt"
	"time"

	"golang.org/x/sync/singleflight"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/unitlet/unitlet/services/volumes/atomicwriter"
	"github.com/unitlet/unitlet/services/volumes/projection"
	"github.com/unitlet/unitlet/services/volumes/token"
	"github.com/unitlet/unitlet/shared/kubeapi"
)

// apiPayloads builds volume files from the API server's objects (read with the node's
// credentials, which the Node authorizer allows for pods bound to this node) and tokens.
type apiPayloads struct {
	client      kubeapi.Interface // nil: standalone
	objects     objects           // the configMaps and secrets of client
	tokens      *token.Manager
	allocatable corev1.ResourceList
}

func (a *apiPayloads) Payload(ctx context.Context, pod *corev1.Pod, v *corev1.Volume) (map[string]atomicwriter.FileProjection, error) {
	src := projection.Sources{Allocatable: a.allocatable}
	if a.client != nil {
		src.ConfigMaps, src.Secrets = &a.objects, &a.objects
		src.Tokens = podTokens{a.tokens}
	}
	return projection.VolumePayload(ctx, v, pod, src)
}

// objects reads configMaps and secrets from the API server. Reads of one object that
// overlap share one GET: every pod of a namespace projects its kube-root-ca.crt configMap,
// and pods started together would otherwise spend the client's rate limit (kubeAPIQPS)
// on the same object. A shared answer is as fresh as each caller's own GET would be, as
// it was asked while each caller waited.
type objects struct {
	client kubeapi.Interface
	reads  singleflight.Group
}

func (o *objects) ConfigMap(ctx context.Context, ns, name string) (*corev1.ConfigMap, error) {
	v, err, _ := o.reads.Do("configmap/"+ns+"/"+name, func() (any, error) {
		ctx, cancel := sharedReadContext(ctx)
		defer cancel()
		return o.client.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
	})
	if err != nil {
		return nil, err
	}
	return v.(*corev1.ConfigMap).DeepCopy(), nil
}

func (o *objects) Secret(ctx context.Context, ns, name string) (*corev1.Secret, error) {
	v, err, _ := o.reads.Do("secret/"+ns+"/"+name, func() (any, error) {
		ctx, cancel := sharedReadContext(ctx)
		defer cancel()
		return o.client.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
	})
	if err != nil {
		return nil, err
	}
	return v.(*corev1.Secret).DeepCopy(), nil
}

// sharedReadContext bounds a read others may share: not by the context of the caller who
// happened to start it (its end must not fail the others), but by sharedReadTimeout.
func sharedReadContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), sharedReadTimeout)
}

// sharedReadTimeout bounds a shared configMap or secret read.
const sharedReadTimeout = 30 * time.Second

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
