package harnesstest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// nodeAPIGet GETs base+path with client, the status and body; an error (the node API
// restarting) is status 0 with the error as the body.
func nodeAPIGet(ctx context.Context, client *http.Client, url string) (int, string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err.Error()
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, string(b)
}

// With the debugging handlers (the default) the node API serves /configz and answers
// profiling and log-verbosity as the kubelet with those handlers off; it serves no /spec.
// With enableDebuggingHandlers: false (a drop-in, which restarts unitlet-status) it
// answers as the v1.36 kubelet: /configz is not served (404), container logs, exec,
// /runningpods/, /debug/pprof/ and /logs/ are 405 "Debug endpoints are disabled.", while
// /pods, /healthz, /stats/summary and /metrics stay. The drop-in removed, /configz is back.
func TestNodeAPIWithoutDebuggingHandlers(t *testing.T) {
	// Serial: changes the node configuration (config drop-in) and restarts unitlet-status.
	base := nodeAPI(t)
	c := adminNodeAPIClient(t, 10*time.Second)
	ctx := context.Background()

	for _, tc := range []struct {
		path string
		code int
		body string
	}{
		{"/configz", http.StatusOK, `"kubeletconfig"`},
		{"/spec", http.StatusNotFound, ""},
		{"/spec/", http.StatusNotFound, ""},
		{"/debug/pprof/", http.StatusMethodNotAllowed, "profiling endpoint is disabled."},
		{"/debug/flags/v", http.StatusMethodNotAllowed, "flags endpoint is disabled."},
	} {
		if code, body := nodeAPIGet(ctx, c, base+tc.path); code != tc.code || !strings.Contains(body, tc.body) {
			t.Errorf("with the debugging handlers: GET %s: %d %.300q, want %d %q", tc.path, code, body, tc.code, tc.body)
		}
	}

	const dropIn = "/etc/unitlet/config.d/90-no-debugging-handlers-test.conf"
	stack.InNode(t, podsyncNode, "sh", "-c", "printf 'apiVersion: kubelet.config.k8s.io/v1beta1\\nkind: KubeletConfiguration\\nenableDebuggingHandlers: false\\n' > "+dropIn+".tmp && chmod 0600 "+dropIn+".tmp && mv "+dropIn+".tmp "+dropIn)
	restored := false
	t.Cleanup(func() {
		if restored {
			return
		}
		_ = stack.Exec(podsyncNode, []string{"rm", "-f", dropIn}).Run()
		// Leave the node API as the other tests expect it.
		stack.WaitFor(t, 2*time.Minute, "/configz served again after the drop-in's removal", func(ctx context.Context) (bool, string) {
			code, body := nodeAPIGet(ctx, c, base+"/configz")
			return code == http.StatusOK, fmt.Sprintf("%d %.200s", code, body)
		})
	})
	stack.WaitFor(t, 2*time.Minute, "unitlet-status restarted without the debugging handlers (/configz 404)", func(ctx context.Context) (bool, string) {
		code, body := nodeAPIGet(ctx, c, base+"/configz")
		return code == http.StatusNotFound, fmt.Sprintf("GET /configz: %d %.200s", code, body)
	})

	for _, path := range []string{"/configz", "/spec", "/debug/flags/v"} {
		if code, body := nodeAPIGet(ctx, c, base+path); code != http.StatusNotFound {
			t.Errorf("without the debugging handlers: GET %s: %d %.300q, want 404", path, code, body)
		}
	}
	for _, path := range []string{"/logs/", "/logs/syslog", "/logs/?query=unitlet-status", "/debug/pprof/", "/debug/pprof/heap", "/runningpods/", "/containerLogs/kube-system/nothing/app"} {
		if code, body := nodeAPIGet(ctx, c, base+path); code != http.StatusMethodNotAllowed || body != "Debug endpoints are disabled.\n" {
			t.Errorf("without the debugging handlers: GET %s: %d %.300q, want 405 \"Debug endpoints are disabled.\"", path, code, body)
		}
	}
	for _, path := range []string{"/pods", "/healthz", "/stats/summary", "/metrics"} {
		if code, body := nodeAPIGet(ctx, c, base+path); code != http.StatusOK {
			t.Errorf("without the debugging handlers: GET %s: %d %.300q, want 200", path, code, body)
		}
	}
	// The same through the API server's node proxy, as kubectl get --raw reaches it.
	if code, body := nodeProxyGet(ctx, t, "/configz"); code != http.StatusNotFound {
		t.Errorf("without the debugging handlers: GET /configz through the node proxy: %d %.300s, want 404", code, body)
	}

	stack.InNode(t, podsyncNode, "rm", dropIn)
	restored = true
	stack.WaitFor(t, 2*time.Minute, "/configz served again after the drop-in's removal", func(ctx context.Context) (bool, string) {
		code, body := nodeAPIGet(ctx, c, base+"/configz")
		return code == http.StatusOK && strings.Contains(body, `"kubeletconfig"`), fmt.Sprintf("%d %.200s", code, body)
	})
	waitNodeReady(t, time.Minute)
}
