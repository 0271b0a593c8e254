package harness

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// RegistryVersion is the distribution registry the harness builds (integration/tools/registry).
const RegistryVersion = "v3.1.2"

// Registry runs a private image registry beside the stack's containerd: the distribution
// project's registry on 127.0.0.1, serving TLS with a certificate of the stack's CA and
// asking for a user and password (htpasswd), holding registrySourceImage (a copy of
// BusyboxImage with its own image ID) as RegistryAccess.Busybox and .PluginBusybox.
type Registry struct {
	// Port is where it listens on 127.0.0.1.
	Port int `json:"port"`
}

// RegistryAccess is what a test needs to use the stack's registry.
type RegistryAccess struct {
	// Host is host:port, as image references name it.
	Host string
	// User and Password are the only account the registry accepts.
	User, Password string
	// CAFile is the PEM of the CA that signed the registry's certificate.
	CAFile string
	// Busybox is registrySourceImage as the registry holds it; the stack's containerd
	// holds no image of this name after Up, so a pod using it pulls.
	Busybox string
	// PluginBusybox is registrySourceImage again, under the path the harness's credential
	// provider plugin gives credentials for (Node.ImageCredentialProvider); also not in the stack's
	// containerd after Up.
	PluginBusybox string
}

// registryUser is the account the harness's registry accepts.
const registryUser = "unitlet"

// Registry is the stack's registry; it fails when the stack has none.
func (h *Harness) Registry() (*RegistryAccess, error) {
	if h.stack.Registry == nil {
		return nil, fmt.Errorf("stack %s has no registry: add `registry: {port: 5000}` to its file", h.stack.Name)
	}
	pw, err := os.ReadFile(filepath.Join(h.registryDir(), "password"))
	if err != nil {
		return nil, fmt.Errorf("the registry's password: %w (is the stack up?)", err)
	}
	host := h.registryHost()
	return &RegistryAccess{
		Host: host, User: registryUser, Password: string(pw),
		CAFile:        filepath.Join(h.paths.pki, "ca.crt"),
		Busybox:       host + "/private/busybox:1",
		PluginBusybox: host + credentialPluginImages + "/busybox:1",
	}, nil
}

func (h *Harness) registryHost() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(h.stack.Registry.Port))
}

func (h *Harness) registryDir() string { return filepath.Join(h.paths.root, "registry") }

// hostsDir is containerd's config_path: one directory per registry host with its
// hosts.toml. The CRI plugin reads it at each pull.
func (h *Harness) hostsDir() string { return filepath.Join(h.paths.root, "containerd", "certs.d") }

// EnsureRegistryBinary builds the registry from repo's integration/tools/registry into the
// cache unless it is there, and returns its path.
func EnsureRegistryBinary(repo string, out io.Writer) (string, error) {
	// The suffix is the build recipe's revision, as for the control plane.
	bin := filepath.Join(CacheDir(), "registry-"+RegistryVersion+"-r1", "registry")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	if err := goBuild(out, filepath.Join(repo, "integration", "tools", "registry"), bin,
		[]string{"github.com/distribution/distribution/v3/cmd/registry"}, "-s -w",
		"the distribution registry "+RegistryVersion+" (first time: about 3 minutes)"); err != nil {
		return "", err
	}
	return bin, nil
}

