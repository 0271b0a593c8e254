package vmtest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// The unitlet services, as their units are named.
var services = []string{"config", "certs", "podsync", "status", "volumes", "eviction"}

// serviceRow is the part of `unitletctl status -o json` these tests read.
type serviceRow struct {
	Service                 string   `json:"service"`
	PID                     int32    `json:"pid"`
	ConfigGeneration        uint64   `json:"configGeneration"`
	PendingConfigGeneration uint64   `json:"pendingConfigGeneration"`
	PendingConfigFields     []string `json:"pendingConfigFields"`
}

// serviceRows is `unitletctl status -o json` in the guest, by service.
func serviceRows(t testing.TB, node string) map[string]serviceRow {
	t.Helper()
	out, _ := stack.Exec(node, []string{"unitletctl", "status", "-o", "json"}).Output() // exits 1 while one is down
	var rows []serviceRow
	if err := json.Unmarshal(out, &rows); err != nil {
		t.Fatalf("unitletctl status -o json: %v\n%s", err, out)
	}
	m := map[string]serviceRow{}
	for _, r := range rows {
		m[r.Service] = r
	}
	return m
}

// mainPIDs are the units' main PIDs, as systemd knows them.
func mainPIDs(t testing.TB, node string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, s := range services {
		out[s] = stack.UnitProps(t, node, "unitlet-"+s+".service", "MainPID")["MainPID"]
	}
	return out
}

// waitGeneration waits until every service runs unitlet-config's generation, newer than
// after, and returns it.
func waitGeneration(t testing.TB, node string, after uint64) uint64 {
	t.Helper()
	var gen uint64
	stack.WaitFor(t, 2*time.Minute, "every service on the new configuration generation", func(context.Context) (bool, string) {
		rows := serviceRows(t, node)
		gen = rows["config"].ConfigGeneration
		var behind []string
		for _, s := range services {
			if r := rows[s]; r.ConfigGeneration != gen || r.PendingConfigGeneration != 0 {
				behind = append(behind, fmt.Sprintf("%s %d (pending %d)", s, r.ConfigGeneration, r.PendingConfigGeneration))
			}
		}
		return gen > after && len(behind) == 0, fmt.Sprintf("config serves %d; %s", gen, strings.Join(behind, ", "))
	})
	return gen
}

// TestAReloadRestartsOnlyTheServicesItConcerns: a drop-in that changes a field unitlet-status
// applies at start (nodeStatusMaxImages) and one unitlet-eviction applies live
// (evictionMaxPodGracePeriod) restarts status alone, under its unit; every service ends
// on the new generation, and unitletctl config says so. Removing the drop-in does the same
// the other way.
func TestAReloadRestartsOnlyTheServicesItConcerns(t *testing.T) {
	node := vmNode(t).Name
	const path = "/etc/unitlet/config.d/90-reconfig-test.conf"
	start := waitGeneration(t, node, 0)
	before := mainPIDs(t, node)

	stack.InNode(t, node, "sh", "-c", fmt.Sprintf(`cat > %[1]s.tmp <<'EOF'
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
nodeStatusMaxImages: 7
evictionMaxPodGracePeriod: 17
EOF
chmod 0600 %[1]s.tmp && mv %[1]s.tmp %[1]s`, path))
	removed := false
	t.Cleanup(func() {
		if !removed {
			_ = stack.Exec(node, []string{"rm", "-f", path}).Run()
		}
	})
	reloaded := time.Now()
	gen := waitGeneration(t, node, start)
	t.Logf("generation %d → %d on every service in %s", start, gen, time.Since(reloaded).Round(100*time.Millisecond))
	after := mainPIDs(t, node)
	for _, s := range services {
		switch changed := after[s] != before[s]; {
		case s == "status" && !changed:
			t.Errorf("unitlet-status kept PID %s: nodeStatusMaxImages needs its restart", after[s])
		case s != "status" && changed:
			t.Errorf("unitlet-%s restarted (PID %s → %s): the change does not concern it", s, before[s], after[s])
		}
	}
	if out := stack.InNode(t, node, "journalctl", "-u", "unitlet-status", "--since", "-5min", "-o", "cat", "--grep", "stopped to start again"); !strings.Contains(out, "nodeStatusMaxImages") {
		t.Errorf("unitlet-status's log does not say why it restarted:\n%s", out)
	}
	cfg := stack.InNode(t, node, "unitletctl", "config")
	if want := fmt.Sprintf("status %d", gen); !strings.Contains(generationsOf(cfg), want) {
		t.Errorf("unitletctl config does not say the services' generations (want %q in its line %q); its first lines:\n%.600s", want, generationsOf(cfg), cfg)
	}

	// Back: status restarts again, the rest stay.
	stack.InNode(t, node, "rm", "-f", path)
	removed = true
	waitGeneration(t, node, gen)
	final := mainPIDs(t, node)
	for _, s := range services {
		if changed := final[s] != after[s]; changed != (s == "status") {
			t.Errorf("after the drop-in went: unitlet-%s PID %s → %s", s, after[s], final[s])
		}
	}
}

// generationsOf is the "# services' generations:" line of unitletctl config's output.
func generationsOf(cfg string) string {
	for line := range strings.Lines(cfg) {
		if strings.HasPrefix(line, "# services' generations: ") {
			return strings.TrimSpace(line)
		}
	}
	return ""
}

// TestHealthzOnPort10248UnderTheUnit: unitlet-status serves the kubelet's plain-HTTP
// /healthz on 127.0.0.1:10248 from inside its sandbox.
//
// It polls, as kubeadm's kubelet-check does (once a second, there for 4 minutes), for at
// most healthzWithin: the test before it has just restarted unitlet-status, and on the
// one-CPU emulated guest with make test's other suites beside it, the just-started
// unitlet-status once found all five other services slower than /healthz's 1 s.
func TestHealthzOnPort10248UnderTheUnit(t *testing.T) {
	const healthzWithin = 30 * time.Second
	node := vmNode(t).Name
	start := time.Now()
	var first string
	stack.WaitFor(t, healthzWithin, "GET http://127.0.0.1:10248/healthz in the guest: 200 and ok", func(context.Context) (bool, string) {
		out, _ := stack.Exec(node, []string{"bash", "-c", `exec 3<>/dev/tcp/127.0.0.1/10248 && printf 'GET /healthz HTTP/1.0\r\n\r\n' >&3 && cat <&3`}).CombinedOutput()
		ok := strings.HasPrefix(string(out), "HTTP/1.0 200 OK") && strings.HasSuffix(string(out), "\r\n\r\nok")
		if !ok && first == "" {
			first = string(out)
		}
		return ok, string(out)
	})
	if first != "" {
		t.Logf("/healthz answered 200 after %s; its first answer was:\n%s", time.Since(start).Round(100*time.Millisecond), first)
	}
}
