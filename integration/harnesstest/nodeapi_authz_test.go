package harnesstest

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// A role holding only "get nodes/proxy" (what monitoring roles hold) reads /pods on the
// node API but cannot open a WebSocket exec into a pod, though a WebSocket upgrade is a
// GET: the node API authorizes exec, attach, portForward and run as "create".
func TestNodeAPIGetProxyDoesNotMeanExec(t *testing.T) {
	t.Parallel()
	base := nodeAPI(t)
	createPod(t, busyboxPod("authz-target", "sleep 3600"))
	apiPodRunningReady(t, "authz-target", 2*time.Minute)
	bearer := serviceAccountToken(t, "nodes-proxy-get", "nodes/proxy")

	anon := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	// RBAC takes a moment to reach the authorizer's cache; the node API caches refusals
	// for cacheUnauthorizedTTL, so this waits on /pods, which the role allows.
	stack.WaitFor(t, time.Minute, "GET /pods allowed with get nodes/proxy", func(context.Context) (bool, string) {
		code, body := getStatus(t, anon, base+"/pods", bearer)
		return code == http.StatusOK, fmt.Sprintf("%d %.200s", code, body)
	})

	code, status := websocketExec(t, base, "/exec/default/authz-target/main?command=ls&output=1&error=1", bearer)
	if code != http.StatusForbidden || !strings.Contains(status, "verb=create") {
		t.Errorf("WebSocket exec with only get nodes/proxy: %d %q, want 403 naming verb=create", code, status)
	}
}

// websocketExec opens a WebSocket exec (a GET with an upgrade, v5.channel.k8s.io) on the
// node API and returns the response's status code and first line of body.
func websocketExec(t *testing.T, base, path, bearer string) (int, string) {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := tls.Dial("tcp", u.Host, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // the node's self-signed certificate
	if err != nil {
		t.Fatalf("dial the node API: %v", err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Protocol: v5.channel.k8s.io\r\n\r\n", path, u.Host, bearer)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("read the response: %v", err)
	}
	defer resp.Body.Close()
	line := ""
	if resp.StatusCode != http.StatusSwitchingProtocols {
		b := make([]byte, 300)
		n, _ := resp.Body.Read(b)
		line = strings.TrimSpace(string(b[:n]))
	}
	return resp.StatusCode, line
}
