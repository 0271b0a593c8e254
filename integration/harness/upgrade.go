package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Upgrades on a vm node (integration/vmtest/upgrade_test.go). The image carries this
// build's packages in VMDebDir; the previous release's (`make prev-release`, named by
// UNITLET_PREV_DIST_DIR) reach the guest at test time through the node's 9p share, which
// the guest reads live: the image stays as it is. VMInstall installs packages as an
// administrator does (dpkg -i) and times it, with a caller asking the restarting service
// for its identity back to back through the current unitletctl, so the service's downtime
// and what its callers saw are measured in the guest.

// VMDebDir is where a vm node's image carries this build's packages.
const VMDebDir = vmDebDir

// PrevDistDir is the previous release's packages: UNITLET_PREV_DIST_DIR, which `make
// test-vm` sets to `make prev-release`'s dist/. One of each of unitlet's packages must be
// there.
func PrevDistDir() (string, error) {
	const remedy = "run `make prev-release` and test with UNITLET_PREV_DIST_DIR=$HOME/.cache/unitlet/prev-release/<PREV_RELEASE of the Makefile>/dist, as `make test-vm` does"
	dir := os.Getenv("UNITLET_PREV_DIST_DIR")
	if dir == "" {
		return "", fmt.Errorf("UNITLET_PREV_DIST_DIR is not set: %s", remedy)
	}
	if _, err := findDebs(dir, remedy); err != nil {
		return "", err
	}
	return dir, nil
}

// findDebs is one package file of each of vmDebNames in dist, in that order; an error names
// remedy when one is missing.
func findDebs(dist, remedy string) ([]string, error) {
	var debs []string
	for _, name := range vmDebNames() {
		found, err := filepath.Glob(filepath.Join(dist, name+"_*.deb"))
		if err != nil {
			return nil, err
		}
		switch len(found) {
		case 1:
		case 0:
			return nil, fmt.Errorf("%s: no %s_*.deb: %s", dist, name, remedy)
		default:
			return nil, fmt.Errorf("%s: %d packages of %s (%s): keep one build's packages only (make deb empties dist/ first)", dist, len(found), name, strings.Join(found, ", "))
		}
		debs = append(debs, found[0])
	}
	return debs, nil
}

// VMShareDebs copies the packages in dist (one of each of unitlet's) into vm node's share,
// under dir, and returns the directory where the guest reads them.
func (h *Harness) VMShareDebs(node, dir, dist string) (string, error) {
	if h.nodeBackend(node) != "vm" {
		return "", fmt.Errorf("node %s is not a vm node", node)
	}
	debs, err := findDebs(dist, "name a directory of `make deb`'s packages")
	if err != nil {
		return "", err
	}
	share := filepath.Join(h.vmShareDir(node), dir)
	if err := os.RemoveAll(share); err != nil {
		return "", err
	}
	if err := os.MkdirAll(share, 0o755); err != nil {
		return "", err
	}
	for _, deb := range debs {
		if err := copyFile(deb, filepath.Join(share, filepath.Base(deb)), 0o644); err != nil {
			return "", fmt.Errorf("copy %s into the share of %s: %w", deb, node, err)
		}
	}
	return vmShareDir + "/" + dir, nil
}

// VMInstall is one `dpkg -i` in a vm node's guest, as VMInstall ran it. Times are the
// guest's clock.
type VMInstall struct {
	Service string // the service whose package was installed; "" for unitletctl, unitlet
	// DpkgStart and DpkgEnd bound dpkg's run; DpkgOutput is what it printed.
	DpkgStart, DpkgEnd time.Time
	DpkgOutput         string
	// OldPID and NewPID are the service's MainPID before and after. Exited is when the old
	// process was gone and Ready when the new one told systemd it was (READY=1: its
	// sockets taken and its state loaded), from the unit's InactiveEnterTimestamp and
	// ActiveEnterTimestamp; zero when systemd did not restart it.
	OldPID, NewPID int
	Exited, Ready  time.Time
	// Calls are `unitletctl status <Service>`, one a second, from before dpkg started until
	// the new process answered one.
	Calls []VMCall
}

