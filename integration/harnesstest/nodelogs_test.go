package harnesstest

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
)

// proxyGet GETs path on node's API through the API server's node proxy
// (/api/v1/nodes/<node>/proxy<path>), as `kubectl get --raw` does, as the cluster admin.
func proxyGet(t *testing.T, node, path string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rc, err := clientcmd.BuildConfigFromFlags("", stack.AdminKubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	hc, err := rest.HTTPClientFor(rc)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(rc.Host, "/")+"/api/v1/nodes/"+node+"/proxy"+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("GET %s through the node proxy: %v", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s through the node proxy: %v", path, err)
	}
	code := resp.StatusCode
	return code, string(body)
}

// TestNodeLogQuery: the node log query (enableSystemLogQuery, on in single-node.yaml) read
// through the API server's node proxy answers with the journal of unitlet-podsync, which
// runs under its unit on node-1 beside unitlet-status, itself under its shipped unit's
// sandbox; a bad parameter is refused naming it.
func TestNodeLogQuery(t *testing.T) {
	t.Parallel()
	waitNodeReady(t, 90*time.Second)
	// short-precise: "Nov 26 01:47:37.123456 node-1 unitlet-podsync[123]: ...".
	podsyncLine := regexp.MustCompile(`^[A-Z][a-z]{2} [ 0-9]\d \d\d:\d\d:\d\d\.\d{6} \S+ unitlet-podsync\[\d+\]: `)

	code, body := proxyGet(t, podsyncNode, "/logs/?query=unitlet-podsync&tailLines=5")
	lines := strings.Split(strings.TrimRight(body, "\n"), "\n")
	if code != http.StatusOK || len(lines) != 5 {
		t.Fatalf("the last 5 lines of unitlet-podsync's journal: %d, %d lines:\n%s", code, len(lines), body)
	}
	for _, l := range lines {
		if !podsyncLine.MatchString(l) {
			t.Errorf("line %q is not one of unitlet-podsync's in the journal (short-precise)", l)
		}
	}

	// pattern (journalctl --grep, PCRE2 in the unit's sandbox) and a time range.
	since := time.Now().Add(-24 * time.Hour).UTC().Format(time.RFC3339)
	code, body = proxyGet(t, podsyncNode, "/logs/?query=unitlet-podsync&tailLines=3&pattern=level%3DINFO&sinceTime="+since)
	lines = strings.Split(strings.TrimRight(body, "\n"), "\n")
	if code != http.StatusOK || len(lines) == 0 || len(lines) > 3 {
		t.Fatalf("unitlet-podsync's INFO lines: %d, %d lines:\n%s", code, len(lines), body)
	}
	for _, l := range lines {
		if !podsyncLine.MatchString(l) || !strings.Contains(l, "level=INFO") {
			t.Errorf("line %q does not match pattern level=INFO", l)
		}
	}

	for _, tc := range []struct {
		query string
		code  int
		want  string
	}{
		{"query=unitlet-podsync&tailLines=five", http.StatusBadRequest, `tailLines: Invalid value: "five"`},
		{"query=unitlet-podsync&sinceTime=yesterday", http.StatusBadRequest, `sinceTime: Invalid value: "yesterday": invalid time format`},
		{"query=unitlet-podsync&tailLines=-1", http.StatusNotAcceptable, "tailLines: Invalid value: -1: must be between 0 and 100000, inclusive"},
		{"query=unitlet-podsync&boot=1", http.StatusNotAcceptable, "boot: Invalid value: 1: must be less than 1"},
		{"query=unitlet-podsync&pattern=%28", http.StatusNotAcceptable, `pattern: Invalid value: "("`},
		{"query=unitlet-podsync%20--merge", http.StatusNotAcceptable, "input contains unsupported characters"},
	} {
		code, body := proxyGet(t, podsyncNode, "/logs/?"+tc.query)
		if code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("/logs/?%s: %d %q, want %d with %q", tc.query, code, body, tc.code, tc.want)
		}
	}

	// /logs/ also lists and serves the files under /var/log.
	if code, body := proxyGet(t, podsyncNode, "/logs/"); code != http.StatusOK || !strings.Contains(body, `href="pods/"`) {
		t.Errorf("/logs/: %d %.300q, want the listing of /var/log with pods/", code, body)
	}
}

// TestNodeLogQueryNeedsNodesLog: on the node API itself (the API server's proxy calls it
// as the API server), a caller allowed only "get nodes/proxy" is refused /logs/, which is
// authorized as nodes/log, and one allowed "get nodes/log" reads the journal.
func TestNodeLogQueryNeedsNodesLog(t *testing.T) {
	t.Parallel()
	base := nodeAPI(t)
	anon := &http.Client{Timeout: 40 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the node's serving certificate is not what this test checks
	proxyOnly := serviceAccountToken(t, "nodelogs-proxy-only", "nodes/proxy")
	logReader := serviceAccountToken(t, "nodelogs-reader", "nodes/log")

	// RBAC reaches the authorizer's cache in a moment; refusals are cached for
	// cacheUnauthorizedTTL, so this waits on what each role allows.
	stack.WaitFor(t, time.Minute, "GET /pods allowed with get nodes/proxy", func(context.Context) (bool, string) {
		code, body := getStatus(t, anon, base+"/pods", proxyOnly)
		return code == http.StatusOK, fmt.Sprintf("%d %.200s", code, body)
	})
	stack.WaitFor(t, time.Minute, "the node log query allowed with get nodes/log", func(context.Context) (bool, string) {
		code, body := getStatus(t, anon, base+"/logs/?query=unitlet-status&tailLines=2", logReader)
		return code == http.StatusOK && strings.Contains(body, "unitlet-status["), fmt.Sprintf("%d %.300s", code, body)
	})
	code, body := getStatus(t, anon, base+"/logs/?query=unitlet-status&tailLines=2", proxyOnly)
	if code != http.StatusForbidden || !strings.Contains(body, "subresource(s)=[log]") {
		t.Errorf("the node log query with only get nodes/proxy: %d %q, want 403 naming nodes/log", code, body)
	}
}

// serviceAccountToken makes a ServiceAccount in default bound to a ClusterRole allowing
// "get" on resources (e.g. "nodes/log"), removed when the test ends, and returns a token.
func serviceAccountToken(t *testing.T, name string, resources ...string) string {
	t.Helper()
	c := admin(t)
	ctx := context.Background()
	if _, err := c.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.CoreV1().ServiceAccounts("default").Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: resources, Verbs: []string{"get"}}}}
	if _, err := c.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.RbacV1().ClusterRoles().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: "default"}},
	}
	if _, err := c.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.RbacV1().ClusterRoleBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	tok, err := c.CoreV1().ServiceAccounts("default").CreateToken(ctx, name, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tok.Status.Token
}
