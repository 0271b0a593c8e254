package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/unitlet/unitlet/cmd/unitletctl/cis"
)

// cisCmd checks this node against the worker-node section of the CIS Kubernetes Benchmark
// (see package cis) and prints every check's result; it fails when one fails. It reads
// what the node runs, so it needs root: the units' and credentials' files, unitlet-config's
// environment in /proc.
func cisCmd(ctx context.Context, g globals, sys cis.System) error {
	node, problems := cis.Collect(ctx, sys)
	r := &cis.Report{Benchmark: cis.Benchmark, Node: node.Name, Findings: cis.Run(node), Problems: problems}
	if g.output == "json" {
		enc := json.NewEncoder(g.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(r); err != nil {
			return err
		}
	} else if err := cis.WriteTable(g.stdout, r); err != nil {
		return err
	}
	if n := r.Failed(); n > 0 {
		return fmt.Errorf("%d of %d CIS checks failed", n, len(r.Findings))
	}
	return nil
}