// VMCall is one `unitletctl status` of VMInstall's caller.
type VMCall struct {
	Start, End time.Time
	PID        int    // of the process that answered, 0 if none did
	Version    string // that process's version
	Err        string // unitletctl's output when it failed
}

// Dpkg is dpkg's wall time.
func (in VMInstall) Dpkg() time.Duration { return in.DpkgEnd.Sub(in.DpkgStart) }

// FirstAnswer is the first call the new process answered, and whether there was one.
func (in VMInstall) FirstAnswer() (VMCall, bool) {
	for _, c := range in.Calls {
		if c.Err == "" && c.PID == in.NewPID {
			return c, true
		}
	}
	return VMCall{}, false
}

// Downtime is the time from the old process's exit to the new one's readiness, and
// whether both were seen.
func (in VMInstall) Downtime() (time.Duration, bool) {
	if in.Exited.IsZero() || in.Ready.Before(in.Exited) {
		return 0, false
	}
	return in.Ready.Sub(in.Exited), true
}

// ToFirstAnswer is the time from the old process's exit to the end of the first call the
// new one answered, as its caller saw it (that call's own run included), and whether both
// were seen.
func (in VMInstall) ToFirstAnswer() (time.Duration, bool) {
	first, ok := in.FirstAnswer()
	if !ok || in.Exited.IsZero() {
		return 0, false
	}
	return first.End.Sub(in.Exited), true
}

// Failed are the caller's calls that failed.
func (in VMInstall) Failed() []VMCall {
	var failed []VMCall
	for _, c := range in.Calls {
		if c.Err != "" {
			failed = append(failed, c)
		}
	}
	return failed
}

// vmInstallStepScript installs packages $2... with dpkg -i; when $1 names a service, a
// caller asks it for its identity once a second (the current unitletctl, with a minute's
// timeout, so a call made while the service restarts waits in the socket's queue rather
// than fail) until the new process answered once, and systemd's timestamps of the restart
// are printed. The guest is emulated and has one CPU: a caller any busier, or a watcher
// polling the old process, slowed everything else down (dpkg ran for minutes).
const vmInstallStepScript = `set -u
svc=$1
shift
dir=$(mktemp -d /run/unitlet-harness-install.XXXXXX)
now() { date +%s.%N; }
if [ -n "$svc" ]; then
	old=$(systemctl show -p MainPID --value "unitlet-$svc.service")
	echo "old $old"
	(
		while [ ! -e "$dir/stop" ]; do
			s=$(now)
			if out=$(unitletctl --timeout 60s -o json status "$svc" 2>&1); then rc=0; else rc=$?; fi
			e=$(now)
			pid=$(printf '%s\n' "$out" | sed -n 's/^ *"pid": *\([0-9]*\).*/\1/p')
			ver=$(printf '%s\n' "$out" | sed -n 's/^ *"version": *"\([^"]*\)".*/\1/p')
			if [ "$rc" = 0 ]; then
				echo "call $s $e ${pid:-0} ${ver:--}"
			else
				echo "fail $s $e rc=$rc $(printf '%s' "$out" | tr '\n' ' ')"
			fi
			sleep 1
		done
	) >"$dir/calls" &
	caller=$!
	# One call answered by the old process before dpkg starts.
	for i in $(seq 1 600); do
		grep -q '^call ' "$dir/calls" && break
		sleep 0.2
	done
fi
start=$(now)
if DEBIAN_FRONTEND=noninteractive dpkg -i --force-confdef --force-confold "$@" >"$dir/dpkg" 2>&1; then rc=0; else rc=$?; fi
end=$(now)
echo "dpkg $start $end $rc"
sed 's/^/dpkg-out /' "$dir/dpkg"
if [ -n "$svc" ]; then
	new=$(systemctl show -p MainPID --value "unitlet-$svc.service")
	echo "new $new"
	systemctl show --timestamp=us+utc -p InactiveEnterTimestamp -p ActiveEnterTimestamp "unitlet-$svc.service" | sed 's/^/unit /'
	if [ "$new" != "$old" ]; then
		for i in $(seq 1 300); do
			grep -q "^call [^ ]* [^ ]* $new " "$dir/calls" && break
			sleep 0.2
		done
	fi
	touch "$dir/stop"
	wait "$caller"
	cat "$dir/calls"
fi
rm -rf "$dir"
`

