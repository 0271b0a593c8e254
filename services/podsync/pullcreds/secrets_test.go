package pullcreds

import (
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func secret(name string, typ corev1.SecretType, key, value string) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Type: typ, Data: map[string][]byte{key: []byte(value)}}
}

func TestFromSecrets(t *testing.T) {
	k, err := FromSecrets([]*corev1.Secret{
		// auth wins over username and password; unpadded base64 is accepted.
		secret("json", corev1.SecretTypeDockerConfigJson, corev1.DockerConfigJsonKey,
			`{"auths": {"r.example": {"username": "ignored", "auth": "dTE6cDE"}}}`),
		secret("cfg", corev1.SecretTypeDockercfg, corev1.DockerConfigKey,
			`{"https://r.example/v1/": {"username": "u2", "password": "p2"}}`),
		// The wrong type for its key: the kubelet uses neither.
		secret("opaque", corev1.SecretTypeOpaque, corev1.DockerConfigJsonKey, `{"auths": {"r.example": {"username": "u3"}}}`),
		secret("mismatch", corev1.SecretTypeDockercfg, corev1.DockerConfigJsonKey, `{"auths": {"r.example": {"username": "u4"}}}`),
	})
	if err != nil {
		t.Fatal(err)
	}
	got := k.Lookup("r.example/app")
	want := []Auth{
		{Username: "u1", Password: "p1", Secret: &SecretSource{Namespace: "ns", Name: "json"}},
		{Username: "u2", Password: "p2", Secret: &SecretSource{Namespace: "ns", Name: "cfg"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Lookup = %+v, want u1/p1 from ns/json then u2/p2 from ns/cfg", got)
	}
}

// The hash is the kubelet's: a record it wrote for a secret matches the same secret here.
func TestAuthHashIsTheKubelets(t *testing.T) {
	// sha256 of {"username":"u","password":"p","email":"e@x"}, the kubelet's AuthConfig JSON.
	const want = "81ca68cdff03c27e85aa0907582586fc0609858994808ba6e7b4edf8ca5924d1"
	got := Auth{Username: "u", Password: "p", Email: "e@x", Secret: &SecretSource{Name: "not hashed"}}.Hash()
	if got != want {
		t.Errorf("Hash = %s, want %s", got, want)
	}
}

func TestFromSecretsErrorsNameTheSecret(t *testing.T) {
	for _, tc := range []struct {
		s    *corev1.Secret
		want string
	}{
		{secret("bad-json", corev1.SecretTypeDockerConfigJson, corev1.DockerConfigJsonKey, `{`), "image pull secret ns/bad-json: .dockerconfigjson"},
		{secret("bad-cfg", corev1.SecretTypeDockercfg, corev1.DockerConfigKey, `[]`), "image pull secret ns/bad-cfg: .dockercfg"},
		{secret("bad-auth", corev1.SecretTypeDockercfg, corev1.DockerConfigKey, `{"r.example": {"auth": "bm9jb2xvbg=="}}`), `image pull secret ns/bad-auth: the auth of "r.example": want base64(username:password)`},
		{secret("bad-url", corev1.SecretTypeDockercfg, corev1.DockerConfigKey, `{"r.example:port": {"username": "u"}}`), `image pull secret ns/bad-url: registry "r.example:port" is not a URL`},
	} {
		_, err := FromSecrets([]*corev1.Secret{tc.s})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.s.Name, err, tc.want)
		}
	}
}
