package nodeapi

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	restclient "k8s.io/client-go/rest"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"

	podsyncv1 "github.com/unitlet/unitlet/proto/unitlet/podsync/v1"
)

const testNode = "node-a"

// fakePods is an in-memory Pods: pods by namespace/name, a fixed streaming URL, and the
// streaming requests it was asked.
type fakePods struct {
	pods         []*corev1.Pod
	streamingURL string

	mu       sync.Mutex
	requests []*podsyncv1.GetStreamingURLRequest
}

func (f *fakePods) Pods(context.Context) ([]*corev1.Pod, error) { return f.pods, nil }

func (f *fakePods) PodUID(_ context.Context, namespace, name string) (types.UID, error) {
	for _, p := range f.pods {
		if p.Namespace == namespace && p.Name == name {
			return p.UID, nil
		}
	}
	return "", apierrors.NewNotFound(corev1.Resource("pods"), namespace+"/"+name)
}

func (f *fakePods) StreamingURL(_ context.Context, req *podsyncv1.GetStreamingURLRequest) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = append(f.requests, req)
	return f.streamingURL, nil
}

func (f *fakePods) lastRequest() *podsyncv1.GetStreamingURLRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.requests) == 0 {
		return nil
	}
	return f.requests[len(f.requests)-1]
}

func testPod(namespace, name, uid string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: types.UID(uid)}}
}

// startServer builds a server from o (filling the test defaults: a standalone one without
// a client or authentication and authorization settings), runs it on 127.0.0.1:0
// and stops it when the test ends. It returns the server and the directory of its
// self-signed certificate.
func startServer(t *testing.T, o Options) *Server {
	t.Helper()
	if o.Address == "" {
		o.Address = "127.0.0.1:0"
	}
	if o.CertDir == "" && o.CertFile == "" && o.GetCertificate == nil {
		o.CertDir = t.TempDir()
	}
	if o.Hostname == "" {
		o.Hostname = testNode
		o.IPs = []string{"127.0.0.1"}
	}
	if o.NodeName == "" {
		o.NodeName = testNode
	}
	if o.Pods == nil {
		o.Pods = &fakePods{}
	}
	if o.Client == nil && o.Authentication.Webhook.Enabled == nil && o.Authorization.Mode == "" {
		// Standalone, with what a standalone node must configure.
		o.Authentication, o.Authorization = standaloneAuth()
	}
	s, err := New(o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := s.Listen(); err != nil {
		t.Fatalf("Listen: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("Run did not return after cancel")
		}
	})
	return s
}

// openAuth is authentication and authorization that let anyone in (for endpoint tests).
func openAuth() (kubeletconfigv1beta1.KubeletAuthentication, kubeletconfigv1beta1.KubeletAuthorization) {
	yes, no := true, false
	return kubeletconfigv1beta1.KubeletAuthentication{
			Anonymous: kubeletconfigv1beta1.KubeletAnonymousAuthentication{Enabled: &yes},
			Webhook:   kubeletconfigv1beta1.KubeletWebhookAuthentication{Enabled: &no},
		}, kubeletconfigv1beta1.KubeletAuthorization{
			Mode: kubeletconfigv1beta1.KubeletAuthorizationModeAlwaysAllow,
		}
}

// client trusts the server's certificate; certs are client certificates to offer.
func client(t *testing.T, certs ...tls.Certificate) *http.Client {
	t.Helper()
	return &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{
			InsecureSkipVerify: true, //nolint:gosec // the certificate tests verify it; here only the endpoints matter
			Certificates:       certs,
		}},
	}
}

// get does a request and returns the status and body.
func do(t *testing.T, c *http.Client, method, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read body of %s: %v", url, err)
	}
	return resp.StatusCode, string(body)
}

// testCA is a CA that signs client certificates.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	file string
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), name+".crt")
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key, file: file}
}

// clientCert signs a client certificate for user cn in groups orgs.
func (ca *testCA) clientCert(t *testing.T, cn string, orgs ...string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: cn, Organization: orgs},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// reviews is a fake API server's TokenReview and SubjectAccessReview answers.
type reviews struct {
	// tokens maps a bearer token to its user.
	tokens map[string]authenticationv1.UserInfo
	// allow decides a SubjectAccessReview.
	allow func(sar *authorizationv1.SubjectAccessReview) bool

	mu   sync.Mutex
	sars []authorizationv1.SubjectAccessReviewSpec
}

