package harness

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MetricsServerVersion is the metrics-server the harness builds
// (integration/tools/metrics-server).
const MetricsServerVersion = "v0.8.0"

// MetricsServer runs the cluster add-on behind `kubectl top` and the
// HorizontalPodAutoscaler beside the control plane, as a process with its own identity
// (system:metrics-server, with the RBAC its manifests grant): it scrapes each node's
// /metrics/resource on the port in the Node's status, verifying the node API's serving
// certificate with the stack's CA, and the API server's aggregation layer serves its
// metrics.k8s.io API.
type MetricsServer struct {
	// Port is where it listens, on the address the nodes report as InternalIP (the API
	// server reaches an aggregated API by its endpoints, which may not be loopback).
	Port int `json:"port"`
}

// EnsureMetricsServerBinary builds metrics-server from repo's
// integration/tools/metrics-server into the cache unless it is there, and returns its path.
func EnsureMetricsServerBinary(repo string, out io.Writer) (string, error) {
	bin := filepath.Join(CacheDir(), "metrics-server-"+MetricsServerVersion+"-r1", "metrics-server")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	if err := goBuild(out, filepath.Join(repo, "integration", "tools", "metrics-server"), bin,
		[]string{"sigs.k8s.io/metrics-server/cmd/metrics-server"}, "-s -w",
		"metrics-server "+MetricsServerVersion+" (first time: about 5 minutes)"); err != nil {
		return "", err
	}
	return bin, nil
}

func (h *Harness) metricsServerDir() string { return filepath.Join(h.paths.root, "metrics-server") }

// nodeAddress is a registered node's InternalIP that is not loopback: the host's address,
// as the nspawn and process nodes share the host's network.
func (h *Harness) nodeAddress(ctx context.Context) (net.IP, error) {
	client, err := h.AdminClient()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err == nil {
			for _, n := range nodes.Items {
				for _, a := range n.Status.Addresses {
					if ip := net.ParseIP(a.Address); a.Type == corev1.NodeInternalIP && ip != nil && !ip.IsLoopback() {
						return ip, nil
					}
				}
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("no node reports a non-loopback InternalIP for metrics-server to listen on (last error: %v)", err)
		case <-time.After(time.Second):
		}
	}
}

// metricsServer is the metrics-server process; its files (serving certificate, client
// certificate and kubeconfig as system:metrics-server) are made at its start.
func (h *Harness) metricsServer(ctx context.Context) component {
	port := h.stack.MetricsServer.Port
	var ip net.IP
	return component{
		name: "metrics-server",
		start: func() (*proc, error) {
			bin, err := EnsureMetricsServerBinary(h.repo, h.out)
			if err != nil {
				return nil, err
			}
			if ip, err = h.nodeAddress(ctx); err != nil {
				return nil, err
			}
			dir := h.metricsServerDir()
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return nil, err
			}
			ca, err := loadOrCreateCA(h.paths.pki)
			if err != nil {
				return nil, err
			}
			cert, key, err := ca.issue(dir, "serving-"+ip.String(), certSpec{
				cn: "metrics-server", dns: []string{"metrics-server.kube-system.svc"}, ips: []net.IP{ip}, server: true,
			})
			if err != nil {
				return nil, err
			}
			clientCert, clientKey, err := ca.issue(dir, "client", certSpec{cn: "system:metrics-server", client: true})
			if err != nil {
				return nil, err
			}
			kubeconfig := filepath.Join(dir, "kubeconfig")
			if err := writeKubeconfig(kubeconfig, h.APIServerURL(), ca.CertFile, "system:metrics-server", clientCert, clientKey, ""); err != nil {
				return nil, err
			}
			return startProcess(h.paths.logs, "metrics-server", nil, bin,
				"--bind-address="+ip.String(), "--secure-port="+strconv.Itoa(port),
				"--tls-cert-file="+cert, "--tls-private-key-file="+key,
				"--kubeconfig="+kubeconfig,
				"--authentication-kubeconfig="+kubeconfig, "--authorization-kubeconfig="+kubeconfig,
				"--requestheader-client-ca-file="+ca.CertFile, "--requestheader-allowed-names=front-proxy-client",
				// The node API's serving certificate is the stack CA's (serverTLSBootstrap),
				// reached at the node's InternalIP and the port in its status.
				"--kubelet-certificate-authority="+ca.CertFile,
				"--kubelet-preferred-address-types=InternalIP", "--kubelet-use-node-status-port",
				"--metric-resolution=15s", "--kubelet-request-timeout=5s", "--v=1")
		},
		ready: func(ctx context.Context) error {
			if ip == nil { // a running one, joined
				var err error
				if ip, err = h.nodeAddress(ctx); err != nil {
					return err
				}
			}
			return httpOK(ctx, insecureClient(), fmt.Sprintf("https://%s/livez", net.JoinHostPort(ip.String(), strconv.Itoa(port))), "ok")
		},
	}
}