// registryFiles writes the registry's certificate, password, htpasswd file and
// configuration, and containerd's hosts.toml trusting the CA for it; it keeps the password
// a running registry has.
func (h *Harness) registryFiles() (config string, err error) {
	dir := h.registryDir()
	if err := os.MkdirAll(filepath.Join(dir, "storage"), 0o700); err != nil {
		return "", err
	}
	ca, err := loadOrCreateCA(h.paths.pki)
	if err != nil {
		return "", fmt.Errorf("CA: %w", err)
	}
	cert, key, err := ca.issue(dir, "registry", certSpec{
		cn: "unitlet-registry", dns: []string{"localhost"}, ips: []net.IP{net.ParseIP("127.0.0.1")}, server: true,
	})
	if err != nil {
		return "", err
	}
	pwFile := filepath.Join(dir, "password")
	if _, err := os.Stat(pwFile); err != nil {
		b := make([]byte, 12)
		if _, err := rand.Read(b); err != nil {
			return "", err
		}
		if err := os.WriteFile(pwFile, []byte(hex.EncodeToString(b)), 0o600); err != nil {
			return "", err
		}
	}
	pw, err := os.ReadFile(pwFile)
	if err != nil {
		return "", err
	}
	hash, err := bcrypt.GenerateFromPassword(pw, bcrypt.DefaultCost)
	if err != nil {
		return "", err
	}
	htpasswd := filepath.Join(dir, "htpasswd")
	if err := os.WriteFile(htpasswd, []byte(registryUser+":"+string(hash)+"\n"), 0o600); err != nil {
		return "", err
	}
	config = filepath.Join(dir, "config.yml")
	if err := os.WriteFile(config, fmt.Appendf(nil, `version: 0.1
log:
  level: info
storage:
  filesystem:
    rootdirectory: %q
  delete:
    enabled: true
http:
  addr: %q
  tls:
    certificate: %q
    key: %q
auth:
  htpasswd:
    realm: unitlet-harness
    path: %q
`, filepath.Join(dir, "storage"), h.registryHost(), cert, key, htpasswd), 0o600); err != nil {
		return "", err
	}
	hosts := filepath.Join(h.hostsDir(), h.registryHost())
	if err := os.MkdirAll(hosts, 0o755); err != nil {
		return "", err
	}
	return config, os.WriteFile(filepath.Join(hosts, "hosts.toml"), fmt.Appendf(nil, `# The harness's private registry, with a certificate of the stack's CA.
server = "https://%[1]s"

[host."https://%[1]s"]
  capabilities = ["pull", "resolve", "push"]
  ca = %[2]q
`, h.registryHost(), ca.CertFile), 0o644)
}

func (h *Harness) registry() component {
	return component{
		name: "registry",
		start: func() (*proc, error) {
			bin, err := EnsureRegistryBinary(h.repo, h.out)
			if err != nil {
				return nil, err
			}
			cfg, err := h.registryFiles()
			if err != nil {
				return nil, err
			}
			return startProcess(h.paths.logs, "registry", nil, bin, "serve", cfg)
		},
		ready: func(ctx context.Context) error {
			// Up and asking for credentials: /v2/ answers 401 to an anonymous client.
			code, err := h.registryGet(ctx, "/v2/")
			if err != nil {
				return err
			}
			if code != http.StatusUnauthorized {
				return fmt.Errorf("GET /v2/ without credentials: %d, want 401", code)
			}
			return nil
		},
	}
}

// registryGet sends an anonymous GET to the registry, trusting the stack's CA.
func (h *Harness) registryGet(ctx context.Context, path string) (int, error) {
	pem, err := os.ReadFile(filepath.Join(h.paths.pki, "ca.crt"))
	if err != nil {
		return 0, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+h.registryHost()+path, nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// pushRegistryImages puts BusyboxImage in the registry under RegistryAccess.Busybox and
// RegistryAccess.PluginBusybox, with containerd's own client (ctr) and the registry's
// credentials, then forgets those names in containerd so that pods using them must pull.
func (h *Harness) pushRegistryImages(ctx context.Context) (string, error) {
	r, err := h.Registry()
	if err != nil {
		return "", err
	}
	ctr := func(args ...string) error {
		cmd := h.ctr(ctx, append([]string{"images"}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("ctr images %s: %v\n%s", args[0], err, out)
		}
		return nil
	}
	for _, name := range []string{r.Busybox, r.PluginBusybox} {
		if err := ctr("tag", "--force", registrySourceImage, name); err != nil {
			return "", err
		}
		if err := ctr("push", "--hosts-dir", h.hostsDir(), "--user", r.User+":"+r.Password, name); err != nil {
			return "", err
		}
		if err := ctr("rm", name); err != nil {
			return "", err
		}
	}
	return " (" + r.Busybox + ", " + r.PluginBusybox + ")", nil
}

// ForgetImageName removes one name of an image from the stack's containerd, so that the
// next pod using it pulls. Only that name goes: CRI's RemoveImage would remove every name
// of the image, the image the registry's are pushed from among them.
func (h *Harness) ForgetImageName(ctx context.Context, name string) error {
	out, err := h.ctr(ctx, "images", "rm", name).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ctr images rm %s: %v\n%s", name, err, out)
	}
	return nil
}
