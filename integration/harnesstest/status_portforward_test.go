package harnesstest

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestStatusStreamsOverWebSocketsFromTheAPIServer: the Node declares
// ExtendWebSocketsToKubelet (status.declaredFeatures), so the v1.36 API server proxies
// kubectl's WebSocket streams to the node API as they come rather than translating them
// to SPDY: `kubectl port-forward` (the port-forward tunnelling protocol) reaches a pod's
// HTTP server, and `kubectl exec` (v5.channel.k8s.io) returns its output and exit code.
func TestStatusStreamsOverWebSocketsFromTheAPIServer(t *testing.T) {
	t.Parallel()
	waitNodeReady(t, 90*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n, err := admin(t).CoreV1().Nodes().Get(ctx, podsyncNode, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(n.Status.DeclaredFeatures, "ExtendWebSocketsToKubelet") {
		t.Fatalf("declaredFeatures %v, want ExtendWebSocketsToKubelet", n.Status.DeclaredFeatures)
	}

	createPod(t, busyboxPod("ws-web", "mkdir -p /www && echo hello-over-websockets > /www/index.html && exec httpd -f -p 8080 -h /www"))
	apiPodRunningReady(t, "ws-web", time.Minute)

	cmd := kubectlCmd(ctx, t, "port-forward", "pod/ws-web", ":8080")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	forwarding := regexp.MustCompile(`Forwarding from 127\.0\.0\.1:(\d+) -> 8080`)
	lines := bufio.NewScanner(out)
	var port string
	for port == "" && lines.Scan() {
		if m := forwarding.FindStringSubmatch(lines.Text()); m != nil {
			port = m[1]
		}
	}
	if port == "" {
		t.Fatalf("kubectl port-forward printed no local port: %v", lines.Err())
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	resp, err := http.Get("http://127.0.0.1:" + port + "/index.html")
	if err != nil {
		t.Fatalf("GET through kubectl port-forward: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.TrimSpace(string(body)) != "hello-over-websockets" {
		t.Errorf("through kubectl port-forward: %s %q, want the pod's page", resp.Status, body)
	}

	got, err := kubectl(ctx, t, "exec", "ws-web", "--", "sh", "-c", "echo from-exec; exit 3")
	if !strings.Contains(got, "from-exec") || err == nil || !strings.Contains(err.Error(), "exit status 3") {
		t.Errorf("kubectl exec: %v %q, want the output and exit status 3", err, got)
	}

	// The API server's count says it proxied them to the node, translating none.
	raw, err := admin(t).CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, sub := range []string{"portforward", "exec"} {
		proxied := regexp.MustCompile(`(?m)^apiserver_websocket_streaming_requests_total\{[^}]*proxy_type="proxied_to_kubelet"[^}]*subresource="` + sub + `"[^}]*\} [1-9]`)
		if !proxied.Match(raw) {
			var seen []string
			for _, l := range strings.Split(string(raw), "\n") {
				if strings.HasPrefix(l, "apiserver_websocket_streaming_requests_total") {
					seen = append(seen, l)
				}
			}
			t.Errorf("the API server did not proxy a %s stream to the node: %v", sub, seen)
		}
	}
}
