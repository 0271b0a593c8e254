package projection

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func ptr[T any](v T) *T { return &v }

// fakeAPI serves configMaps, secrets and tokens from maps and records token requests.
type fakeAPI struct {
	configMaps map[string]*corev1.ConfigMap
	secrets    map[string]*corev1.Secret
	tokenErr   error
	requests   []tokenRequest
}

type tokenRequest struct {
	pod        string
	audience   string
	expiration int64
}

func (f *fakeAPI) ConfigMap(_ context.Context, namespace, name string) (*corev1.ConfigMap, error) {
	if cm, ok := f.configMaps[namespace+"/"+name]; ok {
		return cm, nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, name)
}

func (f *fakeAPI) Secret(_ context.Context, namespace, name string) (*corev1.Secret, error) {
	if s, ok := f.secrets[namespace+"/"+name]; ok {
		return s, nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, name)
}

func (f *fakeAPI) Token(_ context.Context, pod *corev1.Pod, audience string, expirationSeconds int64) ([]byte, error) {
	f.requests = append(f.requests, tokenRequest{pod: pod.Namespace + "/" + pod.Name, audience: audience, expiration: expirationSeconds})
	if f.tokenErr != nil {
		return nil, f.tokenErr
	}
	return []byte("token-for-" + pod.Name + "-" + audience), nil
}

func (f *fakeAPI) sources() Sources {
	return Sources{ConfigMaps: f, Secrets: f, Tokens: f, Allocatable: corev1.ResourceList{
		corev1.ResourceCPU:              resource.MustParse("4"),
		corev1.ResourceMemory:           resource.MustParse("8Gi"),
		corev1.ResourceEphemeralStorage: resource.MustParse("100Gi"),
	}}
}

func newAPI() *fakeAPI {
	return &fakeAPI{
		configMaps: map[string]*corev1.ConfigMap{
			"default/app": {
				ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "app"},
				Data:       map[string]string{"config.yaml": "a: 1\n", "other": "o"},
				BinaryData: map[string][]byte{"blob": {0, 1, 2}},
			},
			"default/kube-root-ca.crt": {
				ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "kube-root-ca.crt"},
				Data:       map[string]string{"ca.crt": "CA PEM"},
			},
		},
		secrets: map[string]*corev1.Secret{
			"default/creds": {
				ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "creds"},
				Data:       map[string][]byte{"username": []byte("admin"), "password": []byte("hunter2")},
			},
		},
	}
}

func testPod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "default", Name: "web", UID: "1234-5678",
			Labels:      map[string]string{"app": "web", "tier": "front"},
			Annotations: map[string]string{"note": "say \"hi\"\nbye", "a.io/x": "1"},
		},
		Spec: corev1.PodSpec{
			ServiceAccountName: "default",
			Containers: []corev1.Container{{
				Name: "main",
				Resources: corev1.ResourceRequirements{
					Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1500m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("32Mi")},
				},
			}},
			InitContainers: []corev1.Container{{Name: "init"}},
		},
	}
}

func files(p Payload) map[string]string {
	out := make(map[string]string, len(p))
	for k, v := range p {
		out[k] = string(v.Data)
	}
	return out
}

func expectFiles(t *testing.T, got Payload, want map[string]string) {
	t.Helper()
	g := files(got)
	if len(g) != len(want) {
		t.Errorf("payload has %d files %v, want %d %v", len(g), g, len(want), want)
	}
	for k, v := range want {
		if gv, ok := g[k]; !ok || gv != v {
			t.Errorf("file %q = %q (present %v), want %q", k, gv, ok, v)
		}
	}
}

func expectMode(t *testing.T, got Payload, p string, mode int32) {
	t.Helper()
	f, ok := got[p]
	if !ok {
		t.Errorf("no file %q", p)
		return
	}
	if f.Mode != mode {
		t.Errorf("file %q mode %#o, want %#o", p, f.Mode, mode)
	}
}