// clientset is a client of a fake API server that answers TokenReviews and
// SubjectAccessReviews from rv. (The apiserver's webhook authenticator and authorizer post
// through RESTClient(), which client-go's fake clientset does not provide, so its reactors
// cannot stand in here.)
func (rv *reviews) clientset(t *testing.T) kubernetes.Interface {
	t.Helper()
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var out any
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/apis/authentication.k8s.io/v1/tokenreviews":
			var tr authenticationv1.TokenReview
			if err := json.NewDecoder(r.Body).Decode(&tr); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			u, ok := rv.tokens[tr.Spec.Token]
			tr.Status = authenticationv1.TokenReviewStatus{Authenticated: ok, User: u}
			out = &tr
		case r.Method == http.MethodPost && r.URL.Path == "/apis/authorization.k8s.io/v1/subjectaccessreviews":
			var sar authorizationv1.SubjectAccessReview
			if err := json.NewDecoder(r.Body).Decode(&sar); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			rv.mu.Lock()
			rv.sars = append(rv.sars, sar.Spec)
			rv.mu.Unlock()
			sar.Status.Allowed = rv.allow != nil && rv.allow(&sar)
			if !sar.Status.Allowed {
				sar.Status.Reason = "not in the test's policy"
			}
			out = &sar
		default:
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	}))
	t.Cleanup(api.Close)
	cs, err := kubernetes.NewForConfig(&restclient.Config{Host: api.URL})
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// take returns the SARs asked since the last call.
func (rv *reviews) take() []authorizationv1.SubjectAccessReviewSpec {
	rv.mu.Lock()
	defer rv.mu.Unlock()
	s := rv.sars
	rv.sars = nil
	return s
}

func webhookAuth() (kubeletconfigv1beta1.KubeletAuthentication, kubeletconfigv1beta1.KubeletAuthorization) {
	yes := true
	return kubeletconfigv1beta1.KubeletAuthentication{
			Webhook: kubeletconfigv1beta1.KubeletWebhookAuthentication{Enabled: &yes},
		}, kubeletconfigv1beta1.KubeletAuthorization{
			Mode: kubeletconfigv1beta1.KubeletAuthorizationModeWebhook,
		}
}

func TestUnauthenticatedRequestsGet401(t *testing.T) {
	rv := &reviews{tokens: map[string]authenticationv1.UserInfo{"good": {Username: "bob"}}, allow: func(*authorizationv1.SubjectAccessReview) bool { return true }}
	authn, authz := webhookAuth()
	s := startServer(t, Options{Client: rv.clientset(t), Authentication: authn, Authorization: authz})
	c := client(t)
	for _, path := range []string{"/pods", "/healthz", "/stats/summary", "/no/such/path"} {
		if code, _ := do(t, c, http.MethodGet, "https://"+s.Address()+path, ""); code != http.StatusUnauthorized {
			t.Errorf("GET %s without credentials: status %d, want 401", path, code)
		}
		if code, _ := do(t, c, http.MethodGet, "https://"+s.Address()+path, "wrong"); code != http.StatusUnauthorized {
			t.Errorf("GET %s with an unknown token: status %d, want 401", path, code)
		}
	}
	if sars := rv.take(); len(sars) != 0 {
		t.Errorf("unauthenticated requests were authorized: %v", sars)
	}
}

