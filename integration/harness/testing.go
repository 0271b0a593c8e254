package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/unitlet/unitlet/integration"
	"github.com/unitlet/unitlet/shared/promtext"
)

// MainStack is Main for a package of integration tests whose stack is stackFile in the
// repository's integration/stacks, unless $UNITLET_STACK names another.
func MainStack(m *testing.M, stackFile string, setShared func(*Harness)) int {
	repo, err := integration.RepoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if os.Getenv("UNITLET_STACK") == "" {
		os.Setenv("UNITLET_STACK", filepath.Join(repo, "integration", "stacks", stackFile))
	}
	return Main(m, repo, setShared)
}

// Main is TestMain for a package of integration tests that share one stack: it brings the
// stack up (the default stack, or $UNITLET_STACK), runs the tests, and takes it down unless
// $UNITLET_KEEP_STACK is set. A stack that does not come up fails the package with the
// components' logs.
func Main(m *testing.M, repo string, setShared func(*Harness)) int {
	keepInheritedFilesFromChildren()
	stack := os.Getenv("UNITLET_STACK")
	if stack == "" {
		stack = filepath.Join(repo, "integration", "stacks", "single-node.yaml")
	}
	h, err := New(stack, repo, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	unlock, err := lockStack(h.Dir())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Minute)
	defer cancel()
	if err := h.Up(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "the stack did not come up: %v\n%s", err, h.Logs(40))
		_ = h.Down()
		return 1
	}
	setShared(h)
	stopKeeping := h.KeepRuntime()
	ran := time.Now()
	code := m.Run()
	// Read by make test's table of suites (integration/suitetimes).
	fmt.Printf("stack %s: tests ran in %s\n", h.stack.Name, time.Since(ran).Round(100*time.Millisecond))
	if r := stopKeeping(); len(r) > 0 {
		fmt.Printf("the harness started the stack's containerd again %d times after it died on its own (above)\n", len(r))
	}
	if os.Getenv("UNITLET_KEEP_STACK") != "" {
		fmt.Printf("keeping the stack (UNITLET_KEEP_STACK): %s\n", h.Dir())
		return code
	}
	st := h.loadState()
	down := time.Now()
	if err := h.Down(); err != nil {
		fmt.Fprintf(os.Stderr, "down: %v\n", err)
		return 1
	}
	fmt.Printf("stack %s is down in %s\n", h.stack.Name, time.Since(down).Round(100*time.Millisecond))
	// down must leave nothing of the stack behind.
	if left := h.Leftovers(st); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "FAIL: down left behind: %s\n", strings.Join(left, "; "))
		return 1
	}
	fmt.Println("down left nothing behind (processes, shims, mounts, files)")
	return code
}

// lockStack takes the lock of the stack in dir (the file dir+".lock"), waiting while
// another test run holds it: two runs on one stack would bring it up and down under each
// other. The kernel drops the lock when the process ends, however it ends.
func lockStack(dir string) (func(), error) {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return nil, fmt.Errorf("lock the stack %s: %w", dir, err)
	}
	f, err := os.OpenFile(dir+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock the stack %s: %w", dir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		fmt.Printf("another test run is using the stack %s: waiting for it to finish\n", dir)
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
			f.Close()
			return nil, fmt.Errorf("lock the stack %s: %w", dir, err)
		}
	}
	return func() { f.Close() }, nil
}

