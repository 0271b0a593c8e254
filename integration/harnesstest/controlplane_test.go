// Package harnesstest proves the harness against the real parts: etcd, kube-apiserver,
// kube-controller-manager and kube-scheduler with TLS bootstrapping ready, and containerd
// over CRI. All tests of the package share one stack.
package harnesstest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	certsv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/unitlet/unitlet/integration"
	"github.com/unitlet/unitlet/integration/csidriver"
	"github.com/unitlet/unitlet/integration/harness"
)

var stack *harness.Harness

func TestMain(m *testing.M) {
	// The CSI test driver, when a test started this binary as its process.
	if csidriver.RunIfAsked() {
		return
	}
	repo, err := integration.RepoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(harness.Main(m, repo, func(h *harness.Harness) { stack = h }))
}

func admin(t testing.TB) kubernetes.Interface {
	t.Helper()
	c, err := stack.AdminClient()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestAPIServerReadyAndControllersWork(t *testing.T) {
	t.Parallel()
	c := admin(t)
	body, err := c.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(context.Background())
	if err != nil || string(body) != "ok" {
		t.Fatalf("/readyz: %q %v", body, err)
	}
	v, err := c.Discovery().ServerVersion()
	if err != nil || v.GitVersion != harness.KubernetesVersion {
		t.Fatalf("server version %v %v, want %s", v, err, harness.KubernetesVersion)
	}
	ns, err := c.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "harness-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
	stack.WaitFor(t, time.Minute, "the controller-manager fills a new namespace", func(ctx context.Context) (bool, string) {
		_, saErr := c.CoreV1().ServiceAccounts(ns.Name).Get(ctx, "default", metav1.GetOptions{})
		cm, cmErr := c.CoreV1().ConfigMaps(ns.Name).Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
		ok := saErr == nil && cmErr == nil && strings.Contains(cm.Data["ca.crt"], "BEGIN CERTIFICATE")
		return ok, fmt.Sprintf("serviceaccount default: %v; configmap kube-root-ca.crt: %v", saErr, cmErr)
	})
}

func TestBootstrapTokenCSRIsApprovedAndIssued(t *testing.T) {
	t.Parallel()
	boot := clientFor(t, stack.BootstrapKubeconfig())
	node := fmt.Sprintf("csr-test-%d", time.Now().UnixNano()%100000)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: "system:node:" + node, Organization: []string{"system:nodes"}},
	}, key)
	if err != nil {
		t.Fatal(err)
	}
	csr, err := boot.CertificatesV1().CertificateSigningRequests().Create(context.Background(), &certsv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "node-csr-"},
		Spec: certsv1.CertificateSigningRequestSpec{
			Request:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			SignerName: certsv1.KubeAPIServerClientKubeletSignerName,
			Usages:     []certsv1.KeyUsage{certsv1.UsageDigitalSignature, certsv1.UsageClientAuth},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create a CSR with the bootstrap token: %v", err)
	}
	if !strings.HasPrefix(csr.Spec.Username, "system:bootstrap:") {
		t.Errorf("CSR made by %q, want a system:bootstrap: user", csr.Spec.Username)
	}
	var issued []byte
	stack.WaitFor(t, time.Minute, "the CSR is approved and issued", func(ctx context.Context) (bool, string) {
		got, err := boot.CertificatesV1().CertificateSigningRequests().Get(ctx, csr.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		issued = got.Status.Certificate
		return len(issued) > 0, fmt.Sprintf("conditions %v", got.Status.Conditions)
	})
	block, _ := pem.Decode(issued)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if cert.Subject.CommonName != "system:node:"+node || !cert.PublicKey.(*ecdsa.PublicKey).Equal(key.Public()) {
		t.Fatalf("issued certificate for %q", cert.Subject.CommonName)
	}
}

func TestNodeProcessesAndCommands(t *testing.T) {
	t.Parallel()
	node := stack.Stack().Nodes[0].Name
	out, err := stack.Exec(node, []string{"unitletctl", "config", "-o", "json"}).CombinedOutput()
	if err != nil || !strings.Contains(string(out), `"failCgroupV1":false`) && !strings.Contains(string(out), `"failCgroupV1": false`) {
		t.Fatalf("unitletctl config on %s: %v\n%s", node, err, out)
	}
	repo, _ := integration.RepoRoot()
	cmd := exec.Command("go", "run", "./cmd/unitlet-harness", "status", "-o", "json")
	cmd.Dir = repo
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), `"alive": true`) {
		t.Fatalf("unitlet-harness status: %v\n%s", err, out)
	}
}
