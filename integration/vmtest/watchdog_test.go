package vmtest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestAStuckServiceIsRestartedByTheWatchdog wedges unitlet-config under its shipped unit:
// its configuration file becomes a FIFO nobody writes, so the reload that the change
// starts hangs reading it, holding the configuration. The health check fails, the
// watchdog goes unfed, and systemd kills the service (SIGABRT, which GOTRACEBACK=crash
// turns into a death by signal) and starts it again once the file is back. The other
// services go on.
func TestAStuckServiceIsRestartedByTheWatchdog(t *testing.T) {
	n := vmNode(t)
	const unit = "unitlet-config.service"
	before := stack.UnitProps(t, n.Name, unit, "MainPID", "NRestarts")
	others := map[string]string{}
	for _, svc := range n.Services {
		if svc != "config" {
			others[svc] = stack.UnitProps(t, n.Name, "unitlet-"+svc+".service", "MainPID")["MainPID"]
		}
	}
	stack.InNode(t, n.Name, "sh", "-c", "cp /etc/unitlet/config.yaml /run/config.yaml.good && rm /etc/unitlet/config.yaml && mkfifo /etc/unitlet/config.yaml")
	restored := false
	restore := func() {
		if !restored {
			restored = true
			stack.InNode(t, n.Name, "sh", "-c", "rm -f /etc/unitlet/config.yaml && cp /run/config.yaml.good /etc/unitlet/config.yaml")
		}
	}
	defer restore()

	// A failing check stops the pings at once; systemd acts WatchdogSec (30 s) after the last.
	stack.WaitFor(t, 2*time.Minute, unit+" killed by the watchdog", func(context.Context) (bool, string) {
		p := stack.UnitProps(t, n.Name, unit, "Result", "NRestarts", "MainPID")
		return p["Result"] == "watchdog" || p["NRestarts"] != before["NRestarts"], fmt.Sprint(p)
	})
	restore()
	journal := stack.InNode(t, n.Name, "journalctl", "-u", unit, "--no-pager", "-o", "cat")
	for _, want := range []string{"health check failing", "Watchdog timeout"} {
		if !strings.Contains(journal, want) {
			t.Errorf("the journal of %s lacks %q:\n%s", unit, want, lastLines(journal, 30))
		}
	}
	stack.WaitFor(t, 4*time.Minute, unit+" started again and healthy", func(context.Context) (bool, string) {
		p := stack.UnitProps(t, n.Name, unit, "ActiveState", "SubState", "NRestarts", "MainPID")
		if p["ActiveState"] != "active" || p["SubState"] != "running" || p["MainPID"] == before["MainPID"] {
			return false, fmt.Sprint(p)
		}
		if out, err := stack.Exec(n.Name, []string{"unitletctl", "status", "config"}).CombinedOutput(); err != nil {
			return false, fmt.Sprintf("unitletctl status config: %v: %s", err, out)
		}
		return true, ""
	})
	for svc, pid := range others {
		if got := stack.UnitProps(t, n.Name, "unitlet-"+svc+".service", "MainPID")["MainPID"]; got != pid {
			t.Errorf("unitlet-%s restarted meanwhile: MainPID %s, was %s", svc, got, pid)
		}
	}
}