// VMInstall runs `dpkg -i debs...` in vm node's guest (paths in the guest) and reports
// it; svc names the service whose package this is, whose restart it watches and times
// ("" for a package without a service, or for several at once).
func (h *Harness) VMInstall(ctx context.Context, node, svc string, debs ...string) (VMInstall, error) {
	out, err := h.vmRun(ctx, node, append([]string{"sh", "-c", vmInstallStepScript, "sh", svc}, debs...)...)
	if err != nil {
		return VMInstall{Service: svc}, fmt.Errorf("dpkg -i %s on %s: %v\n%s", strings.Join(debs, " "), node, err, out)
	}
	in, err := parseVMInstall(svc, out)
	if err != nil {
		return in, fmt.Errorf("dpkg -i %s on %s: %w", strings.Join(debs, " "), node, err)
	}
	return in, nil
}

// parseVMInstall reads what vmInstallStepScript printed.
func parseVMInstall(svc, out string) (VMInstall, error) {
	in := VMInstall{Service: svc}
	var dpkgRC, dpkgOut []string
	units := map[string]time.Time{}
	for _, line := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		kind, rest, _ := strings.Cut(line, " ")
		f := strings.Fields(rest)
		switch {
		case kind == "old" && len(f) == 1:
			in.OldPID, _ = strconv.Atoi(f[0])
		case kind == "new" && len(f) == 1:
			in.NewPID, _ = strconv.Atoi(f[0])
		case kind == "unit":
			k, v, _ := strings.Cut(rest, "=")
			units[k], _ = time.Parse(systemdTimestamp, v)
		case kind == "dpkg" && len(f) == 3:
			in.DpkgStart, in.DpkgEnd = guestTime(f[0]), guestTime(f[1])
			dpkgRC = append(dpkgRC, f[2])
		case kind == "dpkg-out":
			dpkgOut = append(dpkgOut, rest)
		case kind == "call" && len(f) == 4:
			pid, _ := strconv.Atoi(f[2])
			in.Calls = append(in.Calls, VMCall{Start: guestTime(f[0]), End: guestTime(f[1]), PID: pid, Version: f[3]})
		case kind == "fail" && len(f) >= 2:
			in.Calls = append(in.Calls, VMCall{Start: guestTime(f[0]), End: guestTime(f[1]), Err: strings.Join(f[2:], " ")})
		}
	}
	in.DpkgOutput = strings.Join(dpkgOut, "\n")
	if in.NewPID != in.OldPID {
		in.Exited, in.Ready = units["InactiveEnterTimestamp"], units["ActiveEnterTimestamp"]
	}
	if len(dpkgRC) != 1 {
		return in, fmt.Errorf("the guest's script did not report dpkg's run:\n%s", out)
	}
	if dpkgRC[0] != "0" {
		return in, fmt.Errorf("exit %s:\n%s", dpkgRC[0], in.DpkgOutput)
	}
	return in, nil
}

// systemdTimestamp is how `systemctl show --timestamp=us+utc` prints a time.
const systemdTimestamp = "Mon 2006-01-02 15:04:05.000000 MST"

// guestTime is a time the guest printed with date +%s.%N.
func guestTime(s string) time.Time {
	sec, frac, _ := strings.Cut(s, ".")
	secs, _ := strconv.ParseInt(sec, 10, 64)
	nanos, _ := strconv.ParseInt((frac + "000000000")[:9], 10, 64)
	return time.Unix(secs, nanos)
}
