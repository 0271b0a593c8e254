package vmtest

import (
	"testing"
	"time"
)

// TestCISWorkerNodeChecks checks the vm node against the worker-node section of the CIS
// Kubernetes Benchmark with `unitletctl cis` inside the guest: the units systemd loaded,
// the files with their modes and owners, the configuration unitlet-config serves, the
// running unitlet-config's command line and the node API as a client in the node sees it.
// Every applicable check passes with the shipped units and the harness's install.
func TestCISWorkerNodeChecks(t *testing.T) {
	n := vmNode(t)
	findings := stack.CheckCIS(t, n.Name, 3*time.Minute)
	// A node with its own kernel: protectKernelDefaults applies, and holds.
	for _, f := range findings {
		if f.ID == "4.2.K1" && f.Result != "PASS" {
			t.Errorf("4.2.K1 on the vm node: %s (%s), want PASS: the node has its own kernel", f.Result, f.Reason)
		}
	}
}
