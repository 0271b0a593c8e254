package harnesstest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// nspawnNode is the stack's node booted as a systemd-nspawn machine.
func nspawnNode(t *testing.T) string {
	t.Helper()
	for _, n := range stack.Stack().Nodes {
		if n.Backend == "nspawn" {
			return n.Name
		}
	}
	t.Fatalf("stack %s has no node with backend nspawn (integration/stacks/single-node.yaml has node-1)", stack.Stack().Name)
	return ""
}

// configAnswers checks that unitletctl inside the node gets the node's configuration.
func configAnswers(t *testing.T, node string) {
	t.Helper()
	out := stack.InNode(t, node, "unitletctl", "config", "-o", "json")
	if !strings.Contains(out, `"failCgroupV1": false`) {
		t.Fatalf("unitletctl config on %s: not the harness's configuration:\n%s", node, out)
	}
}

func TestNspawnNodeBootsWithSystemd(t *testing.T) {
	t.Parallel()
	node := nspawnNode(t)
	// The harness waits for "running": a failed unit fails `up` with the units named.
	if st, _ := stack.Exec(node, []string{"systemctl", "is-system-running"}).Output(); strings.TrimSpace(string(st)) != "running" {
		failed, _ := stack.Exec(node, []string{"systemctl", "--failed", "--plain", "--no-legend"}).CombinedOutput()
		t.Fatalf("systemctl is-system-running on %s: %q; failed units:\n%s", node, st, failed)
	}
	if got := stack.InNode(t, node, "hostname"); got != node {
		t.Errorf("hostname in the machine: %q, want %q", got, node)
	}
	if got := stack.InNode(t, node, "systemctl", "is-enabled", "unitlet.target"); got != "enabled" {
		t.Errorf("unitlet.target: %s, want enabled", got)
	}
	if got := stack.InNode(t, node, "getent", "group", "unitlet"); !strings.HasPrefix(got, "unitlet:") {
		t.Errorf("sysusers.d did not create the unitlet group: %q", got)
	}
}

func TestNspawnNodeSocketActivatesConfig(t *testing.T) {
	// Serial: stops unitlet-config.
	node := nspawnNode(t)
	// Stopped, the service is started again by the first connection to its socket. The
	// node's other services hold streams to it and reconnect at once, so that connection
	// may come before this test's: the service is then already a new invocation, started by
	// its socket (stop never triggers Restart=).
	before := stack.UnitProps(t, node, "unitlet-config.service", "InvocationID")["InvocationID"]
	stack.InNode(t, node, "systemctl", "stop", "unitlet-config.service")
	after := stack.UnitProps(t, node, "unitlet-config.service", "ActiveState", "InvocationID")
	switch st := after["ActiveState"]; {
	case st == "inactive":
	case (st == "activating" || st == "active") && after["InvocationID"] != before:
		t.Logf("unitlet-config.service after stop: %s again, a new invocation (a client connected to its socket first)", st)
	default:
		t.Fatalf("unitlet-config.service after stop: %s (invocation %s, before %s), want inactive or a new invocation", st, after["InvocationID"], before)
	}
	if st := stack.UnitProps(t, node, "unitlet-config.socket", "ActiveState")["ActiveState"]; st != "active" {
		t.Fatalf("unitlet-config.socket: %s, want active (listening)", st)
	}
	configAnswers(t, node)
	p := stack.UnitProps(t, node, "unitlet-config.service", "ActiveState", "MainPID")
	if p["ActiveState"] != "active" || p["MainPID"] == "0" {
		t.Fatalf("unitlet-config.service after a connection: %v, want active with a main process", p)
	}
}

func TestNspawnNodeRestartsKilledConfig(t *testing.T) {
	// Serial: SIGKILLs unitlet-config.
	node := nspawnNode(t)
	configAnswers(t, node) // running, socket-activated if it was not
	before := stack.UnitProps(t, node, "unitlet-config.service", "MainPID", "NRestarts")
	// The main process alone: signalling the unit's whole cgroup also reaches a control
	// process that may be ending there (an ExecStopPost= of the stop before), and systemd
	// in the machine then fails the call ("Failed to send signal SIGKILL to auxiliary
	// processes: Input/output error").
	stack.InNode(t, node, "systemctl", "kill", "--kill-who=main", "--signal=KILL", "unitlet-config.service")
	// Asked during the restart (RestartSec=1), the call waits in the socket's backlog and
	// the next process answers it.
	start := time.Now()
	configAnswers(t, node)
	t.Logf("unitletctl config answered %s after the SIGKILL", time.Since(start).Round(10*time.Millisecond))
	stack.WaitFor(t, 30*time.Second, "systemd restarts the killed unitlet-config", func(ctx context.Context) (bool, string) {
		after := stack.UnitProps(t, node, "unitlet-config.service", "MainPID", "NRestarts", "ActiveState")
		n0, _ := strconv.Atoi(before["NRestarts"])
		n1, _ := strconv.Atoi(after["NRestarts"])
		ok := after["ActiveState"] == "active" && after["MainPID"] != "0" && after["MainPID"] != before["MainPID"] && n1 > n0
		return ok, fmt.Sprintf("before %v, now %v", before, after)
	})
	configAnswers(t, node)
}

func TestNspawnNodeConfigMemoryLimit(t *testing.T) {
	t.Parallel()
	node := nspawnNode(t)
	configAnswers(t, node)
	p := stack.UnitProps(t, node, "unitlet-config.service", "MemoryMax", "ControlGroup")
	if p["MemoryMax"] != "134217728" {
		t.Fatalf("MemoryMax of unitlet-config.service: %q, want 134217728 (MemoryMax=128M)", p["MemoryMax"])
	}
	// systemd has the limit; whether a cgroup file carries it depends on the host. On a
	// cgroup v1 host without systemd no controller is delegated to the machine, so none
	// does: report what there is (the VM backend proves the files).
	cg := p["ControlGroup"]
	found := false
	for _, f := range []string{"/sys/fs/cgroup" + cg + "/memory.max", "/sys/fs/cgroup/unified" + cg + "/memory.max", "/sys/fs/cgroup/memory" + cg + "/memory.limit_in_bytes"} {
		out, err := stack.Exec(node, []string{"cat", f}).Output()
		if err != nil {
			continue
		}
		found = true
		if got := strings.TrimSpace(string(out)); got != "134217728" {
			t.Errorf("cgroup file %s = %s, want 134217728", f, got)
		} else {
			t.Logf("cgroup check: %s = %s", f, got)
		}
	}
	if !found {
		ctrl, _ := stack.Exec(node, []string{"cat", "/sys/fs/cgroup/unified" + cg + "/cgroup.controllers"}).Output()
		t.Logf("cgroup check: no cgroup file of %s carries a memory limit (controllers enabled in its cgroup v2 group: %q): MemoryMax is accepted by systemd but not enforced on this host", cg, strings.TrimSpace(string(ctrl)))
	}
}
