package pullcreds

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// dockerConfigEntry is one registry's entry of a docker config: a user and password, or
// auth, base64(user:password), which wins when set.
type dockerConfigEntry struct {
	Username string `json:"username,omitempty"`
	Password string `json:"password,omitempty"`
	Email    string `json:"email,omitempty"`
	Auth     string `json:"auth,omitempty"`
}

// FromSecrets makes a keyring of pull secrets: those of type
// kubernetes.io/dockerconfigjson (key .dockerconfigjson, {"auths": {...}}) and
// kubernetes.io/dockercfg (key .dockercfg, the entries alone). Secrets of other types, or
// without their key, give nothing, as for the kubelet; a key that does not parse is an
// error naming the secret.
func FromSecrets(secrets []*corev1.Secret) (*Keyring, error) {
	k := &Keyring{}
	for _, s := range secrets {
		var entries map[string]dockerConfigEntry
		switch data := s.Data; {
		case s.Type == corev1.SecretTypeDockerConfigJson && len(data[corev1.DockerConfigJsonKey]) > 0:
			var cfg struct {
				Auths map[string]dockerConfigEntry `json:"auths"`
			}
			if err := json.Unmarshal(data[corev1.DockerConfigJsonKey], &cfg); err != nil {
				return nil, fmt.Errorf("image pull secret %s/%s: %s: %v", s.Namespace, s.Name, corev1.DockerConfigJsonKey, err)
			}
			entries = cfg.Auths
		case s.Type == corev1.SecretTypeDockercfg && len(data[corev1.DockerConfigKey]) > 0:
			if err := json.Unmarshal(data[corev1.DockerConfigKey], &entries); err != nil {
				return nil, fmt.Errorf("image pull secret %s/%s: %s: %v", s.Namespace, s.Name, corev1.DockerConfigKey, err)
			}
		default:
			continue
		}
		for loc, e := range entries {
			user, pw := e.Username, e.Password
			if e.Auth != "" {
				var err error
				if user, pw, err = decodeAuth(e.Auth); err != nil {
					return nil, fmt.Errorf("image pull secret %s/%s: the auth of %q: %w", s.Namespace, s.Name, loc, err)
				}
			}
			src := &SecretSource{Namespace: s.Namespace, Name: s.Name, UID: string(s.UID)}
			if !k.Add(loc, Auth{Username: user, Password: pw, Email: e.Email, Secret: src}) {
				return nil, fmt.Errorf("image pull secret %s/%s: registry %q is not a URL", s.Namespace, s.Name, loc)
			}
		}
	}
	return k, nil
}

// decodeAuth splits a docker config's auth, base64(user:password), padded or not.
func decodeAuth(field string) (user, password string, err error) {
	enc := base64.RawStdEncoding
	if strings.HasSuffix(strings.TrimSpace(field), "=") {
		enc = base64.StdEncoding
	}
	b, err := enc.DecodeString(field)
	if err != nil {
		return "", "", err
	}
	user, password, ok := strings.Cut(string(b), ":")
	if !ok {
		return "", "", errors.New("want base64(username:password)")
	}
	return user, password, nil
}