func TestWebhookAuthorizationAsksForTheKubeletsSubresources(t *testing.T) {
	rv := &reviews{
		tokens: map[string]authenticationv1.UserInfo{"good": {Username: "bob", Groups: []string{"ops"}}},
		// bob may use nodes/proxy, stats, log and metrics, but not nodes/pods etc.
		allow: func(sar *authorizationv1.SubjectAccessReview) bool {
			return slices.Contains([]string{"proxy", "stats", "log", "metrics"}, sar.Spec.ResourceAttributes.Subresource)
		},
	}
	authn, authz := webhookAuth()
	s := startServer(t, Options{
		Client: rv.clientset(t), Authentication: authn, Authorization: authz,
		Pods:  &fakePods{pods: []*corev1.Pod{testPod("default", "web", "uid-1")}},
		Stats: fakeStats{}, Metrics: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "# metrics\n") }),
	})
	c := client(t)
	base := "https://" + s.Address()

	for _, tc := range []struct {
		method, path string
		wantCode     int
		wantSubs     []string
		wantVerb     string
	}{
		{http.MethodGet, "/pods", http.StatusOK, []string{"pods", "proxy"}, "get"},
		{http.MethodGet, "/healthz", http.StatusOK, []string{"healthz", "proxy"}, "get"},
		{http.MethodGet, "/stats/summary", http.StatusOK, []string{"stats"}, "get"},
		{http.MethodGet, "/metrics", http.StatusOK, []string{"metrics"}, "get"},
		{http.MethodGet, "/logs/syslog", http.StatusMethodNotAllowed, []string{"log"}, "get"}, // SystemLogHandler unset
		// The v1.36 kubelet's mapping: no nodes/spec (it serves no /spec), /runningpods
		// as /pods, /statusz and /flagz without the nodes/proxy fallback.
		{http.MethodGet, "/spec/", http.StatusNotFound, []string{"proxy"}, "get"},
		{http.MethodGet, "/runningpods/", http.StatusNotFound, []string{"pods", "proxy"}, "get"},
		{http.MethodGet, "/configz", http.StatusNotFound, []string{"configz", "proxy"}, "get"},
		{http.MethodGet, "/statusz", http.StatusForbidden, []string{"statusz"}, "get"},
		{http.MethodGet, "/flagz", http.StatusForbidden, []string{"configz"}, "get"},
		{http.MethodPost, "/checkpoint/default/web/app", http.StatusForbidden, []string{"checkpoint"}, "create"},
		{http.MethodPost, "/exec/default/nope/app?command=ls&output=1", http.StatusNotFound, []string{"proxy"}, "create"},
		// A WebSocket exec, attach or port-forward is a GET; it runs code all the same.
		{http.MethodGet, "/exec/default/nope/app?command=ls&output=1", http.StatusNotFound, []string{"proxy"}, "create"},
		{http.MethodGet, "/attach/default/nope/app?output=1", http.StatusNotFound, []string{"proxy"}, "create"},
		{http.MethodGet, "/portForward/default/nope", http.StatusNotFound, []string{"proxy"}, "create"},
		{http.MethodDelete, "/pods", http.StatusMethodNotAllowed, []string{"pods", "proxy"}, "delete"},
	} {
		code, body := do(t, c, tc.method, base+tc.path, "good")
		if code != tc.wantCode {
			t.Errorf("%s %s: status %d (%q), want %d", tc.method, tc.path, code, body, tc.wantCode)
		}
		if code == http.StatusForbidden && !strings.Contains(body, "Forbidden (user=bob") {
			t.Errorf("%s %s: 403 body %q does not say who was refused", tc.method, tc.path, body)
		}
		sars := rv.take()
		var subs []string
		for _, sar := range sars {
			ra := sar.ResourceAttributes
			if ra == nil {
				t.Fatalf("%s %s: SAR without resource attributes: %+v", tc.method, tc.path, sar)
			}
			subs = append(subs, ra.Subresource)
			if ra.Resource != "nodes" || ra.Name != testNode || ra.Group != "" || ra.Namespace != "" || ra.Verb != tc.wantVerb {
				t.Errorf("%s %s: SAR resource attributes %+v, want verb %s on nodes/%s in group \"\"", tc.method, tc.path, *ra, tc.wantVerb, testNode)
			}
			if sar.User != "bob" || !slices.Contains(sar.Groups, "ops") {
				t.Errorf("%s %s: SAR for user %q groups %v, want bob in ops", tc.method, tc.path, sar.User, sar.Groups)
			}
		}
		if !slices.Equal(subs, tc.wantSubs) {
			t.Errorf("%s %s: SAR subresources %v, want %v", tc.method, tc.path, subs, tc.wantSubs)
		}
	}
}