// applyMetricsAPI creates metrics-server's RBAC, its Service and Endpoints (the host's
// address) and the v1beta1.metrics.k8s.io APIService; metrics-server needs its RBAC to
// start.
func (h *Harness) applyMetricsAPI(ctx context.Context) (string, error) {
	ip, err := h.nodeAddress(ctx)
	if err != nil {
		return "", err
	}
	caPEM, err := os.ReadFile(filepath.Join(h.paths.pki, "ca.crt"))
	if err != nil {
		return "", err
	}
	manifest := fmt.Sprintf(metricsAPIManifest, ip, h.stack.MetricsServer.Port, caBundle(caPEM))
	if out, err := h.Kubectl(ctx, bytes.NewBufferString(manifest), "apply", "-f", "-"); err != nil {
		return "", fmt.Errorf("kubectl apply: %w: %s", err, out)
	}
	return fmt.Sprintf(" (served at https://%s:%d)", ip, h.stack.MetricsServer.Port), nil
}

// waitMetricsAPI waits for the API server to call the metrics APIService available.
func (h *Harness) waitMetricsAPI(ctx context.Context) (string, error) {
	if out, err := h.Kubectl(ctx, nil, "wait", "--for=condition=Available", "--timeout=120s", "apiservice/v1beta1.metrics.k8s.io"); err != nil {
		return "", fmt.Errorf("the metrics API did not become available: %w: %s", err, out)
	}
	return "", nil
}

func caBundle(pem []byte) string {
	return base64.StdEncoding.EncodeToString(pem)
}

// Kubectl runs the stack's kubectl as the admin.
func (h *Harness) Kubectl(ctx context.Context, stdin io.Reader, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, h.bins.Kubectl, append([]string{"--kubeconfig=" + h.AdminKubeconfig()}, args...)...)
	cmd.Stdin = stdin
	return cmd.CombinedOutput()
}

// metricsAPIManifest is what metrics-server's own manifests create, less its Deployment:
// the ClusterRoles and bindings of system:metrics-server, a Service without a selector
// and its Endpoints at the process (%[1]s:%[2]d), and the APIService trusting the stack's
// CA (%[3]s).
const metricsAPIManifest = `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: system:aggregated-metrics-reader
  labels:
    rbac.authorization.k8s.io/aggregate-to-admin: "true"
    rbac.authorization.k8s.io/aggregate-to-edit: "true"
    rbac.authorization.k8s.io/aggregate-to-view: "true"
rules:
- apiGroups: [metrics.k8s.io]
  resources: [pods, nodes]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: system:metrics-server
rules:
- apiGroups: [""]
  resources: [nodes/metrics]
  verbs: [get]
- apiGroups: [""]
  resources: [pods, nodes]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: system:metrics-server
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: system:metrics-server}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: "system:metrics-server"}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: metrics-server:system:auth-delegator
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: system:auth-delegator}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: "system:metrics-server"}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: metrics-server-auth-reader
  namespace: kube-system
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: extension-apiserver-authentication-reader}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: "system:metrics-server"}
---
apiVersion: v1
kind: Service
metadata:
  name: metrics-server
  namespace: kube-system
spec:
  ports:
  - {name: https, port: 443, targetPort: %[2]d}
---
apiVersion: v1
kind: Endpoints
metadata:
  name: metrics-server
  namespace: kube-system
subsets:
- addresses: [{ip: "%[1]s"}]
  ports: [{name: https, port: %[2]d}]
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata:
  name: v1beta1.metrics.k8s.io
spec:
  group: metrics.k8s.io
  version: v1beta1
  groupPriorityMinimum: 100
  versionPriority: 100
  service: {name: metrics-server, namespace: kube-system, port: 443}
  caBundle: %[3]s
`
