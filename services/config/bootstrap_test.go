package config

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	certificatesv1 "k8s.io/api/certificates/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	clocktesting "k8s.io/utils/clock/testing"

	configv1 "github.com/unitlet/unitlet/proto/unitlet/config/v1"
	"github.com/unitlet/unitlet/shared/kubeapi"
	"github.com/unitlet/unitlet/shared/kubeapi/adapt"
	"github.com/unitlet/unitlet/shared/pki"
	"github.com/unitlet/unitlet/shared/pki/pkitest"
)

const (
	testNode   = "node-a"
	testServer = "https://192.0.2.10:6443"
	testToken  = "abcdef.0123456789abcdef"
)

// signer is how the fake cluster answers a CSR.
type signer int

const (
	signAsAsked      signer = iota // approve and issue what was asked for
	signOtherKey                   // issue a certificate for another key
	signOtherSubject               // issue a certificate for another node
)

// decide is the client certificate the fake cluster issues for a CSR, valid for an hour.
func (how signer) decide(cr *x509.CertificateRequest) (pkitest.Cert, bool) {
	c := pkitest.Requested(cr)
	c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	c.NotBefore, c.NotAfter = time.Now().Add(-time.Minute), time.Now().Add(time.Hour)
	switch how {
	case signOtherKey:
		other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		c.PublicKey = other.Public()
	case signOtherSubject:
		c.Subject = pkix.Name{CommonName: "system:node:node-b", Organization: []string{"system:nodes"}}
	}
	return c, true
}

type bootstrapFixture struct {
	dir        string
	paths      *configv1.Paths
	ca         *pkitest.CA
	clock      *clocktesting.FakeClock
	reg        *prometheus.Registry
	b          *Bootstrapper
	userAgents chan string
	raw        kubernetes.Interface // the fake behind the last client made
}