func TestConfigMapAllKeys(t *testing.T) {
	cm := newAPI().configMaps["default/app"]
	got, err := ConfigMapPayload(&corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "app"}}, cm, DefaultMode)
	if err != nil {
		t.Fatal(err)
	}
	expectFiles(t, got, map[string]string{"config.yaml": "a: 1\n", "other": "o", "blob": "\x00\x01\x02"})
	for p := range got {
		expectMode(t, got, p, 0o644)
	}
	got, err = ConfigMapPayload(&corev1.ConfigMapVolumeSource{DefaultMode: ptr(int32(0o400))}, cm, DefaultMode)
	if err != nil {
		t.Fatal(err)
	}
	expectMode(t, got, "other", 0o400)
}

func TestConfigMapItems(t *testing.T) {
	cm := newAPI().configMaps["default/app"]
	source := &corev1.ConfigMapVolumeSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: "app"},
		DefaultMode:          ptr(int32(0o440)),
		Items: []corev1.KeyToPath{
			{Key: "config.yaml", Path: "etc/app.yaml", Mode: ptr(int32(0o600))},
			{Key: "blob", Path: "bin/blob"},
		},
	}
	got, err := ConfigMapPayload(source, cm, DefaultMode)
	if err != nil {
		t.Fatal(err)
	}
	expectFiles(t, got, map[string]string{"etc/app.yaml": "a: 1\n", "bin/blob": "\x00\x01\x02"})
	expectMode(t, got, "etc/app.yaml", 0o600)
	expectMode(t, got, "bin/blob", 0o440)

	source.Items = append(source.Items, corev1.KeyToPath{Key: "absent", Path: "absent"})
	_, err = ConfigMapPayload(source, cm, DefaultMode)
	var missing *ErrObjectMissing
	if !errors.As(err, &missing) || missing.Key != "absent" || missing.Name != "app" || missing.Kind != "ConfigMap" {
		t.Fatalf("missing key gave %v, want ErrObjectMissing for key absent", err)
	}
	if !strings.Contains(err.Error(), `configMap default/app has no key "absent"`) {
		t.Errorf("error %q", err)
	}

	source.Optional = ptr(true)
	got, err = ConfigMapPayload(source, cm, DefaultMode)
	if err != nil {
		t.Fatalf("optional configMap with a missing key: %v", err)
	}
	expectFiles(t, got, map[string]string{"etc/app.yaml": "a: 1\n", "bin/blob": "\x00\x01\x02"})
}

func TestConfigMapMissingObject(t *testing.T) {
	source := &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "gone"}}
	_, err := ConfigMapPayload(source, nil, DefaultMode)
	var missing *ErrObjectMissing
	if !errors.As(err, &missing) || missing.Key != "" || missing.Name != "gone" {
		t.Fatalf("missing configMap gave %v, want ErrObjectMissing", err)
	}
	source.Optional = ptr(true)
	got, err := ConfigMapPayload(source, nil, DefaultMode)
	if err != nil || len(got) != 0 {
		t.Fatalf("optional missing configMap gave %v, %v; want an empty payload", got, err)
	}
}

func TestSecretPayload(t *testing.T) {
	secret := newAPI().secrets["default/creds"]
	got, err := SecretPayload(&corev1.SecretVolumeSource{SecretName: "creds"}, secret, DefaultMode)
	if err != nil {
		t.Fatal(err)
	}
	expectFiles(t, got, map[string]string{"username": "admin", "password": "hunter2"})
	expectMode(t, got, "password", 0o644)

	source := &corev1.SecretVolumeSource{
		SecretName:  "creds",
		DefaultMode: ptr(int32(0o400)),
		Items:       []corev1.KeyToPath{{Key: "password", Path: "db/pass"}, {Key: "username", Path: "user", Mode: ptr(int32(0o444))}},
	}
	got, err = SecretPayload(source, secret, DefaultMode)
	if err != nil {
		t.Fatal(err)
	}
	expectFiles(t, got, map[string]string{"db/pass": "hunter2", "user": "admin"})
	expectMode(t, got, "db/pass", 0o400)
	expectMode(t, got, "user", 0o444)

	source.Items = append(source.Items, corev1.KeyToPath{Key: "token", Path: "token"})
	_, err = SecretPayload(source, secret, DefaultMode)
	var missing *ErrObjectMissing
	if !errors.As(err, &missing) || missing.Kind != "Secret" || missing.Key != "token" {
		t.Fatalf("missing secret key gave %v", err)
	}
	if strings.Contains(err.Error(), "hunter2") {
		t.Fatal("error carries secret data")
	}
	_, err = SecretPayload(&corev1.SecretVolumeSource{SecretName: "nope"}, nil, DefaultMode)
	if !errors.As(err, &missing) {
		t.Fatalf("missing secret gave %v", err)
	}
}

