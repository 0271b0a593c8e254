package systemd

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/coreos/go-systemd/v22/unit"

	"github.com/unitlet/unitlet/shared/bus"
	"github.com/unitlet/unitlet/shared/daemon"
)

// maxExposure is the highest `systemd-analyze security` exposure a unitlet service may have.
const maxExposure = 3.0

// exposureCeilings raise maxExposure for a service whose job rules out settings, each with
// the reason. unitlet-volumes mounts tmpfs that containerd must see on the host, so it may
// have no mount namespace of its own, and every setting that makes one (ProtectSystem=,
// ProtectHome=, PrivateTmp=, PrivateDevices=, PrivateMounts=, ProtectKernel*=,
// ProtectControlGroups=, ProtectProc=) is out: about 2.0 of its exposure, as for the
// kubelet; RestrictSUIDSGID= is out too, as fsGroup volumes need set-group-ID directories.
// unitlet-certs has no reason to go above 2.0: it only writes the certificate directory and
// talks to the API server.
var exposureCeilings = map[string]float64{
	"unitlet-certs.service":   2.0,
	"unitlet-volumes.service": 4.5,
}

// target is the unit that groups every unitlet service and socket.
const target = "unitlet.target"

// binDir is where the units expect the unitlet binaries.
const binDir = "/usr/bin/"

// capabilities is the capability bounding set each service may keep, space-separated. A new
// service must be added here: its capabilities are a decision, not a default.
var capabilities = map[string]string{
	"unitlet-certs.service":    "",
	"unitlet-config.service":   "",
	"unitlet-eviction.service": "CAP_DAC_READ_SEARCH",
	"unitlet-podsync.service":  "",
	"unitlet-status.service":   "",
	"unitlet-volumes.service":  "CAP_SYS_ADMIN CAP_CHOWN CAP_FOWNER CAP_FSETID CAP_DAC_OVERRIDE",
}

// analyze returns the path of systemd-analyze. The unit tests are part of the suite on every
// machine, so a missing tool is a failure with the fix, never a skip.
func analyze(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Fatalf("systemd-analyze is needed to check the unit files and is missing (%v): run `apt-get install systemd` (or deploy/prereqs.sh)", err)
	}
	return p
}

// unitFiles returns the names of the unit files in this directory, sorted.
func unitFiles(t *testing.T, exts ...string) []string {
	t.Helper()
	if len(exts) == 0 {
		exts = []string{".service", ".socket", ".target"}
	}
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatalf("list the unit files: %v", err)
	}
	var names []string
	for _, e := range entries {
		if !e.IsDir() && slices.Contains(exts, filepath.Ext(e.Name())) {
			names = append(names, e.Name())
		}
	}
	if len(names) == 0 {
		t.Fatalf("no %s units in systemd/", strings.Join(exts, ", "))
	}
	return names
}

var binRE = regexp.MustCompile(regexp.QuoteMeta(binDir) + `(unitlet-[a-z0-9-]+)`)

