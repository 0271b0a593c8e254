package harness

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// The nodes of a stack share its containerd, and a node agent (unitlet-podsync, the
// kubelet) stops the runtime's pods it was not asked to run. A stack may still hold
// several agents' nodes when only one runs at a time: StopNode and StartNode switch them
// (the side-by-side benchmark measures unitlet, stops it, starts the kubelet).

// StopNode stops every process of the node (its services, or its kubelet), leaving the
// stack's other parts running. The runtime's pods stay as they are.
func (h *Harness) StopNode(name string) error {
	if !h.HasNode(name) {
		return fmt.Errorf("stop node %s: no such node in stack %s", name, h.stack.Name)
	}
	st := h.loadState()
	procs := sortedNodeProcs(st, name)
	// The services started after unitlet-config stop before it.
	slices.Reverse(procs)
	for _, c := range procs {
		if err := st.Procs[c].stop(30 * time.Second); err != nil {
			return fmt.Errorf("stop node %s: %w", name, err)
		}
		fmt.Fprintf(h.out, "stopped %s (pid %d)\n", c, st.Procs[c].PID)
	}
	return nil
}

// StartNode starts the node's processes again (those not running and ready) and waits
// until they are ready.
func (h *Harness) StartNode(ctx context.Context, name string) error {
	for _, n := range h.stack.Nodes {
		if n.Name != name {
			continue
		}
		if !h.stack.Standalone && h.bins == nil {
			b, err := EnsureBinaries(h.repo, h.out)
			if err != nil {
				return err
			}
			h.bins = b
		}
		files, err := h.makePKI()
		if err != nil {
			return fmt.Errorf("start node %s: %w", name, err)
		}
		st := h.loadState()
		for _, c := range h.nodeComponents(n, files) {
			if err := h.ensure(ctx, st, c); err != nil {
				return fmt.Errorf("start node %s: %w", name, err)
			}
		}
		return nil
	}
	return fmt.Errorf("start node %s: no such node in stack %s", name, h.stack.Name)
}

// NodeAgentPIDs are the pids of the node's agent: its unitlet services (process backend),
// or the kubelet itself, not its wrapper (kubelet backend). Those not running are left out.
func (h *Harness) NodeAgentPIDs(name string) []int {
	if h.nodeBackend(name) == "kubelet" {
		if pid := h.kubeletPID(name); pid > 0 {
			return []int{pid}
		}
		return nil
	}
	st := h.loadState()
	var pids []int
	for _, c := range sortedNodeProcs(st, name) {
		if p := st.Procs[c]; p.alive() {
			pids = append(pids, p.PID)
		}
	}
	return pids
}

// sortedNodeProcs names the recorded processes of node, in order.
func sortedNodeProcs(st *state, node string) []string {
	var names []string
	for c := range st.Procs {
		if strings.HasPrefix(c, node+"/") {
			names = append(names, c)
		}
	}
	sort.Strings(names)
	return names
}