func TestWebhookAuthorizationDenied(t *testing.T) {
	rv := &reviews{
		tokens: map[string]authenticationv1.UserInfo{"good": {Username: "eve"}},
		allow:  func(*authorizationv1.SubjectAccessReview) bool { return false },
	}
	authn, authz := webhookAuth()
	s := startServer(t, Options{Client: rv.clientset(t), Authentication: authn, Authorization: authz})
	code, body := do(t, client(t), http.MethodGet, "https://"+s.Address()+"/pods", "good")
	if code != http.StatusForbidden {
		t.Fatalf("GET /pods denied by the SAR: status %d, want 403", code)
	}
	for _, want := range []string{"user=eve", "verb=get", "resource=nodes", "pods", "proxy"} {
		if !strings.Contains(body, want) {
			t.Errorf("403 body %q does not contain %q", body, want)
		}
	}
}

func TestX509ClientCertificateAuthenticates(t *testing.T) {
	ca := newTestCA(t, "client-ca")
	other := newTestCA(t, "other-ca")
	rv := &reviews{allow: func(sar *authorizationv1.SubjectAccessReview) bool {
		return sar.Spec.User == "alice" && slices.Contains(sar.Spec.Groups, "node-admins")
	}}
	authn, authz := webhookAuth()
	authn.X509.ClientCAFile = ca.file
	s := startServer(t, Options{Client: rv.clientset(t), Authentication: authn, Authorization: authz})
	url := "https://" + s.Address() + "/pods"

	if code, body := do(t, client(t, ca.clientCert(t, "alice", "node-admins")), http.MethodGet, url, ""); code != http.StatusOK {
		t.Errorf("GET /pods as alice with a certificate of the client CA: status %d (%q), want 200", code, body)
	}
	if code, _ := do(t, client(t, ca.clientCert(t, "mallory")), http.MethodGet, url, ""); code != http.StatusForbidden {
		t.Errorf("GET /pods as mallory (authenticated, not allowed): status %d, want 403", code)
	}
	if code, _ := do(t, client(t, other.clientCert(t, "alice", "node-admins")), http.MethodGet, url, ""); code != http.StatusUnauthorized {
		t.Errorf("GET /pods with a certificate of another CA: status %d, want 401", code)
	}
}

func TestAnonymousWhenEnabled(t *testing.T) {
	yes := true
	rv := &reviews{allow: func(sar *authorizationv1.SubjectAccessReview) bool {
		return sar.Spec.User == "system:anonymous" && slices.Contains(sar.Spec.Groups, "system:unauthenticated")
	}}
	authn, authz := webhookAuth()
	authn.Anonymous.Enabled = &yes
	s := startServer(t, Options{Client: rv.clientset(t), Authentication: authn, Authorization: authz})
	if code, body := do(t, client(t), http.MethodGet, "https://"+s.Address()+"/healthz", ""); code != http.StatusOK || body != "ok" {
		t.Errorf("anonymous GET /healthz with anonymous enabled: %d %q, want 200 ok", code, body)
	}
}

// standaloneAuth is what a standalone node must configure, as a standalone kubelet: no
// webhook authentication, authorization mode AlwaysAllow.
func standaloneAuth() (kubeletconfigv1beta1.KubeletAuthentication, kubeletconfigv1beta1.KubeletAuthorization) {
	return kubeletconfigv1beta1.KubeletAuthentication{
			Webhook: kubeletconfigv1beta1.KubeletWebhookAuthentication{Enabled: ptr.To(false)},
		}, kubeletconfigv1beta1.KubeletAuthorization{
			Mode: kubeletconfigv1beta1.KubeletAuthorizationModeAlwaysAllow,
		}
}