// newBootstrapFixture makes a bootstrapper whose every client is newClient's, a bootstrap
// kubeconfig with a token and the test CA, and no kubeconfig.
func newBootstrapFixture(t *testing.T, newClient func(t *testing.T) kubernetes.Interface) *bootstrapFixture {
	t.Helper()
	dir := t.TempDir()
	f := &bootstrapFixture{
		dir: dir,
		paths: &configv1.Paths{
			Kubeconfig:          filepath.Join(dir, "kubeconfig"),
			BootstrapKubeconfig: filepath.Join(dir, "bootstrap-kubeconfig"),
			CertDir:             filepath.Join(dir, "pki"),
		},
		ca:         pkitest.NewCA(t),
		clock:      clocktesting.NewFakeClock(time.Now()),
		reg:        prometheus.NewRegistry(),
		userAgents: make(chan string, 100),
	}
	f.writeBootstrap(t, testToken)
	cfg := &configv1.NodeConfig{Node: &configv1.NodeIdentity{Name: testNode}, Paths: f.paths}
	f.b = NewBootstrapper(func() *configv1.NodeConfig { return cfg }, 0, f.reg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	f.b.clock = f.clock
	f.b.jitter = func() float64 { return 0 }
	f.b.newClient = func(rc *rest.Config) (kubeapi.Interface, error) {
		f.userAgents <- rc.UserAgent
		if rc.Host != testServer || rc.BearerToken != testToken {
			t.Errorf("client for %s with token %q, want the bootstrap kubeconfig's", rc.Host, rc.BearerToken)
		}
		f.raw = newClient(t)
		return adapt.Clientset(f.raw), nil
	}
	return f
}

func (f *bootstrapFixture) writeBootstrap(t *testing.T, token string) {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: testServer, CertificateAuthorityData: f.ca.CertPEM}
	cfg.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["x"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	cfg.CurrentContext = "x"
	if err := clientcmd.WriteToFile(*cfg, f.paths.BootstrapKubeconfig); err != nil {
		t.Fatal(err)
	}
}

// store writes a certificate for testNode valid until notAfter and a kubeconfig for it.
func (f *bootstrapFixture) store(t *testing.T, notAfter time.Time) {
	t.Helper()
	key, keyPEM, err := pki.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	certPEM := f.ca.Sign(t, pkitest.Cert{
		PublicKey:   key.Public(),
		Subject:     pkix.Name{CommonName: "system:node:" + testNode, Organization: []string{"system:nodes"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		NotBefore:   notAfter.Add(-2 * time.Hour),
		NotAfter:    notAfter,
	})
	s := pki.Store{Dir: f.paths.CertDir, Prefix: pki.ClientPrefix}
	if _, err := s.Update(certPEM, keyPEM, f.clock.Now().Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := pki.WriteKubeconfig(f.paths.Kubeconfig, testServer, f.ca.CertPEM, s.CurrentPath()); err != nil {
		t.Fatal(err)
	}
}

// run starts the bootstrapper until the test ends.
func (f *bootstrapFixture) run(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.b.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != context.Canceled {
			t.Errorf("Run returned %v, want context.Canceled", err)
		}
	})
}

// waitState waits until the bootstrap is in state and the loop sleeps, and returns the status.
func (f *bootstrapFixture) waitState(t *testing.T, state configv1.BootstrapState) *configv1.BootstrapStatus {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		// Waiters first: a status read after the loop sleeps is that of the last attempt.
		if f.clock.HasWaiters() {
			if st := f.b.Status(); st.GetState() == state {
				return st
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Fatalf("bootstrap state %v, want %v: %s", f.b.Status().GetState(), state, f.b.Status())
	return nil
}

func TestBootstrapSkipsUsableKubeconfig(t *testing.T) {
	f := newBootstrapFixture(t, func(t *testing.T) kubernetes.Interface {
		t.Error("a client was made although the kubeconfig is usable")
		return pkitest.NewClientset()
	})
	f.store(t, f.clock.Now().Add(time.Hour))
	f.run(t)
	st := f.waitState(t, configv1.BootstrapState_BOOTSTRAP_STATE_NOT_NEEDED)
	if st.GetAttempts() != 0 || st.GetCertificateNotAfter() == nil {
		t.Errorf("status %s: want no attempt and the certificate's expiry", st)
	}
}

func TestBootstrapWritesCertificateAndKubeconfig(t *testing.T) {
	var cluster *fake.Clientset
	f := newBootstrapFixture(t, func(t *testing.T) kubernetes.Interface {
		cluster = pkitest.NewClientset()
		return cluster
	})
	f.b.newClient = wrapSigner(t, f, f.b.newClient, signAsAsked)
	f.b.lifetime = 15 * time.Minute // UNITLET_CERTIFICATE_LIFETIME
	f.run(t)
	st := f.waitState(t, configv1.BootstrapState_BOOTSTRAP_STATE_DONE)
	if st.GetAttempts() != 1 || st.GetCsrName() == "" || st.GetCertificateNotAfter() == nil || st.GetLastError() != "" {
		t.Errorf("status %s", st)
	}
	if ua := <-f.userAgents; !strings.HasPrefix(ua, "unitlet-config/") {
		t.Errorf("user agent %q", ua)
	}

	csr, err := cluster.CertificatesV1().CertificateSigningRequests().Get(context.Background(), st.GetCsrName(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if csr.Spec.SignerName != certificatesv1.KubeAPIServerClientKubeletSignerName {
		t.Errorf("CSR signer %q", csr.Spec.SignerName)
	}
	if s := csr.Spec.ExpirationSeconds; s == nil || *s != 900 {
		t.Errorf("CSR expirationSeconds %v, want 900 (the configured lifetime)", s)
	}

	notAfter, err := pki.CheckKubeconfig(f.paths.Kubeconfig, f.clock.Now())
	if err != nil || !notAfter.Equal(st.GetCertificateNotAfter().AsTime()) {
		t.Fatalf("the written kubeconfig: %v (not after %s, status says %s)", err, notAfter, st.GetCertificateNotAfter().AsTime())
	}
	kc, err := clientcmd.LoadFromFile(f.paths.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	s := pki.Store{Dir: f.paths.CertDir, Prefix: pki.ClientPrefix}
	for _, auth := range kc.AuthInfos {
		if auth.ClientCertificate != s.CurrentPath() || auth.ClientKey != s.CurrentPath() {
			t.Errorf("kubeconfig's client certificate %q key %q, want the link %s", auth.ClientCertificate, auth.ClientKey, s.CurrentPath())
		}
	}
	for _, c := range kc.Clusters {
		if c.Server != testServer || string(c.CertificateAuthorityData) != string(f.ca.CertPEM) {
			t.Errorf("kubeconfig's cluster %s, want the bootstrap kubeconfig's server and CA", c.Server)
		}
	}
	cert, err := s.Current()
	if err != nil || cert.Leaf.Subject.CommonName != "system:node:"+testNode {
		t.Fatalf("current certificate: %v", err)
	}

	target, err := os.Readlink(s.CurrentPath())
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]os.FileMode{
		f.paths.CertDir:                        0o700 | os.ModeDir,
		filepath.Join(f.paths.CertDir, target): 0o600,
		f.paths.Kubeconfig:                     0o600,
	} {
		if fi, err := os.Stat(path); err != nil || fi.Mode() != want {
			t.Errorf("%s: mode %v (%v), want %v", path, fi.Mode(), err, want)
		}
	}
	if got := testutil.ToFloat64(f.b.attempts.WithLabelValues("success")); got != 1 {
		t.Errorf("successful attempts %v", got)
	}
}

func TestBootstrapReplacesExpiredKubeconfig(t *testing.T) {
	f := newBootstrapFixture(t, func(t *testing.T) kubernetes.Interface { return pkitest.NewClientset() })
	f.b.newClient = wrapSigner(t, f, f.b.newClient, signAsAsked)
	f.store(t, f.clock.Now().Add(-time.Minute))
	f.run(t)
	st := f.waitState(t, configv1.BootstrapState_BOOTSTRAP_STATE_DONE)
	if st.GetCsrName() == "" || !st.GetCertificateNotAfter().AsTime().After(f.clock.Now()) {
		t.Errorf("status %s: want a new certificate from a CSR", st)
	}
	if _, err := pki.CheckKubeconfig(f.paths.Kubeconfig, f.clock.Now()); err != nil {
		t.Fatal(err)
	}
}

func TestBootstrapReusesStoredCertificate(t *testing.T) {
	f := newBootstrapFixture(t, func(t *testing.T) kubernetes.Interface {
		t.Error("a CSR was made although a valid certificate is stored")
		return pkitest.NewClientset()
	})
	f.store(t, f.clock.Now().Add(time.Hour))
	if err := os.Remove(f.paths.Kubeconfig); err != nil {
		t.Fatal(err)
	}
	f.run(t)
	st := f.waitState(t, configv1.BootstrapState_BOOTSTRAP_STATE_DONE)
	if st.GetCsrName() != "" {
		t.Errorf("status %s", st)
	}
	if _, err := pki.CheckKubeconfig(f.paths.Kubeconfig, f.clock.Now()); err != nil {
		t.Fatal(err)
	}
}

func TestBootstrapRefusesAnotherKeyOrSubject(t *testing.T) {
	for name, how := range map[string]signer{"other key": signOtherKey, "other subject": signOtherSubject} {
		t.Run(name, func(t *testing.T) {
			f := newBootstrapFixture(t, func(t *testing.T) kubernetes.Interface { return pkitest.NewClientset() })
			f.b.newClient = wrapSigner(t, f, f.b.newClient, how)
			f.run(t)
			st := f.waitState(t, configv1.BootstrapState_BOOTSTRAP_STATE_FAILED)
			if !strings.Contains(st.GetLastError(), "refused the certificate issued for CSR "+st.GetCsrName()) {
				t.Errorf("last error %q", st.GetLastError())
			}
			if _, err := os.Stat(f.paths.Kubeconfig); !os.IsNotExist(err) {
				t.Errorf("a kubeconfig was written: %v", err)
			}
			if _, err := (pki.Store{Dir: f.paths.CertDir, Prefix: pki.ClientPrefix}).Current(); err == nil {
				t.Error("the refused certificate was stored")
			}
		})
	}
}

func TestBootstrapRefusedTokenBacksOff(t *testing.T) {
	f := newBootstrapFixture(t, func(t *testing.T) kubernetes.Interface {
		c := pkitest.NewClientset()
		c.PrependReactor("create", "certificatesigningrequests", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewUnauthorized("Unauthorized")
		})
		return c
	})
	f.run(t)
	want := "the bootstrap token in " + f.paths.BootstrapKubeconfig + " was refused (401 Unauthorized): check the token's id and secret, and that its Secret in kube-system has not expired"
	var waits []time.Duration
	for i := 1; i <= 7; i++ {
		st := f.waitState(t, configv1.BootstrapState_BOOTSTRAP_STATE_FAILED)
		if st.GetAttempts() != uint32(i) {
			t.Fatalf("attempts %d, want %d", st.GetAttempts(), i)
		}
		if st.GetLastError() != want {
			t.Fatalf("last error %q\nwant %q", st.GetLastError(), want)
		}
		wait := st.GetNextAttemptTime().AsTime().Sub(f.clock.Now())
		waits = append(waits, wait)
		// Nothing happens before the backoff has passed.
		f.clock.Step(wait - time.Millisecond)
		time.Sleep(20 * time.Millisecond)
		if got := f.b.Status().GetAttempts(); got != uint32(i) {
			t.Fatalf("attempt %d started %v early", got, time.Millisecond)
		}
		f.clock.Step(time.Millisecond)
		for f.clock.HasWaiters() && f.b.Status().GetAttempts() == uint32(i) {
			time.Sleep(time.Millisecond)
		}
	}
	wantWaits := []time.Duration{2, 4, 8, 16, 32, 64, 64}
	for i := range wantWaits {
		if waits[i] != wantWaits[i]*time.Second {
			t.Fatalf("waits %v, want 2s doubling to 64s", waits)
		}
	}
	if got := testutil.ToFloat64(f.b.attempts.WithLabelValues("failure")); got < 7 {
		t.Errorf("failed attempts %v", got)
	}
}

func TestBootstrapJitterStaysUnderTheBackoff(t *testing.T) {
	f := newBootstrapFixture(t, func(t *testing.T) kubernetes.Interface { return pkitest.NewClientset() })
	f.b.jitter = func() float64 { return 0.999 }
	if err := os.Remove(f.paths.BootstrapKubeconfig); err != nil {
		t.Fatal(err)
	}
	f.run(t)
	st := f.waitState(t, configv1.BootstrapState_BOOTSTRAP_STATE_FAILED)
	if wait := st.GetNextAttemptTime().AsTime().Sub(f.clock.Now()); wait < 1500*time.Millisecond || wait > 2*time.Second {
		t.Errorf("first wait %v, want within 2s less a quarter", wait)
	}
}

func TestBootstrapRereadsTheBootstrapKubeconfig(t *testing.T) {
	f := newBootstrapFixture(t, func(t *testing.T) kubernetes.Interface { return pkitest.NewClientset() })
	f.b.newClient = wrapSigner(t, f, f.b.newClient, signAsAsked)
	if err := os.Remove(f.paths.BootstrapKubeconfig); err != nil {
		t.Fatal(err)
	}
	f.run(t)
	st := f.waitState(t, configv1.BootstrapState_BOOTSTRAP_STATE_FAILED)
	if !strings.Contains(st.GetLastError(), "the bootstrap kubeconfig "+f.paths.BootstrapKubeconfig+" does not exist") {
		t.Errorf("last error %q", st.GetLastError())
	}
	f.writeBootstrap(t, testToken)
	f.clock.Step(st.GetNextAttemptTime().AsTime().Sub(f.clock.Now()))
	st = f.waitState(t, configv1.BootstrapState_BOOTSTRAP_STATE_DONE)
	if st.GetAttempts() != 2 || st.GetLastError() != "" || st.GetNextAttemptTime() != nil {
		t.Errorf("status %s", st)
	}
}

func TestBootstrapNotConfigured(t *testing.T) {
	cfg := &configv1.NodeConfig{Paths: &configv1.Paths{Kubeconfig: "/nonexistent"}}
	b := NewBootstrapper(func() *configv1.NodeConfig { return cfg }, 0, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	srv := NewServer(nil, b)
	resp, err := srv.GetBootstrapStatus(context.Background(), &configv1.GetBootstrapStatusRequest{})
	if err != nil || resp.GetStatus().GetState() != configv1.BootstrapState_BOOTSTRAP_STATE_NOT_CONFIGURED {
		t.Fatalf("status %s, %v", resp.GetStatus(), err)
	}
}

// Without --bootstrap-kubeconfig the bootstrapper is off: Run makes no attempt, even
// with the kubeconfig missing, and ends with ctx.
func TestBootstrapNotConfiguredRunOnlyWaits(t *testing.T) {
	cfg := &configv1.NodeConfig{Paths: &configv1.Paths{Kubeconfig: filepath.Join(t.TempDir(), "kubeconfig")}}
	b := NewBootstrapper(func() *configv1.NodeConfig { return cfg }, 0, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	b.newClient = func(*rest.Config) (kubeapi.Interface, error) {
		t.Error("a client was made without a bootstrap kubeconfig")
		return nil, errors.New("test: no client")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	select {
	case err := <-done:
		t.Fatalf("Run ended before its ctx: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	cancel()
	if err := <-done; err != context.Canceled {
		t.Errorf("Run returned %v, want context.Canceled", err)
	}
	if st := b.Status(); st.GetState() != configv1.BootstrapState_BOOTSTRAP_STATE_NOT_CONFIGURED || st.GetAttempts() != 0 {
		t.Errorf("status %s, want not configured and no attempt", st)
	}
}

// wrapSigner starts a signer on every client newClient makes.
func wrapSigner(t *testing.T, f *bootstrapFixture, newClient func(*rest.Config) (kubeapi.Interface, error), how signer) func(*rest.Config) (kubeapi.Interface, error) {
	return func(rc *rest.Config) (kubeapi.Interface, error) {
		c, err := newClient(rc)
		if err == nil {
			f.ca.RunSigner(t, f.raw, how.decide)
		}
		return c, err
	}
}

func TestExplainBootstrapError(t *testing.T) {
	const file = "/etc/unitlet/bootstrap-kubeconfig"
	forbidden := apierrors.NewForbidden(certificatesv1.Resource("certificatesigningrequests"), "", fmt.Errorf("no RBAC"))
	cases := map[string]struct {
		err  error
		want string
	}{
		"401":         {apierrors.NewUnauthorized("Unauthorized"), "the bootstrap token in " + file + " was refused (401 Unauthorized)"},
		"403":         {forbidden, "ClusterRole system:node-bootstrapper"},
		"conflict":    {apierrors.NewAlreadyExists(certificatesv1.Resource("certificatesigningrequests"), "csr-1"), "request a client certificate from " + testServer},
		"unreachable": {fmt.Errorf("Post %q: dial tcp 192.0.2.10:6443: connect: connection refused", testServer), "cannot reach the API server " + testServer + " named in " + file},
		"unknown CA":  {fmt.Errorf("Post %q: tls: failed to verify certificate: x509: certificate signed by unknown authority", testServer), "certificate-authority-data in " + file},
	}
	for name, c := range cases {
		// As pki.Submit returns them: wrapped, after client-go's csr package.
		err := explainBootstrapError(fmt.Errorf("create CSR for %s: %w", certificatesv1.KubeAPIServerClientKubeletSignerName, c.err), file, testServer)
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %q, want one with %q", name, err, c.want)
		}
	}
}
