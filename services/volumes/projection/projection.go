// Package projection builds the files of configMap, secret, downwardAPI and projected
// volumes (the payload an atomicwriter.Writer writes) from the pod spec and the API
// objects, with the kubelet's rules for keys, items, modes, optional sources and owners.
//
// Modes: a file gets its item's mode, else the volume's defaultMode, else 0644 (the
// API's default). A projected service-account token gets 0600 instead of the default
// when the pod has an fsGroup or all its containers run as one user, and that user owns
// it. With an fsGroup (ApplyFSGroup, done by VolumePayload) every file belongs to that
// group and gains group read (mode |= 0440, so 0400 becomes 0440 and 0600 becomes 0640),
// as the kubelet does for these read-only volumes.
//
// A missing object or key that the pod does not mark optional is an *ErrObjectMissing:
// the pod waits with an event and the volume is retried, as with the kubelet.
package projection

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/unitlet/unitlet/services/volumes/atomicwriter"
)

// DefaultMode is the file mode the API gives configMap, secret, downwardAPI and projected
// volumes without a defaultMode.
const DefaultMode int32 = 0o644

// defaultTokenExpirationSeconds is the API's default for a serviceAccountToken projection.
const defaultTokenExpirationSeconds int64 = 3600

// Payload is the files of one volume keyed by path relative to the volume.
type Payload = map[string]atomicwriter.FileProjection

// ErrObjectMissing reports a configMap or secret, or a key of one, that a volume needs
// and that does not exist. Key is empty when the whole object is missing.
type ErrObjectMissing struct {
	Kind      string // "ConfigMap" or "Secret"
	Namespace string
	Name      string
	Key       string
}

func (e *ErrObjectMissing) Error() string {
	obj := e.Name
	if e.Namespace != "" {
		obj = e.Namespace + "/" + e.Name
	}
	kind := strings.ToLower(e.Kind[:1]) + e.Kind[1:]
	if e.Key != "" {
		return fmt.Sprintf("%s %s has no key %q", kind, obj, e.Key)
	}
	return fmt.Sprintf("%s %s not found", kind, obj)
}

// ConfigMapGetter reads a configMap; a missing one is an error for which
// apierrors.IsNotFound holds (as client-go and listers return).
type ConfigMapGetter interface {
	ConfigMap(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error)
}

// SecretGetter reads a secret; a missing one is an apierrors.IsNotFound error.
type SecretGetter interface {
	Secret(ctx context.Context, namespace, name string) (*corev1.Secret, error)
}

// TokenGetter returns a service-account token for the pod's service account, bound to
// the pod, for audience ("" for the API server's) valid for expirationSeconds.
type TokenGetter interface {
	Token(ctx context.Context, pod *corev1.Pod, audience string, expirationSeconds int64) ([]byte, error)
}

// Sources is where volume content comes from. A field may be nil when no volume needs it.
type Sources struct {
	ConfigMaps ConfigMapGetter
	Secrets    SecretGetter
	Tokens     TokenGetter
	// Allocatable is the node's allocatable resources: the value of a resourceFieldRef
	// limit the container does not set.
	Allocatable corev1.ResourceList
}

// VolumePayload builds the files of a configMap, secret, downwardAPI or projected volume
// of pod, fetching objects from src, with the pod's fsGroup applied.
func VolumePayload(ctx context.Context, vol *corev1.Volume, pod *corev1.Pod, src Sources) (Payload, error) {
	var payload Payload
	var err error
	switch {
	case vol.ConfigMap != nil:
		payload, err = fetchConfigMap(ctx, src, pod.Namespace, vol.ConfigMap.Name, vol.ConfigMap.Items,
			modeOr(vol.ConfigMap.DefaultMode, DefaultMode), isTrue(vol.ConfigMap.Optional))
	case vol.Secret != nil:
		payload, err = fetchSecret(ctx, src, pod.Namespace, vol.Secret.SecretName, vol.Secret.Items,
			modeOr(vol.Secret.DefaultMode, DefaultMode), isTrue(vol.Secret.Optional))
	case vol.DownwardAPI != nil:
		payload, err = DownwardAPIPayload(vol.DownwardAPI, pod, src.Allocatable, DefaultMode)
	case vol.Projected != nil:
		payload, err = ProjectedPayload(ctx, vol.Projected, pod, src)
	default:
		return nil, fmt.Errorf("volume %q is not a configMap, secret, downwardAPI or projected volume", vol.Name)
	}
	if err != nil {
		return nil, fmt.Errorf("volume %q: %w", vol.Name, err)
	}
	ApplyFSGroup(payload, fsGroupOf(pod))
	return payload, nil
}

