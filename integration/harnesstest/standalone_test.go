package harnesstest

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/unitlet/unitlet/integration"
	"github.com/unitlet/unitlet/integration/harness"
)

// TestStandaloneNodeRunsExamples is what `make run` does: the standalone stack (no control
// plane) with deploy/examples/'s static pods, which run and become ready with no API
// server; down leaves nothing behind.
func TestStandaloneNodeRunsExamples(t *testing.T) {
	// Serial: brings a second stack up and down.
	repo, err := integration.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	h, err := harness.New(filepath.Join(repo, "integration", "stacks", "standalone.yaml"), repo, &out)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	downed := false
	defer func() {
		if !downed {
			_ = h.Down()
		}
	}()
	if err := h.Up(ctx); err != nil {
		t.Fatalf("up: %v\n%s\n%s", err, out.String(), h.Logs(30))
	}
	examples, err := filepath.Glob(filepath.Join(repo, "deploy", "examples", "*.yaml"))
	if err != nil || len(examples) == 0 {
		t.Fatalf("no examples in deploy/examples: %v", err)
	}
	for _, e := range examples {
		b, err := os.ReadFile(e)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(h.NodeManifestDir("local"), filepath.Base(e)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	h.WaitFor(t, 2*time.Minute, "every example pod running and ready", func(ctx context.Context) (bool, string) {
		raw, err := h.Exec("local", []string{"unitletctl", "pods", "-o", "json"}).Output()
		if err != nil {
			return false, err.Error()
		}
		var rows []struct {
			Name   string           `json:"name"`
			Status corev1.PodStatus `json:"status"`
		}
		if err := json.Unmarshal(raw, &rows); err != nil {
			return false, err.Error()
		}
		ready := 0
		for _, r := range rows {
			if r.Status.Phase == corev1.PodRunning && conditionIs(r.Status, corev1.PodReady, corev1.ConditionTrue) {
				ready++
			}
		}
		return ready == len(examples) && len(rows) == len(examples), string(raw)
	})
	// unitlet-status runs standalone: nothing to write, the node API on the stack's port.
	nodeOut, err := h.Exec("local", []string{"unitletctl", "node", "-o", "json"}).CombinedOutput()
	var node struct {
		Standalone     bool   `json:"standalone"`
		NodeAPIAddress string `json:"nodeApiAddress"`
	}
	if err != nil || json.Unmarshal(nodeOut, &node) != nil || !node.Standalone || !strings.HasSuffix(node.NodeAPIAddress, ":10350") {
		t.Errorf("unitletctl node: %s (%v), want a standalone node with its node API on :10350", nodeOut, err)
	}
	insecure := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := insecure.Get("https://127.0.0.1:10350/healthz")
	if err != nil {
		t.Errorf("the standalone node API: %v", err)
	} else {
		resp.Body.Close()
		t.Logf("standalone GET /healthz without credentials: %s", resp.Status)
	}
	st := h.Status()
	downed = true
	if err := h.Down(); err != nil {
		t.Fatalf("down: %v", err)
	}
	for _, c := range st {
		if syscall.Kill(c.PID, 0) == nil {
			t.Errorf("down left %s (pid %d) running", c.Name, c.PID)
		}
	}
	if _, err := os.Stat(h.Dir()); !os.IsNotExist(err) {
		t.Errorf("down left %s behind", h.Dir())
	}
}