// Without an API client the kubelet does not start with webhook authentication or
// authorization (cmd/kubelet/app BuildAuthn, BuildAuthz): neither does the node API, and
// the error names each field. Anonymous access changes nothing.
func TestStandaloneRefusesWebhookModes(t *testing.T) {
	const authnField, authzField = "authentication.webhook.enabled", "authorization.mode: Webhook"
	webhookAuthn, webhookAuthz := webhookAuth()
	openAuthn, alwaysAllow := standaloneAuth()
	anonymousWebhook := webhookAuthn
	anonymousWebhook.Anonymous.Enabled = ptr.To(true)
	for _, tc := range []struct {
		name  string
		authn kubeletconfigv1beta1.KubeletAuthentication
		authz kubeletconfigv1beta1.KubeletAuthorization
		want  []string
	}{
		{"the defaults", kubeletconfigv1beta1.KubeletAuthentication{}, kubeletconfigv1beta1.KubeletAuthorization{}, []string{authnField, authzField}},
		{"webhook both", webhookAuthn, webhookAuthz, []string{authnField, authzField}},
		{"anonymous with webhook both", anonymousWebhook, webhookAuthz, []string{authnField, authzField}},
		{"webhook authentication", webhookAuthn, alwaysAllow, []string{authnField}},
		{"webhook authorization", openAuthn, webhookAuthz, []string{authzField}},
	} {
		_, err := New(Options{Address: "127.0.0.1:0", CertDir: t.TempDir(), Hostname: testNode, NodeName: testNode, Pods: &fakePods{}, Authentication: tc.authn, Authorization: tc.authz})
		if err == nil {
			t.Errorf("%s: a standalone node API was built", tc.name)
			continue
		}
		for _, want := range tc.want {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %v, want it to name %s", tc.name, err, want)
			}
		}
		if err := CheckStandalone(tc.authn, tc.authz); err == nil {
			t.Errorf("%s: CheckStandalone: no error", tc.name)
		}
	}
	if err := CheckStandalone(openAuthn, alwaysAllow); err != nil {
		t.Errorf("CheckStandalone(webhook off, AlwaysAllow): %v", err)
	}
}

// A standalone node authorizes as the kubelet's AlwaysAllow: anonymous callers, when
// enabled, may use every endpoint; stricter than the kubelet, x509 callers only as the
// named users.
func TestStandalone(t *testing.T) {
	stats := fakeStats{}
	pods := &fakePods{pods: []*corev1.Pod{testPod("kube-system", "static-web", "uid-s")}}
	t.Run("anonymous refused unless enabled", func(t *testing.T) {
		authn, authz := standaloneAuth()
		s := startServer(t, Options{Authentication: authn, Authorization: authz, Pods: pods, Stats: stats})
		c, base := client(t), "https://"+s.Address()
		for _, path := range []string{"/healthz", "/pods", "/stats/summary"} {
			if code, _ := do(t, c, http.MethodGet, base+path, ""); code != http.StatusUnauthorized {
				t.Errorf("anonymous GET %s on a standalone node without anonymous enabled: %d, want 401", path, code)
			}
		}
	})
	t.Run("anonymous enabled", func(t *testing.T) {
		authn, authz := standaloneAuth()
		authn.Anonymous.Enabled = ptr.To(true)
		s := startServer(t, Options{Authentication: authn, Authorization: authz, Pods: pods, Stats: stats})
		c, base := client(t), "https://"+s.Address()
		if code, body := do(t, c, http.MethodGet, base+"/healthz", ""); code != http.StatusOK || body != "ok" {
			t.Errorf("GET /healthz: %d %q, want 200 ok", code, body)
		}
		code, body := do(t, c, http.MethodGet, base+"/pods", "")
		if code != http.StatusOK || !strings.Contains(body, `"name":"static-web"`) {
			t.Errorf("GET /pods: %d %q, want 200 with the static pod", code, body)
		}
		for _, path := range []string{"/stats/summary", "/healthz/ping"} {
			if code, _ := do(t, c, http.MethodGet, base+path, ""); code != http.StatusOK {
				t.Errorf("anonymous GET %s with AlwaysAllow: status %d, want 200", path, code)
			}
		}
	})
	t.Run("x509 only for the named users", func(t *testing.T) {
		ca := newTestCA(t, "client-ca")
		authn, authz := standaloneAuth()
		authn.X509.ClientCAFile = ca.file
		s := startServer(t, Options{Authentication: authn, Authorization: authz, Stats: stats, StandaloneUsers: []string{"operator"}})
		url := "https://" + s.Address() + "/stats/summary"
		if code, body := do(t, client(t, ca.clientCert(t, "operator")), http.MethodGet, url, ""); code != http.StatusOK {
			t.Errorf("GET /stats/summary as operator, a named user: %d %q, want 200", code, body)
		}
		code, body := do(t, client(t, ca.clientCert(t, "intruder")), http.MethodGet, url, "")
		if code != http.StatusForbidden || !strings.Contains(body, "intruder") {
			t.Errorf("GET /stats/summary as intruder, signed by the CA but not named: %d %q, want 403", code, body)
		}
		if code, _ := do(t, client(t), http.MethodGet, url, ""); code != http.StatusUnauthorized {
			t.Errorf("anonymous GET /stats/summary in standalone mode: status %d, want 401", code)
		}
	})
}