func TestVolumePayloadFetchesAndAppliesFSGroup(t *testing.T) {
	api := newAPI()
	pod := testPod()
	pod.Spec.SecurityContext = &corev1.PodSecurityContext{FSGroup: ptr(int64(2000))}

	vol := &corev1.Volume{Name: "creds", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
		SecretName: "creds",
		Items: []corev1.KeyToPath{
			{Key: "password", Path: "pass", Mode: ptr(int32(0o400))},
			{Key: "username", Path: "user", Mode: ptr(int32(0o600))},
		},
	}}}
	got, err := VolumePayload(context.Background(), vol, pod, api.sources())
	if err != nil {
		t.Fatal(err)
	}
	expectMode(t, got, "pass", 0o440)
	expectMode(t, got, "user", 0o640)
	for p, f := range got {
		if f.FsGroup == nil || *f.FsGroup != 2000 {
			t.Errorf("%s: group %v, want 2000", p, f.FsGroup)
		}
		if f.FsUser != nil {
			t.Errorf("%s: owner %d, want none for a secret file", p, *f.FsUser)
		}
	}

	// Without fsGroup modes are as given and no group is set.
	pod.Spec.SecurityContext = nil
	got, err = VolumePayload(context.Background(), vol, pod, api.sources())
	if err != nil {
		t.Fatal(err)
	}
	expectMode(t, got, "pass", 0o400)
	if got["pass"].FsGroup != nil {
		t.Error("group set without fsGroup")
	}

	// A missing configMap is an ErrObjectMissing naming the namespace, wrapped with the volume.
	vol = &corev1.Volume{Name: "cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: "later"},
	}}}
	_, err = VolumePayload(context.Background(), vol, pod, api.sources())
	var missing *ErrObjectMissing
	if !errors.As(err, &missing) || missing.Namespace != "default" || missing.Name != "later" {
		t.Fatalf("missing configMap gave %v", err)
	}
	if !strings.Contains(err.Error(), `volume "cfg": configMap default/later not found`) {
		t.Errorf("error %q", err)
	}
	// It appears: the same call now succeeds.
	api.configMaps["default/later"] = &corev1.ConfigMap{Data: map[string]string{"k": "v"}}
	got, err = VolumePayload(context.Background(), vol, pod, api.sources())
	if err != nil {
		t.Fatal(err)
	}
	expectFiles(t, got, map[string]string{"k": "v"})

	if _, err := VolumePayload(context.Background(), &corev1.Volume{Name: "x", VolumeSource: corev1.VolumeSource{
		EmptyDir: &corev1.EmptyDirVolumeSource{}}}, pod, api.sources()); err == nil {
		t.Error("emptyDir accepted by VolumePayload")
	}

	// Other API errors are not "missing".
	_, err = VolumePayload(context.Background(), vol, pod, Sources{ConfigMaps: failingGetter{}})
	if err == nil || errors.As(err, &missing) || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("API failure gave %v, want a plain error", err)
	}
}

type failingGetter struct{}

func (failingGetter) ConfigMap(context.Context, string, string) (*corev1.ConfigMap, error) {
	return nil, errors.New("connection refused")
}

// The volume the API server adds to every pod as kube-api-access-*.
func kubeAPIAccess() *corev1.ProjectedVolumeSource {
	return &corev1.ProjectedVolumeSource{
		DefaultMode: ptr(int32(0o644)),
		Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr(int64(3607))}},
			{ConfigMap: &corev1.ConfigMapProjection{
				LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"},
				Items:                []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}},
			}},
			{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{
				{Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}},
			}}},
		},
	}
}

