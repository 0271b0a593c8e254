package harness

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
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
	if b := h.nodeBackend(name); b == "nspawn" || b == "vm" {
		var pids []int
		for _, n := range h.stack.Nodes {
			if n.Name != name {
				continue
			}
			for _, svc := range n.Services {
				if pid, err := h.ServicePID(name, svc); err == nil {
					pids = append(pids, pid)
				}
			}
		}
		return pids
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

// ServicePID is the host pid of a unitlet service of a node: its process (process backend),
// or the main process of its unit in the machine (nspawn backend); for a vm node, the
// unit's MainPID in the guest (it has its own kernel).
func (h *Harness) ServicePID(node, svc string) (int, error) {
	switch h.serviceBackend(node, svc) {
	case "nspawn":
		out, err := h.execInMachine(node, []string{"systemctl", "show", "--property=MainPID", "--value", "unitlet-" + svc + ".service"}).Output()
		if err != nil {
			return 0, fmt.Errorf("the main pid of unitlet-%s on %s: %w", svc, node, err)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
		if err != nil || pid == 0 {
			return 0, fmt.Errorf("unitlet-%s.service on %s has no main process (MainPID=%s)", svc, node, strings.TrimSpace(string(out)))
		}
		pid1, err := h.machinePID1(node)
		if err != nil {
			return 0, err
		}
		return hostPID(pid1, pid)
	case "vm":
		return h.vmServiceMainPID(node, svc)
	case "process", "host":
		if p := h.loadState().Procs[node+"/unitlet-"+svc]; p.alive() {
			return p.PID, nil
		}
		return 0, fmt.Errorf("unitlet-%s of %s is not running", svc, node)
	}
	return 0, fmt.Errorf("node %s runs no unitlet services", node)
}

// serviceBackend is how a node's service runs: "process" or "nspawn" as its node, or
// "host" for an nspawn node's host service (a process beside the machine).
func (h *Harness) serviceBackend(node, svc string) string {
	for _, n := range h.stack.Nodes {
		if n.Name == node && slices.Contains(n.HostServices, svc) {
			return "host"
		}
	}
	return h.nodeBackend(node)
}

// StopService stops a unitlet service of a node until StartService, so that nothing
// answers on its bus socket: a process node's process; on an nspawn node, the service's
// unit and its socket unit (with the socket listening, systemd would start it again).
func (h *Harness) StopService(node, svc string) error {
	switch h.serviceBackend(node, svc) {
	case "nspawn", "vm":
		out, err := h.Exec(node, []string{"systemctl", "stop", "unitlet-" + svc + ".socket", "unitlet-" + svc + ".service"}).CombinedOutput()
		if err != nil {
			return fmt.Errorf("stop unitlet-%s on %s: %v: %s", svc, node, err, out)
		}
		return nil
	case "process", "host":
		p := h.loadState().Procs[node+"/unitlet-"+svc]
		if p == nil {
			return fmt.Errorf("stop unitlet-%s on %s: not started", svc, node)
		}
		return p.stop(30 * time.Second)
	}
	return fmt.Errorf("stop unitlet-%s: node %s runs no unitlet services", svc, node)
}

// StartService starts a unitlet service of a node again unless it runs (for an nspawn node,
// its socket and service units) and waits until it answers on its socket.
func (h *Harness) StartService(ctx context.Context, node, svc string) error {
	switch h.serviceBackend(node, svc) {
	case "host":
		return h.Up(ctx) // starts what is not running, leaves the rest
	case "process":
		return h.StartNode(ctx, node)
	}
	out, err := h.Exec(node, []string{"systemctl", "start", "unitlet-" + svc + ".socket", "unitlet-" + svc + ".service"}).CombinedOutput()
	if err != nil {
		return fmt.Errorf("start unitlet-%s on %s: %v: %s", svc, node, err, out)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		err := serving(ctx, h.NodeSocketDir(node), svc)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("unitlet-%s on %s does not answer: %w", svc, node, err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}
