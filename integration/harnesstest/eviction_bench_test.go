package harnesstest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/unitlet/unitlet/integration/harness"
)

// BenchmarkEvictionAt100Pods (make bench-eviction, with
// UNITLET_STACK=integration/stacks/standalone.yaml): unitlet-eviction's resident memory and
// CPU while the node runs 100 pods (static pods on the standalone node, so no API server is
// needed), measured over 30 s of its rounds (every 10 s: the node's signals, every pod's
// usage for the local storage limits).
func BenchmarkEvictionAt100Pods(b *testing.B) {
	var node string
	for _, n := range stack.Stack().Nodes {
		if slices.Contains(n.Services, "eviction") && slices.Contains(n.Services, "podsync") && n.Backend == "process" {
			node = n.Name
		}
	}
	if node == "" {
		b.Fatalf("stack %s: want a process node running podsync and eviction (UNITLET_STACK=integration/stacks/standalone.yaml)", stack.Stack().Name)
	}
	ctx := context.Background()
	rt, err := stack.CRI()
	if err != nil {
		b.Fatal(err)
	}
	dir := stack.NodeManifestDir(node)
	names := podNames("ev-bench", 100)
	var static []string
	for _, name := range names {
		manifest := fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s, namespace: default}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - {name: c, image: %s, imagePullPolicy: Never, command: [sh, -c, "trap 'exit 0' TERM; sleep 3600 & wait"]}
`, name, harness.BusyboxImage)
		if err := os.WriteFile(filepath.Join(dir, name+".yaml"), []byte(manifest), 0o644); err != nil {
			b.Fatal(err)
		}
		static = append(static, name+"-"+node)
	}
	b.Cleanup(func() {
		for _, name := range names {
			_ = os.Remove(filepath.Join(dir, name+".yaml"))
		}
		if _, err := goneFromCRI(ctx, rt, "ev-bench-", 5*time.Minute); err != nil {
			b.Error(err)
		}
		rt.Close()
	})
	if _, err := runningByCRI(ctx, rt, static, 10*time.Minute); err != nil {
		b.Fatalf("%v\n%s", err, stack.Logs(30))
	}
	pid, err := stack.ServicePID(node, "eviction")
	if err != nil {
		b.Fatal(err)
	}
	rss, cores, err := usageOver([]int{pid}, 30*time.Second)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(rss/(1<<20), "eviction-RSS-MiB")
	b.ReportMetric(cores*100, "eviction-CPU-%")
	fmt.Printf("== unitlet-eviction at 100 pods\nRSS %.1f MiB, CPU %.2f%% of a core (30 s)\n", rss/(1<<20), cores*100)
}
