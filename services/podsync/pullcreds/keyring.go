// Package pullcreds finds the registry credentials for an image pull as the kubelet does:
// a keyring of the pod's imagePullSecrets and of the node's credential provider plugins,
// matched against the image's registry host, port and path.
package pullcreds

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net"
	"net/url"
	"path/filepath"
	"slices"
	"strings"

	"github.com/distribution/reference"
)

// Auth is one credential for a registry, as CRI's AuthConfig carries it.
type Auth struct {
	Username, Password string
	// Auth is base64(username:password), when a source gives it so.
	Auth          string
	ServerAddress string
	IdentityToken string
	RegistryToken string
	// Email is a docker config entry's, kept only because the kubelet hashes it.
	Email string
	// Secret is the pull secret the credential came from; nil for the node's own (a
	// credential provider plugin's).
	Secret *SecretSource
}

// SecretSource names the pull secret a credential came from.
type SecretSource struct {
	Namespace, Name, UID string
}

// Hash identifies the credential's content as the kubelet's pulled-image records do: the
// SHA-256 of its JSON in the docker AuthConfig shape, so records a kubelet wrote match.
func (a Auth) Hash() string {
	b, err := json.Marshal(struct {
		Username      string `json:"username,omitempty"`
		Password      string `json:"password,omitempty"`
		Auth          string `json:"auth,omitempty"`
		Email         string `json:"email,omitempty"`
		ServerAddress string `json:"serveraddress,omitempty"`
		IdentityToken string `json:"identitytoken,omitempty"`
		RegistryToken string `json:"registrytoken,omitempty"`
	}{a.Username, a.Password, a.Auth, a.Email, a.ServerAddress, a.IdentityToken, a.RegistryToken})
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Keyring holds credentials by registry location: a host (its labels may be `*`
// wildcards), an optional port and an optional path prefix, e.g. `*.example.com:5000/team`.
type Keyring struct {
	// keys are the locations, most specific first: the kubelet sorts them in reverse
	// lexical order, so that a longer path under the same host comes before its prefix.
	keys  []string
	creds map[string][]Auth
}

// dockerHubKey is where the keyring keeps Docker Hub's credentials: a docker config names
// it https://index.docker.io/v1/.
const dockerHubKey = "index.docker.io"

// Add puts cred under location, a docker config key: a URL or a bare host[:port][/path].
// A `/v1/` or `/v2/` path prefix (the API version old configs carry) is not part of the
// location. It reports false for a location that is no URL.
func (k *Keyring) Add(location string, cred Auth) bool {
	value := location
	if !strings.HasPrefix(value, "https://") && !strings.HasPrefix(value, "http://") {
		value = "https://" + value
	}
	u, err := url.Parse(value)
	if err != nil {
		return false
	}
	path := u.Path
	if strings.HasPrefix(path, "/v1/") || strings.HasPrefix(path, "/v2/") {
		path = path[3:]
	}
	key := u.Host
	if path != "" && path != "/" {
		key += path
	}
	if k.creds == nil {
		k.creds = map[string][]Auth{}
	}
	if _, seen := k.creds[key]; !seen {
		k.keys = append(k.keys, key)
		slices.Sort(k.keys)
		slices.Reverse(k.keys)
	}
	k.creds[key] = append(k.creds[key], cred)
	return true
}

// Lookup returns the credentials for repo (an image's name without tag or digest, as
// normalized: docker.io/library/busybox), those of the most specific location first.
// Docker Hub's credentials serve an image of Docker Hub that no location matched.
func (k *Keyring) Lookup(repo string) []Auth {
	var out []Auth
	for _, key := range k.keys {
		if locationMatches(key, repo) {
			out = append(out, k.creds[key]...)
		}
	}
	if len(out) == 0 && onDockerHub(repo) {
		out = append(out, k.creds[dockerHubKey]...)
	}
	return out
}

// Len is the number of credentials held.
func (k *Keyring) Len() int {
	n := 0
	for _, c := range k.creds {
		n += len(c)
	}
	return n
}

// onDockerHub reports whether repo names an image of Docker Hub: one with no registry
// part (no dot or colon before the first slash) or docker.io's.
func onDockerHub(repo string) bool {
	first, _, found := strings.Cut(repo, "/")
	switch {
	case first == "":
		return false
	case !found, first == "docker.io", first == "index.docker.io":
		return true
	}
	return !strings.ContainsAny(first, ".:")
}

// locationMatches reports whether pattern (host[:port][/path], host labels may hold
// wildcards) matches target: the same port, the same number of host labels each matched,
// and target's path under pattern's.
func locationMatches(pattern, target string) bool {
	p, err := url.Parse("https://" + pattern)
	if err != nil {
		return false
	}
	t, err := url.Parse("https://" + target)
	if err != nil {
		return false
	}
	pLabels, pPort := hostLabels(p)
	tLabels, tPort := hostLabels(t)
	if pPort != tPort || len(pLabels) != len(tLabels) || !strings.HasPrefix(t.Path, p.Path) {
		return false
	}
	for i := range pLabels {
		if ok, err := filepath.Match(pLabels[i], tLabels[i]); err != nil || !ok {
			return false
		}
	}
	return true
}

func hostLabels(u *url.URL) (labels []string, port string) {
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		host, port = u.Host, ""
	}
	return strings.Split(host, "."), port
}

// Repository is image's repository as the keyring matches it: normalized (busybox is
// docker.io/library/busybox) and without its tag or digest.
func Repository(image string) (string, error) {
	named, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		return "", err
	}
	return named.Name(), nil
}
