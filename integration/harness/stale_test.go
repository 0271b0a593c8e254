package harness

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// staleHarness is a harness whose stack directory holds a state file naming procs and an
// etcd data file, as a killed run leaves them.
func staleHarness(t *testing.T, procs map[string]*proc) (*Harness, *bytes.Buffer) {
	t.Helper()
	root := filepath.Join(t.TempDir(), "stale")
	var out bytes.Buffer
	h := &Harness{stack: &Stack{Name: "stale", Runtime: Runtime{PodSubnet: "192.0.2.0/24"}}, out: &out, paths: newPaths(root)}
	if err := os.MkdirAll(filepath.Join(root, "etcd"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "etcd", "data"), []byte("old pods"), 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(state{Procs: procs})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(h.stateFile(), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return h, &out
}

// sleeper is a running process started as sleep.
func sleeper(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd.Process.Pid
}

// exitedPID is the PID of a process that has ended.
func exitedPID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}

func TestUpRemovesAStackWhoseProcessesAreGone(t *testing.T) {
	h, out := staleHarness(t, map[string]*proc{
		"etcd": {Name: "etcd", PID: exitedPID(t), Args: []string{"/usr/local/bin/etcd"}},
		// A live PID running another program: what a PID from before a reboot may be.
		"kube-apiserver": {Name: "kube-apiserver", PID: sleeper(t), Args: []string{"/usr/local/bin/kube-apiserver"}},
	})
	if err := h.removeStale(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(h.paths.root); !os.IsNotExist(err) {
		t.Fatalf("the earlier stack's directory is still there (%v); output:\n%s", err, out)
	}
	if !strings.Contains(out.String(), "none of its processes runs") {
		t.Errorf("removing it says nothing about why:\n%s", out)
	}
}

func TestUpJoinsARunningStack(t *testing.T) {
	h, out := staleHarness(t, map[string]*proc{
		"etcd": {Name: "etcd", PID: sleeper(t), Args: []string{"sleep"}},
	})
	if err := h.removeStale(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(h.paths.root, "etcd", "data")); err != nil {
		t.Fatalf("a running stack's data was touched: %v; output:\n%s", err, out)
	}
}