func TestRunStopsOnCancel(t *testing.T) {
	authn, authz := standaloneAuth()
	s, err := New(Options{Address: "127.0.0.1:0", CertDir: t.TempDir(), Hostname: testNode, NodeName: testNode, Pods: &fakePods{}, Authentication: authn, Authorization: authz})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	deadline := time.Now().Add(5 * time.Second)
	for s.Address() == "" && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if s.Address() == "" {
		t.Fatal("Run did not listen")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run after cancel: %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

// dialTLS dials s with cfg and reports the negotiated version and suite, or the error.
func dialTLS(t *testing.T, s *Server, cfg *tls.Config) (tls.ConnectionState, error) {
	t.Helper()
	cfg.InsecureSkipVerify = true // only the protocol is under test
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", s.Address(), cfg)
	if err != nil {
		return tls.ConnectionState{}, err
	}
	defer conn.Close()
	return conn.ConnectionState(), nil
}

func TestTLSSettingsTakeEffect(t *testing.T) {
	an, az := openAuth()
	tls13 := startServer(t, Options{Authentication: an, Authorization: az, TLSMinVersion: "VersionTLS13"})
	if _, err := dialTLS(t, tls13, &tls.Config{MaxVersion: tls.VersionTLS12}); err == nil {
		t.Error("tlsMinVersion VersionTLS13: a TLS 1.2 client was served")
	}
	if st, err := dialTLS(t, tls13, &tls.Config{}); err != nil || st.Version != tls.VersionTLS13 {
		t.Errorf("tlsMinVersion VersionTLS13: a TLS 1.3 client: version %#x, %v", st.Version, err)
	}

	// HTTP/2 needs one of the two AES-128-GCM suites in the list.
	suites := startServer(t, Options{Authentication: an, Authorization: az, TLSCipherSuites: []string{"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"}})
	if _, err := dialTLS(t, suites, &tls.Config{MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384, tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384}}); err == nil {
		t.Error("tlsCipherSuites: a client offering only a suite not in the list was served")
	}
	st, err := dialTLS(t, suites, &tls.Config{MaxVersion: tls.VersionTLS12})
	if err != nil || (st.CipherSuite != tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256 && st.CipherSuite != tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256) {
		t.Errorf("tlsCipherSuites: negotiated %s (%v), want one of the list", tls.CipherSuiteName(st.CipherSuite), err)
	}

	// Unset: TLS 1.2 at least.
	plain := startServer(t, Options{Authentication: an, Authorization: az})
	if _, err := dialTLS(t, plain, &tls.Config{MaxVersion: tls.VersionTLS11}); err == nil {
		t.Error("no tlsMinVersion: a TLS 1.1 client was served")
	}
	// Unset tlsCipherSuites: only ECDHE with AEAD (CIS 4.2.12), not Go's CBC-SHA suites.
	for _, weak := range []uint16{tls.TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA, tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA, tls.TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA, tls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA} {
		if _, err := dialTLS(t, plain, &tls.Config{MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{weak}}); err == nil {
			t.Errorf("no tlsCipherSuites: a client offering only %s was served", tls.CipherSuiteName(weak))
		}
	}
	if st, err := dialTLS(t, plain, &tls.Config{MaxVersion: tls.VersionTLS12}); err != nil || !slices.Contains(defaultCipherSuites, st.CipherSuite) {
		t.Errorf("no tlsCipherSuites: negotiated %s (%v), want one of the defaults", tls.CipherSuiteName(st.CipherSuite), err)
	}
	for _, o := range []Options{{TLSMinVersion: "VersionTLS11"}, {TLSCipherSuites: []string{"TLS_NONE"}}, {TLSCipherSuites: []string{"TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384"}}, {TLSCurvePreferences: []int32{7}}} {
		o.Authentication, o.Authorization, o.Address, o.NodeName, o.Pods, o.CertDir = an, az, "127.0.0.1:0", testNode, &fakePods{}, t.TempDir()
		if _, err := New(o); err == nil {
			t.Errorf("New with %q %q %v: no error", o.TLSMinVersion, o.TLSCipherSuites, o.TLSCurvePreferences)
		}
	}
}