// WaitFor polls cond until it returns true or within passes; the failure names what was
// awaited, the last state cond reported, and the end of every component's log.
func (h *Harness) WaitFor(t testing.TB, within time.Duration, what string, cond func(ctx context.Context) (bool, string)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	last := ""
	for {
		ok, state := cond(ctx)
		if ok {
			return
		}
		last = state
		select {
		case <-ctx.Done():
			t.Fatalf("%s: not within %s; last: %s\n%s", what, within, last, h.Logs(30))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Scrape GETs a Prometheus text exposition with get until ready holds for its parsed
// families, within within; a page that does not parse, or gives a series twice, fails the
// test at once.
func (h *Harness) Scrape(t testing.TB, within time.Duration, what string, get func(ctx context.Context) (int, string, error), ready func(map[string]*dto.MetricFamily) bool) map[string]*dto.MetricFamily {
	t.Helper()
	var families map[string]*dto.MetricFamily
	h.WaitFor(t, within, what, func(ctx context.Context) (bool, string) {
		code, body, err := get(ctx)
		if err != nil || code != http.StatusOK {
			return false, fmt.Sprintf("%d %s %v", code, body, err)
		}
		if families, err = promtext.Parse(body); err != nil {
			t.Fatalf("%v\n%s", err, body)
		}
		return ready(families), body
	})
	return families
}

// InNode runs a command inside node (see Exec) and returns its trimmed output; a failure
// fails t with the output.
func (h *Harness) InNode(t testing.TB, node string, args ...string) string {
	t.Helper()
	out, err := h.Exec(node, args).CombinedOutput()
	if err != nil {
		t.Fatalf("%s on %s: %v\n%s", strings.Join(args, " "), node, err, out)
	}
	return strings.TrimSpace(string(out))
}

// UnitProps reads properties of a systemd unit inside node (systemctl show).
func (h *Harness) UnitProps(t testing.TB, node, unit string, props ...string) map[string]string {
	t.Helper()
	args := []string{"systemctl", "show", unit}
	for _, p := range props {
		args = append(args, "-p", p)
	}
	got := map[string]string{}
	for _, line := range strings.Split(h.InNode(t, node, args...), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			got[k] = v
		}
	}
	return got
}

// CISFinding is one check of `unitletctl cis -o json` (cmd/unitletctl/cis): a CIS
// Kubernetes Benchmark worker-node recommendation and its result on a node.
type CISFinding struct {
	ID       string   `json:"id"`
	Title    string   `json:"title"`
	Result   string   `json:"result"` // PASS, FAIL or N/A
	Reason   string   `json:"reason"`
	Evidence []string `json:"evidence"`
}

// CheckCIS runs `unitletctl cis -o json` inside node until no check fails, for at most
// within (a serving certificate waits for its CSR's approval), logs every check's result
// and fails t with the evidence of each check that still fails. It returns the findings.
func (h *Harness) CheckCIS(t testing.TB, node string, within time.Duration) []CISFinding {
	t.Helper()
	deadline := time.Now().Add(within)
	var report struct {
		Node     string       `json:"node"`
		Findings []CISFinding `json:"findings"`
		Problems []string     `json:"problems"`
	}
	for {
		start := time.Now()
		// Exit 1 when a check fails: the JSON on stdout says which.
		out, err := h.Exec(node, []string{"unitletctl", "cis", "-o", "json"}).Output()
		report.Findings, report.Problems = nil, nil
		if jerr := json.Unmarshal(out, &report); jerr != nil || len(report.Findings) == 0 {
			t.Fatalf("unitletctl cis on %s: %v; output not a report (%v):\n%s", node, err, jerr, out)
		}
		failed := 0
		for _, f := range report.Findings {
			if f.Result == "FAIL" {
				failed++
			}
		}
		if failed == 0 || time.Now().After(deadline) {
			var b strings.Builder
			fmt.Fprintf(&b, "CIS worker-node checks on %s (unitletctl cis, %s):\n", node, time.Since(start).Round(time.Millisecond))
			for _, f := range report.Findings {
				fmt.Fprintf(&b, "  %-7s %-4s %s\n          %s\n", f.ID, f.Result, f.Title, f.Reason)
			}
			for _, p := range report.Problems {
				fmt.Fprintf(&b, "  problem: %s\n", p)
			}
			t.Log(b.String())
			for _, f := range report.Findings {
				if f.Result == "FAIL" {
					t.Errorf("CIS %s FAIL on %s: %s\n  %s", f.ID, node, f.Reason, strings.Join(f.Evidence, "\n  "))
				}
			}
			return report.Findings
		}
		t.Logf("unitletctl cis on %s: %d check(s) fail; asking again in 5 s", node, failed)
		time.Sleep(5 * time.Second)
	}
}

// keepInheritedFilesFromChildren marks the descriptors the test binary inherited above
// stderr close-on-exec, so that the stack's daemons do not hold them: a lock taken around
// `go test` (flock) would otherwise stay held by a stack left up after a crash.
func keepInheritedFilesFromChildren() {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range entries {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			syscall.CloseOnExec(fd)
		}
	}
}
