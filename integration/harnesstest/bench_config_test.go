package harnesstest

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// vsPerNodeFields are the KubeletConfiguration fields that name the node's own files,
// addresses and credentials, which two agents on one host cannot share; every other field
// must be the same for the benchmark to compare like with like.
var vsPerNodeFields = []string{
	"address", "port", "healthzBindAddress", "healthzPort", "readOnlyPort",
	"tlsCertFile", "tlsPrivateKeyFile", "authentication.x509.clientCAFile",
	"serverTLSBootstrap", "rotateCertificates", "staticPodPath", "podLogsDir",
	"enableServer", "providerID",
	// The harness gives each unitlet node its own cgroup root, so that nodes sharing a
	// host never meet; the kubelet has the host's.
	"cgroupRoot",
	// The document's type, which unitlet's /configz leaves out.
	"apiVersion", "kind",
}

// vsSameConfig fails the benchmark unless the two nodes' agents run with the same
// KubeletConfiguration, as each serves it on /configz (through the API server's node
// proxy), but for vsPerNodeFields. Both must be running.
func vsSameConfig(b *testing.B, unitletNode, kubeletNode string) {
	b.Helper()
	u, err := nodeConfigz(b, unitletNode)
	if err != nil {
		b.Fatal(err)
	}
	k, err := nodeConfigz(b, kubeletNode)
	if err != nil {
		b.Fatal(err)
	}
	var diffs []string
	for _, key := range unionKeys(u, k) {
		if slices.Contains(vsPerNodeFields, key) {
			continue
		}
		if uv, kv := u[key], k[key]; !reflect.DeepEqual(uv, kv) && !(isZero(uv) && isZero(kv)) {
			diffs = append(diffs, fmt.Sprintf("  %s: unitlet %s, kubelet %s", key, compactJSON(uv), compactJSON(kv)))
		}
	}
	if len(diffs) > 0 {
		b.Fatalf("the agents' KubeletConfigurations differ (set the field alike for both nodes in the stack file):\n%s", strings.Join(diffs, "\n"))
	}
	fmt.Printf("unitlet and the kubelet run with the same KubeletConfiguration (%d fields compared; per node: %s)\n",
		len(unionKeys(u, k))-len(vsPerNodeFields), strings.Join(vsPerNodeFields, ", "))
}

// nodeConfigz is the node agent's /configz, flattened to dotted field paths.
func nodeConfigz(tb testing.TB, node string) (map[string]any, error) {
	c := admin(tb)
	raw, err := c.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes/" + node + "/proxy/configz").DoRaw(context.Background())
	if err != nil {
		return nil, fmt.Errorf("GET /configz of node %s: %w", node, err)
	}
	var doc struct {
		KubeletConfig map[string]any `json:"kubeletconfig"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil || doc.KubeletConfig == nil {
		return nil, fmt.Errorf("the /configz of node %s: want {\"kubeletconfig\": {...}}, got %.200s (%v)", node, raw, err)
	}
	out := map[string]any{}
	flatten("", doc.KubeletConfig, out)
	return out, nil
}

// flatten writes v's leaves into out by dotted path; lists are leaves.
func flatten(prefix string, v any, out map[string]any) {
	m, ok := v.(map[string]any)
	if !ok {
		out[prefix] = v
		return
	}
	for k, sub := range m {
		p := k
		if prefix != "" {
			p = prefix + "." + k
		}
		flatten(p, sub, out)
	}
}

// isZero: unset, or the zero value a /configz may leave out (false, 0, "", an empty list).
func isZero(v any) bool {
	switch v := v.(type) {
	case nil:
		return true
	case bool:
		return !v
	case float64:
		return v == 0
	case string:
		return v == ""
	case []any:
		return len(v) == 0
	case map[string]any:
		return len(v) == 0
	}
	return false
}

func unionKeys(a, b map[string]any) []string {
	var keys []string
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

func compactJSON(v any) string {
	if v == nil {
		return "(unset)"
	}
	out, _ := json.Marshal(v)
	return string(out)
}