// stageUnits copies the units into a temporary directory with every /usr/bin/unitlet-*
// that cmd/ builds pointing at a real executable (true), since verify checks that the
// commands exist, and
// returns that directory and the staged units' paths. modify, when not nil, may change a
// unit's text on the way.
func stageUnits(t *testing.T, names []string, modify func(name, text string) string) (string, []string) {
	t.Helper()
	trueBin, err := exec.LookPath("true")
	if err != nil {
		t.Fatalf("find true(1) to stand in for the unitlet binaries: %v", err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, name := range names {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatalf("read %s: %v", name, err)
		}
		for _, m := range binRE.FindAllStringSubmatch(string(b), -1) {
			link := filepath.Join(bin, m[1])
			if _, err := os.Lstat(link); err == nil {
				continue
			}
			// Only binaries the repository builds get a stand-in: a unit naming any other
			// fails verify for a missing command.
			if _, err := os.Stat(filepath.Join("..", "cmd", m[1], "main.go")); err != nil {
				continue
			}
			if err := os.Symlink(trueBin, link); err != nil {
				t.Fatal(err)
			}
		}
		text := binRE.ReplaceAllString(string(b), bin+"/$1")
		if modify != nil {
			text = modify(name, text)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	return dir, paths
}

// verify runs `systemd-analyze verify` on the staged units and splits what it printed into
// the lines about our units and the rest. A line is about our units when it names one of
// them or the staging directory (systemd prefixes its messages with the unit's name or its
// file's path). Everything else is the host's business: verify also loads the units ours
// refer to (network-online.target, sysinit.target, ...), and a host whose own units carry
// deprecated or unknown settings makes verify warn about them. Those lines are logged, not
// failed on; on Debian 12 (systemd 252) without systemd as PID 1, verify prints nothing.
func verify(t *testing.T, dir string, paths, names []string) (ours, host []string, err error) {
	t.Helper()
	cmd := exec.Command(analyze(t), append([]string{"verify", "--no-pager"}, paths...)...)
	cmd.Env = append(os.Environ(), "SYSTEMD_LOG_COLOR=0")
	out, err := cmd.CombinedOutput()
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		if strings.Contains(line, dir) || slices.ContainsFunc(names, func(n string) bool { return strings.Contains(line, n) }) {
			ours = append(ours, line)
		} else {
			host = append(host, line)
		}
	}
	return ours, host, err
}

func TestUnitsVerify(t *testing.T) {
	analyze(t)
	names := unitFiles(t)
	dir, paths := stageUnits(t, names, nil)
	ours, host, err := verify(t, dir, paths, names)
	for _, line := range host {
		t.Logf("systemd-analyze verify, about the host's units, ignored: %s", line)
	}
	if err != nil || len(ours) > 0 {
		t.Errorf("systemd-analyze verify %s: %v\n%s", strings.Join(names, " "), err, strings.Join(ours, "\n"))
	}

	// The check is live: the same run on a unit with a mistake must complain about it, or a
	// change in systemd's messages has made the filter above blind.
	dir, paths = stageUnits(t, names, func(name, text string) string {
		if filepath.Ext(name) == ".service" {
			text = strings.Replace(text, "[Service]\n", "[Service]\nUnitletNoSuchSetting=1\n", 1)
		}
		return text
	})
	ours, _, _ = verify(t, dir, paths, names)
	if !slices.ContainsFunc(ours, func(l string) bool { return strings.Contains(l, "UnitletNoSuchSetting") }) {
		t.Errorf("systemd-analyze verify did not report an unknown setting in a service, or the report does not name the unit: %q", ours)
	}
}

var exposureRE = regexp.MustCompile(`Overall exposure level for \S+: (\d+(?:\.\d+)?)`)

// securityExposure returns the exposure level `systemd-analyze security --offline=yes` gives
// the service in the unit file at path (0 to 10, lower is better), with the full report.
// --offline=yes reads the file itself and needs no running systemd; it must be given the
// file's path: a bare unit name is looked up in the system's unit directories and, when it
// is not installed, systemd 252 says "not found" and still exits 0.
func securityExposure(analyzePath, path string) (float64, string, error) {
	out, err := exec.Command(analyzePath, "security", "--offline=yes", "--no-pager", path).CombinedOutput()
	if err != nil {
		return 0, string(out), err
	}
	m := exposureRE.FindSubmatch(out)
	if m == nil {
		return 0, string(out), errNoExposure
	}
	v, err := strconv.ParseFloat(string(m[1]), 64)
	return v, string(out), err
}

var errNoExposure = errors.New(`no "Overall exposure level" line in the report`)

// TestUnitsSecurityExposure keeps every service's exposure at maxExposure or below, and
// prints each as "EXPOSURE <unit> <level>" for the README:
//
//	go test ./systemd/ -run TestUnitsSecurityExposure -v | grep EXPOSURE
func TestUnitsSecurityExposure(t *testing.T) {
	sa := analyze(t)
	for _, name := range unitFiles(t, ".service") {
		path, err := filepath.Abs(name)
		if err != nil {
			t.Fatal(err)
		}
		level, report, err := securityExposure(sa, path)
		if err != nil {
			t.Errorf("systemd-analyze security --offline=yes %s: %v\n%s", name, err, report)
			continue
		}
		t.Logf("EXPOSURE %s %.1f", name, level)
		ceiling := maxExposure
		if c, ok := exposureCeilings[name]; ok {
			ceiling = c
		}
		if level > ceiling {
			t.Errorf("%s: exposure %.1f is above %.1f; the settings that add to it:\n%s", name, level, ceiling, exposedLines(report))
		}
	}
}

// exposedLines returns the lines of a security report that add to the exposure (marked ✗).
func exposedLines(report string) string {
	var b strings.Builder
	for _, line := range strings.Split(report, "\n") {
		if strings.HasPrefix(line, "✗") {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

// unitFile is a parsed unit file.
type unitFile []*unit.UnitOption

func parseUnit(t *testing.T, name string) unitFile {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatalf("read %s: %v", name, err)
	}
	opts, err := unit.DeserializeOptions(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("parse %s: %v", name, err)
	}
	return opts
}

// values returns every value assigned to section.name, in order, each split at whitespace
// for the list settings; an empty assignment resets the list, as in systemd.
func (u unitFile) values(section, name string) []string {
	var vs []string
	set := false
	for _, o := range u {
		if o.Section != section || o.Name != name {
			continue
		}
		set = true
		if strings.TrimSpace(o.Value) == "" {
			vs = []string{}
			continue
		}
		vs = append(vs, strings.Fields(o.Value)...)
	}
	if !set {
		return nil
	}
	if vs == nil {
		vs = []string{}
	}
	return vs
}

// value returns the last value assigned to section.name and whether there is one.
func (u unitFile) value(section, name string) (string, bool) {
	v, ok := "", false
	for _, o := range u {
		if o.Section == section && o.Name == name {
			v, ok = o.Value, true
		}
	}
	return v, ok
}

func TestUnitsConventions(t *testing.T) {
	services := unitFiles(t, ".service")
	sockets := unitFiles(t, ".socket")
	wantedByTarget := parseUnit(t, target).values("Unit", "Wants")

	for _, w := range wantedByTarget {
		if strings.HasPrefix(w, "unitlet") && !slices.Contains(services, w) && !slices.Contains(sockets, w) {
			t.Errorf("%s: Wants=%s, which is not a unit in systemd/", target, w)
		}
	}
	for _, name := range append(slices.Clone(services), sockets...) {
		u := parseUnit(t, name)
		if !slices.Contains(u.values("Unit", "PartOf"), target) {
			t.Errorf("%s: want PartOf=%s, so stopping the target stops it", name, target)
		}
		if !slices.Contains(wantedByTarget, name) {
			t.Errorf("%s: %s does not Wants= it", name, target)
		}
	}

	for _, name := range services {
		u := parseUnit(t, name)
		base := strings.TrimSuffix(name, ".service")
		socket := base + ".socket"
		want := func(key, value string) {
			t.Helper()
			if got, ok := u.value("Service", key); !ok || got != value {
				t.Errorf("%s: want %s=%s, have %q", name, key, value, got)
			}
		}
		wantSet := func(key string) {
			t.Helper()
			if got, ok := u.value("Service", key); !ok || strings.TrimSpace(got) == "" {
				t.Errorf("%s: %s= must be set", name, key)
			}
		}

		// Every unitlet service is socket activated, reports readiness and feeds the watchdog.
		if !slices.Contains(sockets, socket) {
			t.Errorf("%s: no %s next to it; every unitlet service is socket activated", name, socket)
		}
		for _, dep := range []string{"Requires", "After"} {
			if !slices.Contains(u.values("Unit", dep), socket) {
				t.Errorf("%s: want %s=%s", name, dep, socket)
			}
		}
		want("Type", "notify")
		want("NotifyAccess", "main")
		wantSet("WatchdogSec")
		if !slices.Contains(u.values("Service", "RestartPreventExitStatus"), strconv.Itoa(daemon.ExitBadConfig)) {
			t.Errorf("%s: want RestartPreventExitStatus=%d: an invalid configuration is not fixed by restarting", name, daemon.ExitBadConfig)
		}
		// Nor by a start through the socket: exit 2 stops the socket, or a queued client
		// starts the service again and again on the same configuration.
		stopSocket := fmt.Sprintf(`+/bin/sh -c 'if [ "$$EXIT_CODE" = exited ] && [ "$$EXIT_STATUS" = %d ]; then exec systemctl --no-block stop %s; fi'`, daemon.ExitBadConfig, socket)
		if v, _ := u.value("Service", "ExecStopPost"); v != stopSocket {
			t.Errorf("%s: want ExecStopPost=%s: exit %d must stop the socket, or its clients start the service again at once", name, stopSocket, daemon.ExitBadConfig)
		}
		wantSet("MemoryMax")
		wantSet("TasksMax")
		// The node agent outlives pods when memory runs out, as the kubelet (oomScoreAdj).
		want("OOMScoreAdjust", "-999")
		// A panic or the watchdog's SIGABRT would otherwise exit 2, which is not restarted.
		if !slices.Contains(u.values("Service", "Environment"), "GOTRACEBACK=crash") {
			t.Errorf("%s: want Environment=GOTRACEBACK=crash: a Go panic or watchdog abort exits 2, which RestartPreventExitStatus=2 would leave dead", name)
		}
		want("RuntimeDirectoryPreserve", "yes")

		// The daemon's own HTTP listener has no authentication: a unit gives it a loopback
		// port, where it serves /healthz alone, or nothing. A Unix socket (which serves
		// /metrics and /configz too) is the operator's opt-in, in a drop-in.
		for _, env := range u.values("Service", "Environment") {
			addr, ok := strings.CutPrefix(env, "UNITLET_METRICS_ADDR=")
			if !ok || addr == "" {
				continue
			}
			s := daemon.Settings{SocketDir: "/run/unitlet", LogLevel: "info", LogFormat: "text", ShutdownTimeout: 1, MetricsAddr: addr}
			if err := s.Validate(); err != nil {
				t.Errorf("%s: %v", name, err)
				continue
			}
			host, _, err := net.SplitHostPort(addr)
			if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
				t.Errorf("%s: UNITLET_METRICS_ADDR=%s: want a loopback host:port (it serves /healthz alone); the pages' Unix socket is an operator's opt-in", name, addr)
			}
		}

		if exec, _ := u.value("Service", "ExecStart"); !strings.HasPrefix(exec, binDir+base+" ") && exec != binDir+base {
			t.Errorf("%s: ExecStart=%q does not run %s%s", name, exec, binDir, base)
		}

		caps, known := capabilities[name]
		switch got := u.values("Service", "CapabilityBoundingSet"); {
		case !known:
			t.Errorf("%s: add its capability bounding set to the capabilities map in units_test.go", name)
		case got == nil:
			t.Errorf("%s: CapabilityBoundingSet= is not set: the service would keep every capability", name)
		case strings.Join(got, " ") != caps:
			t.Errorf("%s: CapabilityBoundingSet is %q, want %q", name, strings.Join(got, " "), caps)
		}
	}

	for _, name := range sockets {
		u := parseUnit(t, name)
		svc := strings.TrimSuffix(strings.TrimPrefix(name, "unitlet-"), ".socket")
		path := bus.SocketPath("/run/unitlet", svc)
		if !slices.Contains(u.values("Socket", "ListenStream"), path) {
			t.Errorf("%s: want ListenStream=%s", name, path)
		}
		for key, value := range map[string]string{
			"FileDescriptorName": daemon.FDNameGRPC,
			"SocketMode":         "0660",
			"SocketGroup":        daemon.SocketGroup,
		} {
			if got, _ := u.value("Socket", key); got != value {
				t.Errorf("%s: want %s=%s, have %q", name, key, value, got)
			}
		}
		// FileDescriptorName= names every fd of the unit: a second listener here would be
		// passed as "grpc" too, and the daemon would serve the bus on whichever came first.
		if n := len(u.values("Socket", "ListenStream")); n != 1 {
			t.Errorf("%s: %d ListenStream= lines; a socket unit passes all its fds under one name, so the bus socket must be alone", name, n)
		}
	}
}

// TestSysusersGroup checks that the packaging creates the group the socket units hand their
// sockets to.
func TestSysusersGroup(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "deploy", "sysusers.d", "unitlet.conf"))
	if err != nil {
		t.Fatalf("read the sysusers.d file: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "g" && f[1] == daemon.SocketGroup {
			return
		}
	}
	t.Errorf("deploy/sysusers.d/unitlet.conf does not create the group %q (want a line `g %s -`)", daemon.SocketGroup, daemon.SocketGroup)
}
