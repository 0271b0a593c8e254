package kubeapi

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// TestClientSpeaksToTheAPIServersPaths checks each group's paths, a JSON answer decoded
// into its type, and the token subresource.
func TestClientSpeaksToTheAPIServersPaths(t *testing.T) {
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = append(seen, r.Method+" "+r.URL.Path)
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Path == "/api/v1/namespaces/ns/pods/p":
			_ = json.NewEncoder(w).Encode(&corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
				ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u1"}})
		case r.URL.Path == "/api/v1/namespaces/ns/serviceaccounts/sa/token":
			body, _ := io.ReadAll(r.Body)
			var tr authenticationv1.TokenRequest
			if err := json.Unmarshal(body, &tr); err != nil {
				t.Errorf("token request body: %v", err)
			}
			tr.APIVersion, tr.Kind = "authentication.k8s.io/v1", "TokenRequest"
			tr.Status.Token = "tok"
			_ = json.NewEncoder(w).Encode(&tr)
		default:
			w.WriteHeader(http.StatusNotFound)
			_ = json.NewEncoder(w).Encode(&metav1.Status{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"},
				Status: metav1.StatusFailure, Reason: metav1.StatusReasonNotFound, Code: 404})
		}
	}))
	defer srv.Close()
	c, err := NewForConfig(&rest.Config{Host: srv.URL, ContentConfig: rest.ContentConfig{ContentType: "application/json"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	pod, err := c.CoreV1().Pods("ns").Get(ctx, "p", metav1.GetOptions{})
	if err != nil || pod.Name != "p" || pod.UID != "u1" {
		t.Fatalf("pod %+v, %v", pod, err)
	}
	tr, err := c.CoreV1().ServiceAccounts("ns").CreateToken(ctx, "sa", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: []string{"a"}}}, metav1.CreateOptions{})
	if err != nil || tr.Status.Token != "tok" {
		t.Fatalf("token %+v, %v", tr, err)
	}
	if _, err := c.CoordinationV1().Leases("kube-node-lease").Get(ctx, "n", metav1.GetOptions{}); err == nil {
		t.Fatal("a missing lease was found")
	}
	_, _ = c.CertificatesV1().CertificateSigningRequests().Get(ctx, "csr-1", metav1.GetOptions{})
	_, _ = c.NodeV1().RuntimeClasses().Get(ctx, "rc", metav1.GetOptions{})
	want := []string{
		"GET /api/v1/namespaces/ns/pods/p",
		"POST /api/v1/namespaces/ns/serviceaccounts/sa/token",
		"GET /apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n",
		"GET /apis/certificates.k8s.io/v1/certificatesigningrequests/csr-1",
		"GET /apis/node.k8s.io/v1/runtimeclasses/rc",
	}
	if strings.Join(seen, "\n") != strings.Join(want, "\n") {
		t.Errorf("requests:\n%s\nwant:\n%s", strings.Join(seen, "\n"), strings.Join(want, "\n"))
	}
}

// TestServicesDoNotLinkClientGosClientset keeps the point of this package: only
// unitlet-status (whose node API authenticates through k8s.io/apiserver) may link
// client-go's clientset and with it every API group's types.
func TestServicesDoNotLinkClientGosClientset(t *testing.T) {
	for _, cmd := range []string{"unitlet-certs", "unitlet-config", "unitlet-podsync", "unitlet-volumes", "unitlet-eviction"} {
		out, err := exec.Command("go", "list", "-deps", "github.com/unitlet/unitlet/cmd/"+cmd).CombinedOutput()
		if err != nil {
			t.Fatalf("go list %s: %v\n%s", cmd, err, out)
		}
		for _, pkg := range strings.Fields(string(out)) {
			if pkg == "k8s.io/client-go/kubernetes" || pkg == "k8s.io/client-go/kubernetes/scheme" {
				t.Errorf("%s links %s: use kubeapi's client (go mod why -m, or go list -deps, shows the importer)", cmd, pkg)
			}
		}
	}
}

// TestGroupsShareOneRateLimiter keeps kubeAPIQPS the node's budget, as client-go's
// clientset does, not one budget per API group.
func TestGroupsShareOneRateLimiter(t *testing.T) {
	c, err := NewForConfig(&rest.Config{Host: "https://127.0.0.1:6443", QPS: 5, Burst: 10})
	if err != nil {
		t.Fatal(err)
	}
	cs := c.(*clientset)
	limiter := cs.core.r.GetRateLimiter()
	if limiter == nil || limiter.QPS() != 5 {
		t.Fatalf("core limiter %v", limiter)
	}
	for _, r := range []rest.Interface{cs.coordination.r, cs.certificates.r, cs.node.r} {
		if r.GetRateLimiter() != limiter {
			t.Errorf("a group has its own rate limiter")
		}
	}
}
