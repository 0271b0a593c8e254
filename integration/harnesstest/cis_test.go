package harnesstest

import (
	"testing"
	"time"
)

// TestCISWorkerNodeChecksOnNspawnNode checks the nspawn node against the worker-node
// section of the CIS Kubernetes Benchmark with `unitletctl cis` inside the machine (see
// vmtest's TestCISWorkerNodeChecks). The machine shares the host's kernel, so
// protectKernelDefaults is N/A here, with the reason.
func TestCISWorkerNodeChecksOnNspawnNode(t *testing.T) {
	t.Parallel()
	stack.CheckCIS(t, nspawnNode(t), 3*time.Minute)
}
