package harness

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// component is one long-running part of the stack.
type component struct {
	name  string
	start func() (*proc, error)
	ready func(ctx context.Context) error
	// within bounds the wait for ready after a start; zero means 2 minutes.
	within time.Duration
}

// paths of a stack's files.
type paths struct {
	root, pki, logs, etcdData, kubeconfigs string
}

func newPaths(root string) paths {
	return paths{
		root:        root,
		pki:         filepath.Join(root, "pki"),
		logs:        filepath.Join(root, "logs"),
		etcdData:    filepath.Join(root, "etcd"),
		kubeconfigs: filepath.Join(root, "kubeconfigs"),
	}
}

// controlPlaneFiles are the PKI and kubeconfigs the control plane needs.
type controlPlaneFiles struct {
	ca                                  *CA
	apiserverCert, apiserverKey         string
	kubeletClientCert, kubeletClientKey string
	frontProxyCert, frontProxyKey       string
	saPub, saKey                        string
	admin, controllerManager, scheduler string
	adminCert, adminKey                 string
}

func (h *Harness) makePKI() (*controlPlaneFiles, error) {
	p := h.paths
	for _, d := range []string{p.pki, p.logs, p.etcdData, p.kubeconfigs} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	ca, err := loadOrCreateCA(p.pki)
	if err != nil {
		return nil, fmt.Errorf("CA: %w", err)
	}
	f := &controlPlaneFiles{ca: ca}
	_, svcNet, err := net.ParseCIDR(h.stack.ControlPlane.ServiceCIDR)
	if err != nil {
		return nil, fmt.Errorf("controlPlane.serviceCIDR: %w", err)
	}
	firstSvc := make(net.IP, len(svcNet.IP.To4()))
	copy(firstSvc, svcNet.IP.To4())
	firstSvc[3]++
	if f.apiserverCert, f.apiserverKey, err = ca.issue(p.pki, "apiserver", certSpec{
		cn:  "kube-apiserver",
		dns: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		// 10.0.2.2 is the host as a qemu guest with user networking sees it.
		ips:    []net.IP{net.ParseIP("127.0.0.1"), firstSvc, net.ParseIP("10.0.2.2")},
		server: true,
	}); err != nil {
		return nil, err
	}
	if f.kubeletClientCert, f.kubeletClientKey, err = ca.issue(p.pki, "apiserver-kubelet-client", certSpec{
		cn: "kube-apiserver-kubelet-client", orgs: []string{"system:masters"}, client: true,
	}); err != nil {
		return nil, err
	}
	// The aggregation layer's client: aggregated APIs (metrics-server) trust the user it
	// names in request headers.
	if f.frontProxyCert, f.frontProxyKey, err = ca.issue(p.pki, "front-proxy-client", certSpec{cn: "front-proxy-client", client: true}); err != nil {
		return nil, err
	}
	if f.saPub, f.saKey, err = serviceAccountKey(p.pki); err != nil {
		return nil, err
	}
	server := h.APIServerURL()
	clients := []struct {
		name, cn, org string
		kubeconfig    *string
	}{
		{"admin", "kubernetes-admin", "system:masters", &f.admin},
		{"controller-manager", "system:kube-controller-manager", "", &f.controllerManager},
		{"scheduler", "system:kube-scheduler", "", &f.scheduler},
	}
	for _, c := range clients {
		var orgs []string
		if c.org != "" {
			orgs = []string{c.org}
		}
		cert, key, err := ca.issue(p.pki, c.name, certSpec{cn: c.cn, orgs: orgs, client: true})
		if err != nil {
			return nil, err
		}
		*c.kubeconfig = filepath.Join(p.kubeconfigs, c.name+".kubeconfig")
		if err := writeKubeconfig(*c.kubeconfig, server, ca.CertFile, c.cn, cert, key, ""); err != nil {
			return nil, err
		}
		if c.name == "admin" {
			f.adminCert, f.adminKey = cert, key
		}
	}
	return f, nil
}

// auditPolicy has the API server record, at Metadata level, what nodes do and every request
// of no known user: which identity wrote a Node, and any credentials the API server refused
// (a failed authentication has no user, so it falls through to the last rule). The
// control plane's own components and the admin are left out.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  userGroups: ["system:nodes", "system:bootstrappers"]
- level: None
  userGroups: ["system:masters", "system:serviceaccounts", "system:authenticated"]
