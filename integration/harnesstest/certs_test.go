package harnesstest

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/unitlet/unitlet/integration"
	"github.com/unitlet/unitlet/integration/harness"
	certsv1 "github.com/unitlet/unitlet/proto/unitlet/certs/v1"
	configv1 "github.com/unitlet/unitlet/proto/unitlet/config/v1"
	"github.com/unitlet/unitlet/shared/bus"
	"github.com/unitlet/unitlet/shared/pki"
)

// bootstrapNode joins the default stack with the bootstrap token alone (bootstrap: true)
// and runs config and certs as host processes.
const bootstrapNode = "node-2"

// waitBootstrapped waits until bootstrapNode's kubeconfig is usable and returns a client
// with it.
func waitBootstrapped(t *testing.T) (kubernetes.Interface, string, string) {
	t.Helper()
	c, kubeconfig := nodeClient(t, bootstrapNode)
	_, certDir := stack.NodeCredentials(bootstrapNode)
	return c, kubeconfig, certDir
}

// whoAmI is the user the API server sees for c.
func whoAmI(t *testing.T, c kubernetes.Interface) authenticationv1.UserInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := c.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("SelfSubjectReview with the node's kubeconfig: %v", err)
	}
	return r.Status.UserInfo
}

func TestBootstrapTokenAloneGivesNodeCredentials(t *testing.T) {
	// Serial: checks every bootstrap-token CSR in the cluster is issued (others create CSRs).
	c, kubeconfig, certDir := waitBootstrapped(t)
	u := whoAmI(t, c)
	if u.Username != "system:node:"+bootstrapNode || !slices.Contains(u.Groups, "system:nodes") {
		t.Errorf("the bootstrapped kubeconfig authenticates as %q %v, want system:node:%s in system:nodes", u.Username, u.Groups, bootstrapNode)
	}

	// Files: the key never readable by others.
	current := filepath.Join(certDir, pki.ClientPrefix+"-current.pem")
	for path, want := range map[string]os.FileMode{certDir: 0o700, current: 0o600, kubeconfig: 0o600} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("%s has mode %o, want %o", path, got, want)
		}
	}
	if target, err := os.Readlink(current); err != nil || !slices.Contains([]string{"."}, filepath.Dir(target)) {
		t.Errorf("%s links to %q (%v), want a timestamped file beside it", current, target, err)
	}

	// The CSR was the bootstrap token's, for the kubelet client signer, and approved by
	// the controller-manager.
	csrs, err := admin(t).CertificatesV1().CertificateSigningRequests().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, r := range csrs.Items {
		if r.Spec.SignerName == certificatesv1.KubeAPIServerClientKubeletSignerName && slices.Contains(r.Spec.Groups, "system:bootstrappers") {
			found = true
			if len(r.Status.Certificate) == 0 {
				t.Errorf("CSR %s by %s has no certificate", r.Name, r.Spec.Username)
			}
		}
	}
	if !found {
		t.Errorf("no kubelet client CSR made by a bootstrap token among %d CSRs", len(csrs.Items))
	}

	// unitlet-config says so.
	conn, err := bus.Dial(stack.NodeSocketDir(bootstrapNode), "config")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	st, err := configv1.NewConfigServiceClient(conn).GetBootstrapStatus(context.Background(), &configv1.GetBootstrapStatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if s := st.GetStatus().GetState(); s != configv1.BootstrapState_BOOTSTRAP_STATE_DONE && s != configv1.BootstrapState_BOOTSTRAP_STATE_NOT_NEEDED {
		t.Errorf("bootstrap state %s (%s), want DONE", s, st.GetStatus().GetMessage())
	}
}

