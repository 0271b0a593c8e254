package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	daemonv1 "github.com/unitlet/unitlet/proto/unitlet/daemon/v1"
	"github.com/unitlet/unitlet/shared/bus"
)

// Mixed versions: a node whose services run different builds, as during a rolling upgrade
// one unit at a time. The previous release's binaries (make prev-release) are named to
// the tests by UNITLET_PREV_BIN_DIR; SwapServiceBinary puts one of them, or this build's
// again, in place of a running service and checks by the service's own GetInfo that the
// build asked for is the one answering.

// prevBinaries are the binaries the mixed-version tests need from the previous release.
var prevBinaries = []string{"unitlet-config", "unitlet-certs", "unitlet-podsync", "unitlet-status", "unitlet-volumes", "unitlet-eviction", "unitletctl"}

// PrevBinDir is $UNITLET_PREV_BIN_DIR, the previous release's binaries, once each of them
// is there; the error says how to get them.
func PrevBinDir() (string, error) {
	dir := os.Getenv("UNITLET_PREV_BIN_DIR")
	if dir == "" {
		return "", errors.New("UNITLET_PREV_BIN_DIR is not set: run `make prev-release` and name its bin directory " +
			"(~/.cache/unitlet/prev-release/<PREV_RELEASE>/bin), as `make test-integration` does")
	}
	for _, b := range prevBinaries {
		if fi, err := os.Stat(filepath.Join(dir, b)); err != nil || fi.Mode()&0o111 == 0 {
			return "", fmt.Errorf("UNITLET_PREV_BIN_DIR=%s has no executable %s: run `make prev-release`", dir, b)
		}
	}
	return dir, nil
}

// UnitletBinary is this build's binary name as the stack's nodes run it.
func (h *Harness) UnitletBinary(name string) string { return filepath.Join(h.binDir(), name) }

// Build is what a binary says it is: its version and git commit, as --version prints them
// and GetInfo reports them.
type Build struct {
	Version, Commit string
}

func (b Build) String() string { return b.Version }

// BinaryBuild runs bin --version and reads its build from the line it prints:
// "unitlet-podsync v0.1.0 (commit <sha>, go1.26 linux/amd64)".
func BinaryBuild(bin string) (Build, error) {
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return Build{}, fmt.Errorf("%s --version: %w", bin, err)
	}
	line := strings.TrimSpace(string(out))
	f := strings.Fields(line)
	_, rest, ok := strings.Cut(line, "(commit ")
	commit, _, _ := strings.Cut(rest, ",")
	if len(f) < 2 || !ok || commit == "" {
		return Build{}, fmt.Errorf("%s --version: %q is not \"<name> <version> (commit <sha>, ...)\"", bin, line)
	}
	return Build{Version: f[1], Commit: commit}, nil
}

// ServiceInfo is a unitlet service's GetInfo over its bus socket on node.
func (h *Harness) ServiceInfo(ctx context.Context, node, svc string) (*daemonv1.GetInfoResponse, error) {
	conn, err := bus.Dial(h.NodeSocketDir(node), svc)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	return daemonv1.NewDaemonServiceClient(conn).GetInfo(ctx, &daemonv1.GetInfoRequest{})
}

// SwapServiceBinary makes unitlet service svc of node run the binary bin (another build's,
// or this build's again): on an nspawn node it replaces the machine's /usr/bin/unitlet-<svc>
// and restarts the unit; a host service (volumes beside an nspawn machine) is stopped and
// started again from bin. It returns once the service answers GetInfo with bin's version
// and commit, from a new process.
func (h *Harness) SwapServiceBinary(ctx context.Context, node, svc, bin string) (*daemonv1.GetInfoResponse, error) {
	want, err := BinaryBuild(bin)
	if err != nil {
		return nil, err
	}
	var before int32
	if info, err := h.ServiceInfo(ctx, node, svc); err == nil {
		before = info.GetPid()
	}
	switch backend := h.serviceBackend(node, svc); backend {
	case "nspawn":
		dst := filepath.Join(h.machineDir(node), "rootfs", "usr", "bin", "unitlet-"+svc)
		if err := copyExecutable(bin, dst); err != nil {
			return nil, fmt.Errorf("install %s as unitlet-%s in the machine of %s: %w", bin, svc, node, err)
		}
		if out, err := h.Exec(node, []string{"systemctl", "restart", "unitlet-" + svc + ".service"}).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("restart unitlet-%s on %s: %v: %s", svc, node, err, out)
		}
	case "host":
		n, ok := h.node(node)
		if !ok {
			return nil, fmt.Errorf("swap unitlet-%s: no node %s", svc, node)
		}
		st := h.loadState()
		if p := st.Procs[node+"/unitlet-"+svc]; p != nil {
			if err := p.stop(30 * time.Second); err != nil {
				return nil, fmt.Errorf("stop unitlet-%s of %s: %w", svc, node, err)
			}
		}
		if err := h.ensure(ctx, st, h.hostServiceFrom(n, svc, bin)); err != nil {
			return nil, fmt.Errorf("start unitlet-%s of %s from %s: %w", svc, node, bin, err)
		}
	default:
		return nil, fmt.Errorf("swap unitlet-%s of %s: its backend %q is not supported (nspawn units and host services are)", svc, node, backend)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		info, err := h.ServiceInfo(ctx, node, svc)
		if err == nil && info.GetVersion() == want.Version && info.GetGitCommit() == want.Commit && info.GetPid() != before {
			return info, nil
		}
		last := fmt.Sprint(err)
		if err == nil {
			last = fmt.Sprintf("version %s commit %s pid %d (before: pid %d)", info.GetVersion(), info.GetGitCommit(), info.GetPid(), before)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("unitlet-%s of %s does not answer as %s (commit %s) from a new process: %s", svc, node, want.Version, want.Commit, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// InstallInNode copies the host file from into an nspawn node's machine as path, mode 0755
// (an older unitletctl beside the node's own, say).
func (h *Harness) InstallInNode(node, from, path string) error {
	if b := h.nodeBackend(node); b != "nspawn" {
		return fmt.Errorf("install %s in %s: only an nspawn node's machine takes files (the node's backend is %q)", from, node, b)
	}
	dst := filepath.Join(h.machineDir(node), "rootfs", path)
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	return copyExecutable(from, dst)
}

// node is the stack's node named name.
func (h *Harness) node(name string) (Node, bool) {
	for _, n := range h.stack.Nodes {
		if n.Name == name {
			return n, true
		}
	}
	return Node{}, false
}