- level: Metadata
`

// AuditLog is the API server's audit log (JSON lines, see auditPolicy).
func (h *Harness) AuditLog() string { return filepath.Join(h.paths.logs, "kube-apiserver-audit.log") }

func (h *Harness) controlPlane(f *controlPlaneFiles) []component {
	cp := h.stack.ControlPlane
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", cp.EtcdPort)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", cp.EtcdPort+1)
	logs := h.paths.logs
	return []component{
		{
			name: "etcd",
			start: func() (*proc, error) {
				return startProcess(logs, "etcd", nil, h.bins.Etcd,
					"--name=harness", "--data-dir="+h.paths.etcdData,
					"--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL,
					"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
					"--initial-cluster=harness="+peerURL, "--unsafe-no-fsync=true",
					"--listen-metrics-urls=", "--log-level=warn")
			},
			ready: func(ctx context.Context) error {
				return httpOK(ctx, http.DefaultClient, etcdURL+"/health", `"health":"true"`)
			},
		},
		{
			name: "kube-apiserver",
			start: func() (*proc, error) {
				policy := filepath.Join(h.paths.pki, "audit-policy.yaml")
				if err := os.WriteFile(policy, []byte(auditPolicy), 0o644); err != nil {
					return nil, err
				}
				return startProcess(logs, "kube-apiserver", nil, h.bins.APIServer,
					"--etcd-servers="+etcdURL,
					"--audit-policy-file="+policy, "--audit-log-path="+h.AuditLog(), "--audit-log-format=json",
					"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
					fmt.Sprintf("--secure-port=%d", cp.APIServerPort),
					"--cert-dir="+filepath.Join(h.paths.pki, "apiserver-generated"),
					"--tls-cert-file="+f.apiserverCert, "--tls-private-key-file="+f.apiserverKey,
					"--client-ca-file="+f.ca.CertFile,
					"--kubelet-client-certificate="+f.kubeletClientCert, "--kubelet-client-key="+f.kubeletClientKey,
					// Node names do not resolve here; reach kubelets by their InternalIP.
					"--kubelet-preferred-address-types=InternalIP,Hostname",
					"--service-account-key-file="+f.saPub, "--service-account-signing-key-file="+f.saKey,
					"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
					"--service-cluster-ip-range="+cp.ServiceCIDR,
					"--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction",
					"--enable-bootstrap-token-auth=true", "--allow-privileged=true",
					// The aggregation layer, as kubeadm sets it up (metrics-server's API);
					// an aggregated API is reached at its endpoints, there being no
					// kube-proxy.
					"--requestheader-client-ca-file="+f.ca.CertFile, "--requestheader-allowed-names=front-proxy-client",
					"--requestheader-username-headers=X-Remote-User", "--requestheader-group-headers=X-Remote-Group",
					"--requestheader-extra-headers-prefix=X-Remote-Extra-",
					"--proxy-client-cert-file="+f.frontProxyCert, "--proxy-client-key-file="+f.frontProxyKey,
					"--enable-aggregator-routing=true",
					// A loopback advertise address cannot be a Service endpoint.
					"--endpoint-reconciler-type=none",
					"--profiling=false", "--v=1")
			},
			ready: func(ctx context.Context) error {
				c, err := h.adminHTTPClient()
				if err != nil {
					return err
				}
				return httpOK(ctx, c, h.APIServerURL()+"/readyz", "ok")
			},
		},
		{
			name: "kube-controller-manager",
			start: func() (*proc, error) {
				return startProcess(logs, "kube-controller-manager", nil, h.bins.ControllerManager,
					"--kubeconfig="+f.controllerManager,
					"--authentication-kubeconfig="+f.controllerManager, "--authorization-kubeconfig="+f.controllerManager,
					"--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", cp.ControllerManagerPort),
					"--cert-dir="+filepath.Join(h.paths.pki, "controller-manager-generated"),
					"--cluster-signing-cert-file="+f.ca.CertFile, "--cluster-signing-key-file="+f.ca.KeyFile,
					"--root-ca-file="+f.ca.CertFile, "--service-account-private-key-file="+f.saKey,
					"--use-service-account-credentials=true",
					// "*" includes the taint eviction controller, which deletes pods
					// that do not tolerate a node's NoExecute taints
					// (TestNodeAdmissionNoExecuteTaints relies on it).
					"--controllers=*,bootstrapsigner,tokencleaner",
					"--leader-elect=false", "--v=1")
			},
			ready: func(ctx context.Context) error {
				return httpOK(ctx, insecureClient(), fmt.Sprintf("https://127.0.0.1:%d/healthz", cp.ControllerManagerPort), "ok")
			},
		},
		{
			name: "kube-scheduler",
			start: func() (*proc, error) {
				return startProcess(logs, "kube-scheduler", nil, h.bins.Scheduler,
					"--kubeconfig="+f.scheduler,
					"--authentication-kubeconfig="+f.scheduler, "--authorization-kubeconfig="+f.scheduler,
					"--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", cp.SchedulerPort),
					"--cert-dir="+filepath.Join(h.paths.pki, "scheduler-generated"),
					"--leader-elect=false", "--v=1")
			},
			ready: func(ctx context.Context) error {
				return httpOK(ctx, insecureClient(), fmt.Sprintf("https://127.0.0.1:%d/healthz", cp.SchedulerPort), "ok")
			},
		},
	}
}

// adminHTTPClient authenticates as the stack's admin.
func (h *Harness) adminHTTPClient() (*http.Client, error) {
	pki := h.paths.pki
	cert, err := tls.LoadX509KeyPair(filepath.Join(pki, "admin.crt"), filepath.Join(pki, "admin.key"))
	if err != nil {
		return nil, err
	}
	caPEM, err := os.ReadFile(filepath.Join(pki, "ca.crt"))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS12},
	}}, nil
}

// insecureClient reads the health of components whose serving certificate they made
// themselves; /healthz carries no secret.
func insecureClient() *http.Client {
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // health only
	}}
}

func httpOK(ctx context.Context, c *http.Client, url, want string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
		return fmt.Errorf("%s: %d %s", url, resp.StatusCode, strings.TrimSpace(string(body)))
	}
	return nil
}
