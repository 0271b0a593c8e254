package vmtest

import (
	"strings"
	"testing"
)

// The node log query runs journalctl from unitlet-status's process, so it lives in that
// unit's sandbox. On the vm's kernel (not an nspawn machine, where the harness has to loosen
// the sandbox for TestNodeLogQuery) journalctl reads the journal's entries under exactly the
// shipped unit's settings: a copy of the unit whose ExecStart is the query's journalctl.
func TestJournalReadableUnderTheStatusUnitsSandbox(t *testing.T) {
	n := vmNode(t)
	script := `set -e
sed -e '/^ExecStart=/c ExecStart=/usr/bin/journalctl --utc --no-pager -u unitlet-podsync -n 3' \
    -e '/^Type=/c Type=oneshot' \
    -e '/^Sockets=/d;/^WatchdogSec=/d;/^Restart=/d;/^RestartSec=/d;/^NotifyAccess=/d;/^ExecReload=/d;/^ExecStartPre=/d' \
    -e '/^\[Install\]/,$d' "$(systemctl show --value -p FragmentPath unitlet-status.service)" > /run/systemd/system/unitlet-logprobe.service
echo 'StandardOutput=file:/run/unitlet-logprobe.out' >> /run/systemd/system/unitlet-logprobe.service
rm -f /run/unitlet-logprobe.out
systemctl daemon-reload
systemctl start unitlet-logprobe.service
cat /run/unitlet-logprobe.out
rm -f /run/systemd/system/unitlet-logprobe.service /run/unitlet-logprobe.out
systemctl daemon-reload`
	out := stack.InNode(t, n.Name, "sh", "-c", script)
	if !strings.Contains(out, "unitlet-podsync[") {
		t.Errorf("journalctl under unitlet-status's sandbox read no entry of unitlet-podsync:\n%s", out)
	}
	// The copy kept the sandbox: its properties are the unit's.
	props := stack.UnitProps(t, n.Name, "unitlet-status.service", "ProtectKernelTunables", "ProtectControlGroups", "ProtectSystem")
	if props["ProtectKernelTunables"] != "yes" || props["ProtectControlGroups"] != "yes" || props["ProtectSystem"] != "strict" {
		t.Errorf("unitlet-status's sandbox is not what this test assumes: %v", props)
	}
}