// ApplyFSGroup gives every file of payload the group fsGroup and group read (mode |=
// 0440). It does nothing when fsGroup is nil.
func ApplyFSGroup(payload Payload, fsGroup *int64) {
	if fsGroup == nil {
		return
	}
	for p, f := range payload {
		g := *fsGroup
		f.FsGroup = &g
		f.Mode |= 0o440
		payload[p] = f
	}
}

// FsUser returns the uid all the pod's containers (init, regular and ephemeral) run as,
// or nil when one does not say or they differ: the owner of projected tokens.
func FsUser(pod *corev1.Pod) *int64 {
	var podUser *int64
	if pod.Spec.SecurityContext != nil {
		podUser = pod.Spec.SecurityContext.RunAsUser
	}
	var users []*int64
	effective := func(sc *corev1.SecurityContext) *int64 {
		if sc != nil && sc.RunAsUser != nil {
			return sc.RunAsUser
		}
		return podUser
	}
	for i := range pod.Spec.InitContainers {
		users = append(users, effective(pod.Spec.InitContainers[i].SecurityContext))
	}
	for i := range pod.Spec.Containers {
		users = append(users, effective(pod.Spec.Containers[i].SecurityContext))
	}
	for i := range pod.Spec.EphemeralContainers {
		users = append(users, effective(pod.Spec.EphemeralContainers[i].SecurityContext))
	}
	var uid *int64
	for _, u := range users {
		if u == nil || (uid != nil && *uid != *u) {
			return nil
		}
		uid = u
	}
	if uid == nil {
		return nil
	}
	v := *uid
	return &v
}

func fsGroupOf(pod *corev1.Pod) *int64 {
	if pod.Spec.SecurityContext == nil {
		return nil
	}
	return pod.Spec.SecurityContext.FSGroup
}

// ConfigMapPayload builds the files of a configMap volume from cm (nil when it does not
// exist): every key of data and binaryData, or the items' keys at their paths. A file's
// mode is its item's mode, else source.defaultMode, else defaultMode (pass DefaultMode).
func ConfigMapPayload(source *corev1.ConfigMapVolumeSource, cm *corev1.ConfigMap, defaultMode int32) (Payload, error) {
	return configMapFiles("", source.Name, source.Items, cm, modeOr(source.DefaultMode, defaultMode), isTrue(source.Optional))
}

// SecretPayload builds the files of a secret volume from secret (nil when it does not
// exist), with the rules of ConfigMapPayload.
func SecretPayload(source *corev1.SecretVolumeSource, secret *corev1.Secret, defaultMode int32) (Payload, error) {
	return secretFiles("", source.SecretName, source.Items, secret, modeOr(source.DefaultMode, defaultMode), isTrue(source.Optional))
}

func configMapFiles(namespace, name string, items []corev1.KeyToPath, cm *corev1.ConfigMap, mode int32, optional bool) (Payload, error) {
	if cm == nil {
		if optional {
			return Payload{}, nil
		}
		return nil, &ErrObjectMissing{Kind: "ConfigMap", Namespace: namespace, Name: name}
	}
	if namespace == "" {
		namespace = cm.Namespace
	}
	lookup := func(key string) ([]byte, bool) {
		if s, ok := cm.Data[key]; ok {
			return []byte(s), true
		}
		b, ok := cm.BinaryData[key]
		return b, ok
	}
	keys := make([]string, 0, len(cm.Data)+len(cm.BinaryData))
	for k := range cm.Data {
		keys = append(keys, k)
	}
	for k := range cm.BinaryData {
		keys = append(keys, k)
	}
	return keyFiles("ConfigMap", namespace, name, items, keys, lookup, mode, optional)
}

func secretFiles(namespace, name string, items []corev1.KeyToPath, secret *corev1.Secret, mode int32, optional bool) (Payload, error) {
	if secret == nil {
		if optional {
			return Payload{}, nil
		}
		return nil, &ErrObjectMissing{Kind: "Secret", Namespace: namespace, Name: name}
	}
	if namespace == "" {
		namespace = secret.Namespace
	}
	lookup := func(key string) ([]byte, bool) {
		b, ok := secret.Data[key]
		return b, ok
	}
	keys := make([]string, 0, len(secret.Data))
	for k := range secret.Data {
		keys = append(keys, k)
	}
	return keyFiles("Secret", namespace, name, items, keys, lookup, mode, optional)
}