// clientCert is bootstrapNode's client certificate as unitlet-certs reports it.
func clientCert(t *testing.T, c certsv1.CertsServiceClient) *certsv1.Certificate {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := c.ListCertificates(ctx, &certsv1.ListCertificatesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, crt := range l.GetCertificates() {
		if crt.GetKind() == certsv1.CertificateKind_CERTIFICATE_KIND_CLIENT {
			return crt
		}
	}
	t.Fatalf("unitlet-certs lists no client certificate: %v", l.GetCertificates())
	return nil
}

func TestCertsRotatesTheClientCertificateAndSurvivesSIGKILL(t *testing.T) {
	// Serial: rotates certificates, deletes a cluster RBAC binding, SIGKILLs unitlet-certs.
	c, kubeconfig, _ := waitBootstrapped(t)
	conn, err := bus.Dial(stack.NodeSocketDir(bootstrapNode), "certs")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	certs := certsv1.NewCertsServiceClient(conn)
	var before *certsv1.Certificate
	stack.WaitFor(t, time.Minute, "unitlet-certs reports the bootstrapped certificate", func(context.Context) (bool, string) {
		before = clientCert(t, certs)
		return before.GetSerial() != "", before.GetState()
	})
	lifetime := before.GetNotAfter().AsTime().Sub(before.GetNotBefore().AsTime())
	if next := before.GetNextRotation().AsTime().Sub(before.GetNotBefore().AsTime()); next < lifetime*7/10 || next > lifetime*9/10 {
		t.Errorf("next rotation at %s of a %s lifetime, want between 70%% and 90%%", next, lifetime)
	}

	// A forced rotation installs a new certificate, and the kubeconfig (which points at
	// the current link) authenticates with it.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	r, err := certs.Rotate(ctx, &certsv1.RotateRequest{Kind: certsv1.CertificateKind_CERTIFICATE_KIND_CLIENT})
	cancel()
	if err != nil {
		t.Fatalf("rotate: %v\n%s", err, stack.Logs(20, bootstrapNode+"/unitlet-certs"))
	}
	rotated := r.GetCertificate()
	if rotated.GetSerial() == before.GetSerial() {
		t.Fatalf("rotation kept serial %s", before.GetSerial())
	}
	if u := whoAmI(t, c); u.Username != "system:node:"+bootstrapNode {
		t.Errorf("after rotation the kubeconfig authenticates as %q", u.Username)
	}
	if s := kubeconfigSerial(t, kubeconfig); s != rotated.GetSerial() {
		t.Errorf("the kubeconfig's certificate has serial %s, want the rotated %s", s, rotated.GetSerial())
	}

	// SIGKILL in the middle of the next one: with the controller-manager's auto-approval
	// of renewals withdrawn, the CSR stays pending; kill unitlet-certs while it waits. The
	// kubeconfig stays usable, and once approvals are back the restarted service completes
	// the rotation it was asked for.
	const renewal = "unitlet:auto-approve-node-renewal"
	ctx = context.Background()
	binding, err := admin(t).RbacV1().ClusterRoleBindings().Get(ctx, renewal, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := admin(t).RbacV1().ClusterRoleBindings().Delete(ctx, renewal, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	restored := false
	restore := func() {
		if restored {
			return
		}
		restored = true
		binding.ResourceVersion = ""
		if _, err := admin(t).RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
			t.Errorf("restore %s: %v", renewal, err)
		}
	}
	defer restore()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = certs.Rotate(ctx, &certsv1.RotateRequest{Kind: certsv1.CertificateKind_CERTIFICATE_KIND_CLIENT})
	}()
	stack.WaitFor(t, time.Minute, "the rotation waits for approval", func(context.Context) (bool, string) {
		st := clientCert(t, certs).GetState()
		return strings.Contains(st, "submitted CSR"), st
	})
	pid, err := stack.ServicePID(bootstrapNode, "certs")
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if s := kubeconfigSerial(t, kubeconfig); s != rotated.GetSerial() {
		t.Errorf("the certificate changed to %s with its CSR unapproved", s)
	}
	if _, err := pki.CheckKubeconfig(kubeconfig, time.Now()); err != nil {
		t.Fatalf("after SIGKILL mid-rotation the kubeconfig is unusable: %v", err)
	}
	if u := whoAmI(t, c); u.Username != "system:node:"+bootstrapNode {
		t.Errorf("after SIGKILL the kubeconfig authenticates as %q", u.Username)
	}
	restore()
	// A process node's service is not restarted by systemd: start it again.
	if err := stack.StartService(context.Background(), bootstrapNode, "certs"); err != nil {
		t.Fatal(err)
	}
	stack.WaitFor(t, 2*time.Minute, "the interrupted rotation completes after the restart", func(context.Context) (bool, string) {
		s := kubeconfigSerial(t, kubeconfig)
		return s != rotated.GetSerial(), "serial " + s
	})
	if u := whoAmI(t, c); u.Username != "system:node:"+bootstrapNode {
		t.Errorf("after the completed rotation the kubeconfig authenticates as %q", u.Username)
	}
}

// kubeconfigSerial is the serial of the client certificate the kubeconfig points at.
func kubeconfigSerial(t *testing.T, kubeconfig string) string {
	t.Helper()
	rc, err := harness.RESTConfig(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(rc.TLSClientConfig.CertFile)
	if err != nil {
		t.Fatal(err)
	}
	certs, err := pki.ParseCertificates(b)
	if err != nil {
		t.Fatal(err)
	}
	return certs[0].SerialNumber.String()
}

// servedCertificate is the certificate the node API serves, verified against the
// cluster's CA for the node's name.
func servedCertificate(t *testing.T, addr string) (*x509.Certificate, error) {
	t.Helper()
	rc, err := harness.RESTConfig(stack.AdminKubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(rc.TLSClientConfig.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{RootCAs: pool, ServerName: podsyncNode})
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0], nil
}

func TestStatusServesTheRotatedServingCertificate(t *testing.T) {
	// Serial: rotates node-1's serving certificate.
	addr := strings.TrimPrefix(nodeAPI(t), "https://")
	conn, err := bus.Dial(stack.NodeSocketDir(podsyncNode), "certs")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	certs := certsv1.NewCertsServiceClient(conn)
	serving := func() *certsv1.Certificate {
		l, err := certs.ListCertificates(context.Background(), &certsv1.ListCertificatesRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range l.GetCertificates() {
			if c.GetKind() == certsv1.CertificateKind_CERTIFICATE_KIND_SERVING {
				return c
			}
		}
		return nil
	}
	// serverTLSBootstrap: unitlet-certs asks, the harness approves, status serves it in
	// place of its self-signed one, verified by the cluster CA for the node's name.
	var issued *certsv1.Certificate
	stack.WaitFor(t, time.Minute, "the node API serves the issued serving certificate", func(context.Context) (bool, string) {
		issued = serving()
		got, err := servedCertificate(t, addr)
		if err != nil {
			return false, fmt.Sprintf("%v (unitlet-certs: %s)", err, issued.GetState())
		}
		return got.SerialNumber.String() == issued.GetSerial(), "serving serial " + got.SerialNumber.String()
	})
	if !slices.Contains(issued.GetDnsNames(), podsyncNode) {
		t.Errorf("serving certificate names %v, want %s among them", issued.GetDnsNames(), podsyncNode)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	r, err := certs.Rotate(ctx, &certsv1.RotateRequest{Kind: certsv1.CertificateKind_CERTIFICATE_KIND_SERVING})
	cancel()
	if err != nil {
		t.Fatalf("rotate the serving certificate: %v", err)
	}
	if r.GetCertificate().GetSerial() == issued.GetSerial() {
		t.Fatalf("rotation kept serial %s", issued.GetSerial())
	}
	pid := servicePID(t, "status")
	stack.WaitFor(t, 10*time.Second, "the node API serves the rotated certificate", func(context.Context) (bool, string) {
		got, err := servedCertificate(t, addr)
		if err != nil {
			return false, err.Error()
		}
		return got.SerialNumber.String() == r.GetCertificate().GetSerial(), "serving serial " + got.SerialNumber.String()
	})
	if servicePID(t, "status") != pid {
		t.Errorf("unitlet-status restarted to serve the new certificate")
	}
}

func TestWrongBootstrapTokenBacksOffUntilARightOne(t *testing.T) {
	t.Parallel()
	bin, err := integration.Binary("unitlet-config")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	const node = "node-3"
	cfgFile := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfgFile, []byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nfailCgroupV1: false\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The stack's bootstrap kubeconfig with the token's secret changed.
	good, err := clientcmd.LoadFromFile(stack.BootstrapKubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	bad := good.DeepCopy()
	for _, a := range bad.AuthInfos {
		id, _, _ := strings.Cut(a.Token, ".")
		a.Token = id + ".0000000000000000"
	}
	bootstrap := filepath.Join(dir, "bootstrap.kubeconfig")
	if err := clientcmd.WriteToFile(*bad, bootstrap); err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	sockets := filepath.Join(dir, "run")
	cmd := exec.Command(bin, "--config="+cfgFile, "--root-dir="+filepath.Join(dir, "state"), "--hostname-override="+node,
		"--kubeconfig="+kubeconfig, "--bootstrap-kubeconfig="+bootstrap)
	cmd.Env = append(os.Environ(), "UNITLET_SOCKET_DIR="+sockets)
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("unitlet-config's log:\n%s", log.String())
		}
	})
	conn, err := bus.Dial(sockets, "config")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	config := configv1.NewConfigServiceClient(conn)
	status := func() *configv1.BootstrapStatus {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		r, err := config.GetBootstrapStatus(ctx, &configv1.GetBootstrapStatusRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return r.GetStatus()
	}

	// A refused token: a message that names the file and what to check, and a backoff.
	stack.WaitFor(t, 30*time.Second, "the wrong token is refused", func(context.Context) (bool, string) {
		s := status()
		return s.GetState() == configv1.BootstrapState_BOOTSTRAP_STATE_FAILED, s.GetState().String() + ": " + s.GetLastError()
	})
	s := status()
	if msg := s.GetLastError(); !strings.Contains(msg, "401") || !strings.Contains(msg, bootstrap) {
		t.Errorf("the error %q does not say the token in %s was refused", msg, bootstrap)
	}
	time.Sleep(12 * time.Second)
	if n := status().GetAttempts(); n > 5 {
		t.Errorf("%d attempts within about 12 s: no backoff", n)
	}
	if _, err := os.Stat(kubeconfig); err == nil {
		t.Errorf("a kubeconfig was written with a refused token")
	}

	// The right token, in the same file: the node joins without a restart.
	if err := clientcmd.WriteToFile(*good, bootstrap); err != nil {
		t.Fatal(err)
	}
	stack.WaitFor(t, 90*time.Second, node+" bootstraps with the right token", func(context.Context) (bool, string) {
		s := status()
		return s.GetState() == configv1.BootstrapState_BOOTSTRAP_STATE_DONE, s.GetState().String() + ": " + s.GetMessage()
	})
	if u := whoAmI(t, clientFor(t, kubeconfig)); u.Username != "system:node:"+node {
		t.Errorf("the kubeconfig authenticates as %q, want system:node:%s", u.Username, node)
	}
}