func TestProjectedKubeAPIAccess(t *testing.T) {
	api := newAPI()
	pod := testPod()
	got, err := ProjectedPayload(context.Background(), kubeAPIAccess(), pod, api.sources())
	if err != nil {
		t.Fatal(err)
	}
	expectFiles(t, got, map[string]string{"token": "token-for-web-", "ca.crt": "CA PEM", "namespace": "default"})
	for p := range got {
		expectMode(t, got, p, 0o644)
	}
	if got["token"].FsUser != nil {
		t.Error("token owned by a user though the containers name none")
	}
	if len(api.requests) != 1 || api.requests[0] != (tokenRequest{pod: "default/web", audience: "", expiration: 3607}) {
		t.Errorf("token requests %+v", api.requests)
	}
}

func TestProjectedTokenOwnerAndMode(t *testing.T) {
	api := newAPI()
	pod := testPod()
	pod.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: ptr(int64(1000)), FSGroup: ptr(int64(3000))}
	source := &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
		{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "vault/token", Audience: "vault"}},
		{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "creds"},
			Items: []corev1.KeyToPath{{Key: "password", Path: "pw", Mode: ptr(int32(0o400))}}}},
	}}
	vol := &corev1.Volume{Name: "p", VolumeSource: corev1.VolumeSource{Projected: source}}
	got, err := VolumePayload(context.Background(), vol, pod, api.sources())
	if err != nil {
		t.Fatal(err)
	}
	tok := got["vault/token"]
	if string(tok.Data) != "token-for-web-vault" {
		t.Errorf("token %q", tok.Data)
	}
	// 0600 for a token of a pod with a user or fsGroup, then group read for fsGroup.
	expectMode(t, got, "vault/token", 0o640)
	expectMode(t, got, "pw", 0o440)
	if tok.FsUser == nil || *tok.FsUser != 1000 {
		t.Errorf("token owner %v, want 1000", tok.FsUser)
	}
	if got["pw"].FsUser != nil {
		t.Error("secret file of a projected volume owned by the user")
	}
	if api.requests[0].expiration != 3600 || api.requests[0].audience != "vault" {
		t.Errorf("token request %+v, want audience vault and the default 3600 s", api.requests[0])
	}
}

func TestProjectedErrors(t *testing.T) {
	api := newAPI()
	api.tokenErr = errors.New("token request refused")
	source := &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
		{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}},
		{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "absent"}}},
		{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "absent-ok"}, Optional: ptr(true)}},
		{ClusterTrustBundle: &corev1.ClusterTrustBundleProjection{Path: "bundle", Name: ptr("b")}},
	}}
	_, err := ProjectedPayload(context.Background(), source, testPod(), api.sources())
	if err == nil {
		t.Fatal("no error")
	}
	msg := err.Error()
	for _, want := range []string{"projected source 0", "token request refused", "projected source 1", "configMap default/absent not found", "projected source 3: clusterTrustBundle projections are not supported"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not say %q", msg, want)
		}
	}
	if strings.Contains(msg, "source 2") {
		t.Errorf("optional missing configMap reported: %q", msg)
	}
	var missing *ErrObjectMissing
	if !errors.As(err, &missing) || missing.Name != "absent" {
		t.Errorf("joined error hides the ErrObjectMissing: %v", err)
	}
}

func TestFsUser(t *testing.T) {
	pod := testPod()
	if FsUser(pod) != nil {
		t.Error("user found though no container names one")
	}
	pod.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: ptr(int64(10))}
	if u := FsUser(pod); u == nil || *u != 10 {
		t.Errorf("pod-level user gave %v, want 10", u)
	}
	pod.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{RunAsUser: ptr(int64(11))}
	if u := FsUser(pod); u != nil {
		t.Errorf("containers running as 10 and 11 gave %v, want none", *u)
	}
	pod.Spec.InitContainers[0].SecurityContext = &corev1.SecurityContext{RunAsUser: ptr(int64(11))}
	if u := FsUser(pod); u == nil || *u != 11 {
		t.Errorf("all containers as 11 gave %v", u)
	}
}