// keyFiles maps an object's keys to files: all keys at their own names, or the items.
func keyFiles(kind, namespace, name string, items []corev1.KeyToPath, keys []string,
	lookup func(string) ([]byte, bool), mode int32, optional bool) (Payload, error) {
	payload := make(Payload)
	if len(items) == 0 {
		for _, k := range keys {
			data, _ := lookup(k)
			payload[k] = atomicwriter.FileProjection{Data: data, Mode: mode}
		}
		return payload, nil
	}
	for _, item := range items {
		data, ok := lookup(item.Key)
		if !ok {
			if optional {
				continue
			}
			return nil, &ErrObjectMissing{Kind: kind, Namespace: namespace, Name: name, Key: item.Key}
		}
		payload[item.Path] = atomicwriter.FileProjection{Data: data, Mode: modeOr(item.Mode, mode)}
	}
	return payload, nil
}

func fetchConfigMap(ctx context.Context, src Sources, namespace, name string, items []corev1.KeyToPath, mode int32, optional bool) (Payload, error) {
	if src.ConfigMaps == nil {
		return nil, fmt.Errorf("configMap %s/%s: no configMap source", namespace, name)
	}
	cm, err := src.ConfigMaps.ConfigMap(ctx, namespace, name)
	if apierrors.IsNotFound(err) {
		cm, err = nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get configMap %s/%s: %w", namespace, name, err)
	}
	return configMapFiles(namespace, name, items, cm, mode, optional)
}

func fetchSecret(ctx context.Context, src Sources, namespace, name string, items []corev1.KeyToPath, mode int32, optional bool) (Payload, error) {
	if src.Secrets == nil {
		return nil, fmt.Errorf("secret %s/%s: no secret source", namespace, name)
	}
	secret, err := src.Secrets.Secret(ctx, namespace, name)
	if apierrors.IsNotFound(err) {
		secret, err = nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get secret %s/%s: %w", namespace, name, err)
	}
	return secretFiles(namespace, name, items, secret, mode, optional)
}

// ProjectedPayload builds the files of a projected volume from its sources, in order (a
// later source's file wins a path). Every source is tried; the errors of all failing
// sources are joined. clusterTrustBundle and podCertificate sources are refused.
func ProjectedPayload(ctx context.Context, source *corev1.ProjectedVolumeSource, pod *corev1.Pod, src Sources) (Payload, error) {
	mode := modeOr(source.DefaultMode, DefaultMode)
	fsUser := FsUser(pod)
	tokenMode := mode
	if fsUser != nil || fsGroupOf(pod) != nil {
		tokenMode = 0o600
	}

	payload := make(Payload)
	var errs []error
	for i, s := range source.Sources {
		var part Payload
		var err error
		switch {
		case s.ConfigMap != nil:
			part, err = fetchConfigMap(ctx, src, pod.Namespace, s.ConfigMap.Name, s.ConfigMap.Items, mode, isTrue(s.ConfigMap.Optional))
		case s.Secret != nil:
			part, err = fetchSecret(ctx, src, pod.Namespace, s.Secret.Name, s.Secret.Items, mode, isTrue(s.Secret.Optional))
		case s.DownwardAPI != nil:
			part, err = downwardAPIFiles(s.DownwardAPI.Items, pod, src.Allocatable, mode)
		case s.ServiceAccountToken != nil:
			part, err = tokenFile(ctx, src, s.ServiceAccountToken, pod, tokenMode, fsUser)
		case s.ClusterTrustBundle != nil:
			err = errors.New("clusterTrustBundle projections are not supported by unitlet")
		case s.PodCertificate != nil:
			err = errors.New("podCertificate projections are not supported by unitlet")
		default:
			err = errors.New("names no source")
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("projected source %d: %w", i, err))
			continue
		}
		for p, f := range part {
			payload[p] = f
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return payload, nil
}

func tokenFile(ctx context.Context, src Sources, tp *corev1.ServiceAccountTokenProjection, pod *corev1.Pod, mode int32, fsUser *int64) (Payload, error) {
	if src.Tokens == nil {
		return nil, errors.New("serviceAccountToken: no token source")
	}
	expiration := defaultTokenExpirationSeconds
	if tp.ExpirationSeconds != nil {
		expiration = *tp.ExpirationSeconds
	}
	token, err := src.Tokens.Token(ctx, pod, tp.Audience, expiration)
	if err != nil {
		return nil, fmt.Errorf("request token of service account %s/%s: %w", pod.Namespace, pod.Spec.ServiceAccountName, err)
	}
	return Payload{tp.Path: {Data: token, Mode: mode, FsUser: fsUser}}, nil
}

func modeOr(mode *int32, fallback int32) int32 {
	if mode != nil {
		return *mode
	}
	return fallback
}

func isTrue(b *bool) bool { return b != nil && *b }
