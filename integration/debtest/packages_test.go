// Package debtest checks the Debian packages `make deb` built (UNITLET_DIST_DIR, else the
// repository's dist/): what each holds, its version and its dependencies, read back with
// dpkg-deb; a dpkg install, reinstall and purge into an empty root; each service's
// maintainer scripts as on a systemd host. `make deb-check` runs it after lintian.
package debtest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// services are the services of systemd/ (a unitlet-<svc>.service each), so a new service
// without its package fails here.
func services(t *testing.T, repo string) []string {
	t.Helper()
	units, err := filepath.Glob(filepath.Join(repo, "systemd", "unitlet-*.service"))
	if err != nil || len(units) == 0 {
		t.Fatalf("no unitlet-*.service in %s/systemd (%v)", repo, err)
	}
	var names []string
	for _, u := range units {
		names = append(names, strings.TrimSuffix(strings.TrimPrefix(filepath.Base(u), "unitlet-"), ".service"))
	}
	return names
}

// unitDir is where a package puts its systemd units.
const unitDir = "usr/lib/systemd/system"

// deb is one package, extracted: its control fields and files.
type deb struct {
	fields map[string]string
	root   string // the extracted tree; DEBIAN/ holds the control files
}

// Each service's package: its units as systemd/ has them, the binary where ExecStart= runs
// it, its sysusers entry, the conffile in unitlet-config only, maintainer scripts that name
// only its own units, and the bus APIs it provides and calls.
func TestServicePackages(t *testing.T) {
	repo, version := repoAndVersion(t)
	for _, svc := range services(t, repo) {
		t.Run(svc, func(t *testing.T) {
			name := "unitlet-" + svc
			d := open(t, repo, name, version, hostArch(t))

			// The units are systemd/'s, and the binary is where ExecStart= runs it.
			for _, unit := range []string{name + ".service", name + ".socket"} {
				d.sameAs(t, filepath.Join(unitDir, unit), filepath.Join(repo, "systemd", unit))
			}
			execStart := strings.Fields(d.unitValue(t, filepath.Join(unitDir, name+".service"), "ExecStart"))[0]
			if execStart != "/usr/bin/"+name {
				t.Errorf("%s.service: ExecStart= runs %s, want /usr/bin/%s", name, execStart, name)
			}
			if fi, err := os.Stat(filepath.Join(d.root, execStart)); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
				t.Errorf("%s: no executable %s, which its unit's ExecStart= runs (%v)", name, execStart, err)
			}
			d.sameAs(t, "usr/lib/sysusers.d/"+name+".conf", filepath.Join(repo, "deploy", "sysusers.d", "unitlet.conf"))

			// The shared configuration is unitlet-config's conffile, root's alone.
			if svc == "config" {
				d.wantConffiles(t, "/etc/unitlet/config.yaml")
				d.sameAs(t, "etc/unitlet/config.yaml", filepath.Join(repo, "deploy", "config.yaml"))
				if fi, err := os.Stat(filepath.Join(d.root, "etc/unitlet/config.yaml")); err == nil && fi.Mode().Perm() != 0o600 {
					t.Errorf("%s: /etc/unitlet/config.yaml is %v, want 0600", name, fi.Mode().Perm())
				}
			} else {
				d.wantConffiles(t)
			}

			// The maintainer scripts act on this service alone: an upgrade restarts it and
			// nothing else.
			postinst := code(d.script(t, "postinst"))
			for _, want := range []string{
				"deb-systemd-helper enable " + name + ".socket",
				"deb-systemd-invoke try-restart " + name + ".service",
				"systemd-sysusers ${DPKG_ROOT:+--root=\"$DPKG_ROOT\"} " + name + ".conf",
			} {
				if !strings.Contains(postinst, want) {
					t.Errorf("%s: postinst lacks %q", name, want)
				}
			}
			if strings.Count(postinst, "try-restart") != 1 || strings.Contains(postinst, " restart ") {
				t.Errorf("%s: postinst restarts more than its own service once:\n%s", name, postinst)
			}
			if !strings.Contains(code(d.script(t, "prerm")), "deb-systemd-invoke stop "+name+".service "+name+".socket") {
				t.Errorf("%s: prerm does not stop its service and socket on removal", name)
			}
			for _, script := range []string{"postinst", "prerm", "postrm"} {
				for _, m := range unitNameRE.FindAllStringSubmatch(code(d.script(t, script)), -1) {
					if m[1] != svc {
						t.Errorf("%s: its %s acts on %s, another package's unit", name, script, m[0])
					}
				}
			}

			// It provides the bus API it serves, at each version in proto/, and states the
			// ones its code calls: Depends, or Recommends for those it uses when their
			// socket is there.
			wantProvides := busAPIs(t, repo, svc)
			if got := list(d.fields["Provides"]); !slices.Equal(got, wantProvides) {
				t.Errorf("%s: Provides: %v, want %v", name, got, wantProvides)
			}
			depends, recommends := list(d.fields["Depends"]), list(d.fields["Recommends"])
			if !slices.Contains(depends, "systemd") {
				t.Errorf("%s: Depends: %v lacks systemd", name, depends)
			}
			var stated []string
			for _, p := range slices.Concat(depends, recommends) {
				if strings.HasPrefix(p, "unitlet-bus-") {
					stated = append(stated, p)
				}
			}
			slices.Sort(stated)
			if want := calledAPIs(t, repo, svc); !slices.Equal(stated, want) {
				t.Errorf("%s: Depends and Recommends state the bus APIs %v; its code calls %v", name, stated, want)
			}
			if svc != "config" && !slices.Contains(depends, "unitlet-bus-config-v1") {
				t.Errorf("%s: Depends: %v lacks unitlet-bus-config-v1: every service reads its configuration from unitlet-config", name, depends)
			}
		})
	}
}

// unitletctl's package: the binary, and the bus API every node serves.
func TestUnitletctlPackage(t *testing.T) {
	repo, version := repoAndVersion(t)
	d := open(t, repo, "unitletctl", version, hostArch(t))
	if fi, err := os.Stat(filepath.Join(d.root, "usr/bin/unitletctl")); err != nil || fi.Mode().Perm()&0o111 == 0 {
		t.Errorf("unitletctl: no executable /usr/bin/unitletctl (%v)", err)
	}
	if depends := list(d.fields["Depends"]); !slices.Contains(depends, "unitlet-bus-config-v1") {
		t.Errorf("unitletctl: Depends: %v lacks unitlet-bus-config-v1", depends)
	}
	d.wantConffiles(t)
}

// The unitlet meta-package: every other package, unitlet.target, enabled and not started.
func TestMetaPackage(t *testing.T) {
	repo, version := repoAndVersion(t)
	d := open(t, repo, "unitlet", version, "all")
	want := []string{"unitletctl"}
	for _, svc := range services(t, repo) {
		want = append(want, "unitlet-"+svc)
	}
	for _, p := range want {
		if !slices.Contains(list(d.fields["Depends"]), p) {
			t.Errorf("unitlet: Depends: %q lacks %s", d.fields["Depends"], p)
		}
	}
	d.sameAs(t, filepath.Join(unitDir, "unitlet.target"), filepath.Join(repo, "systemd", "unitlet.target"))
	postinst := code(d.script(t, "postinst"))
	if !strings.Contains(postinst, "deb-systemd-helper enable unitlet.target") {
		t.Errorf("unitlet: postinst does not enable unitlet.target:\n%s", postinst)
	}
	if strings.Contains(postinst, "deb-systemd-invoke") || regexp.MustCompile(`systemctl.* (re)?start`).MatchString(postinst) {
		t.Errorf("unitlet: postinst starts or restarts units; each service package restarts its own:\n%s", postinst)
	}
	d.wantConffiles(t)
}

// unitNameRE finds a unitlet service's unit named in a maintainer script.
var unitNameRE = regexp.MustCompile(`unitlet-([a-z]+)\.(?:service|socket)`)

// open finds NAME's package of VERSION for ARCH in the dist directory and extracts it.
func open(t *testing.T, repo, name, version, arch string) deb {
	t.Helper()
	dist := distDir(repo)
	// dpkg-deb names the file without the epoch; the version has none.
	path := filepath.Join(dist, fmt.Sprintf("%s_%s_%s.deb", name, version, arch))
	if _, err := os.Stat(path); err != nil {
		have, _ := filepath.Glob(filepath.Join(dist, name+"_*.deb"))
		t.Fatalf("no %s (the package of this checkout, version %s): run `make deb` (found: %v)", path, version, have)
	}
	root := t.TempDir()
	run(t, "", "dpkg-deb", "--raw-extract", path, root)
	fields := map[string]string{}
	control, err := os.ReadFile(filepath.Join(root, "DEBIAN", "control"))
	if err != nil {
		t.Fatal(err)
	}
	key := ""
	for _, line := range strings.Split(string(control), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && !strings.HasPrefix(line, " ") {
			key = k
			fields[key] = strings.TrimSpace(v)
		} else if key != "" && line != "" {
			fields[key] += "\n" + line
		}
	}
	d := deb{fields: fields, root: root}
	if fields["Package"] != name || fields["Version"] != version || fields["Architecture"] != arch {
		t.Errorf("%s: Package %q, Version %q, Architecture %q; want %s, %s, %s", path, fields["Package"], fields["Version"], fields["Architecture"], name, version, arch)
	}
	return d
}

// distDir is where `make deb` put the packages.
func distDir(repo string) string {
	if dist := os.Getenv("UNITLET_DIST_DIR"); dist != "" {
		return dist
	}
	return filepath.Join(repo, "dist")
}

// sameAs fails unless the package's file PATH has the repository file's contents; a unit
// must be root's alone (0600, CIS 4.1.1, which `unitletctl cis` checks).
func (d deb) sameAs(t *testing.T, path, repoFile string) {
	t.Helper()
	got, err := os.ReadFile(filepath.Join(d.root, path))
	if err != nil {
		t.Errorf("%s: no /%s: %v", d.fields["Package"], path, err)
		return
	}
	if fi, err := os.Stat(filepath.Join(d.root, path)); err == nil && strings.HasPrefix(path, unitDir) && fi.Mode().Perm() != 0o600 {
		t.Errorf("%s: /%s is %v, want 0600 (CIS 4.1.1)", d.fields["Package"], path, fi.Mode().Perm())
	}
	want, err := os.ReadFile(repoFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s: /%s differs from %s (a stale package? run `make deb`)", d.fields["Package"], path, repoFile)
	}
}

// unitValue is the value of KEY= in the package's unit PATH.
func (d deb) unitValue(t *testing.T, path, key string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(d.root, path))
	if err != nil {
		t.Fatalf("%s: %v", d.fields["Package"], err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key+"="); ok {
			return v
		}
	}
	t.Fatalf("%s: /%s has no %s=", d.fields["Package"], path, key)
	return ""
}

// wantConffiles fails unless the package's conffiles are exactly WANT.
func (d deb) wantConffiles(t *testing.T, want ...string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(d.root, "DEBIAN", "conffiles"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	if got := strings.Fields(string(b)); !slices.Equal(got, want) {
		t.Errorf("%s: conffiles %v, want %v", d.fields["Package"], got, want)
	}
}

// script is the package's maintainer script NAME, after sh -n found it well formed.
func (d deb) script(t *testing.T, name string) string {
	t.Helper()
	path := filepath.Join(d.root, "DEBIAN", name)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%s: no %s: %v", d.fields["Package"], name, err)
	}
	run(t, "", "sh", "-n", path)
	return string(b)
}

// code is a shell script without its comment lines.
func code(script string) string {
	var lines []string
	for _, line := range strings.Split(script, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			lines = append(lines, line)
		}
	}
	return strings.Join(lines, "\n")
}

// list splits a Depends-like field into its package names, versions dropped.
func list(field string) []string {
	var names []string
	for _, item := range strings.Split(field, ",") {
		if name := strings.Fields(item); len(name) > 0 {
			names = append(names, name[0])
		}
	}
	return names
}

// busAPIs are the virtual packages of SVC's bus API: unitlet-bus-<svc>-<version> for each
// version directory under proto/unitlet/<svc>/.
func busAPIs(t *testing.T, repo, svc string) []string {
	t.Helper()
	dirs, err := filepath.Glob(filepath.Join(repo, "proto", "unitlet", svc, "v*"))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no bus API versions in proto/unitlet/%s (%v)", svc, err)
	}
	var apis []string
	for _, d := range dirs {
		apis = append(apis, "unitlet-bus-"+svc+"-"+filepath.Base(d))
	}
	return apis
}

// calledAPIs are the other services' bus APIs SVC's code imports (services/<svc>/...,
// not its tests), as virtual package names; every service but config reads its
// configuration through shared/nodeconfig, which calls unitlet-config. unitlet.daemon.v1
// is every service's own (health, info) and no package's.
func calledAPIs(t *testing.T, repo, svc string) []string {
	t.Helper()
	out := run(t, repo, "go", "list", "-f", `{{join .Imports "\n"}}`, "github.com/unitlet/unitlet/services/"+svc+"/...")
	const proto = "github.com/unitlet/unitlet/proto/unitlet/"
	var apis []string
	for _, imp := range strings.Split(out, "\n") {
		if imp == "github.com/unitlet/unitlet/shared/nodeconfig" {
			imp = proto + "config/v1"
		}
		api, ok := strings.CutPrefix(imp, proto)
		if !ok {
			continue
		}
		owner, version, _ := strings.Cut(api, "/")
		if owner == svc || owner == "daemon" {
			continue
		}
		apis = append(apis, "unitlet-bus-"+owner+"-"+version)
	}
	slices.Sort(apis)
	return slices.Compact(apis)
}

// repoAndVersion are the repository's root and the packages' Debian version.
func repoAndVersion(t *testing.T) (string, string) {
	t.Helper()
	repo := strings.TrimSpace(run(t, "", "git", "rev-parse", "--show-toplevel"))
	return repo, gitVersion(t, repo)
}

// gitVersion is the Debian version of the checkout in DIR by the rule of README.md's
// "Debian packages", from git describe and the commit's time: written again here, apart
// from deploy/deb/version.sh, so that each checks the other.
func gitVersion(t *testing.T, dir string) string {
	t.Helper()
	describe := strings.TrimSpace(run(t, dir, "git", "describe", "--tags", "--always", "--dirty"))
	secs, err := strconv.ParseInt(strings.TrimSpace(run(t, dir, "git", "log", "-1", "--format=%ct")), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	date := time.Unix(secs, 0).UTC().Format("20060102150405")
	suffix := ""
	if d, ok := strings.CutSuffix(describe, "-dirty"); ok {
		describe, suffix = d, "+dirty"
	}
	tagVersion := func(tag string) string { return strings.ReplaceAll(strings.TrimPrefix(tag, "v"), "-", "~") }
	if m := regexp.MustCompile(`^(.+)-([0-9]+)-g([0-9a-f]+)$`).FindStringSubmatch(describe); m != nil {
		return tagVersion(m[1]) + "+git" + date + "." + m[2] + "." + m[3] + suffix
	}
	if exec.Command("git", "-C", dir, "rev-parse", "-q", "--verify", "refs/tags/"+describe).Run() != nil {
		return "0.0.0~git" + date + "." + describe + suffix
	}
	return tagVersion(describe) + suffix
}

// hostArch is the Debian architecture the service packages are built for.
func hostArch(t *testing.T) string {
	t.Helper()
	return strings.TrimSpace(run(t, "", "dpkg", "--print-architecture"))
}

// run runs a command in DIR and returns its standard output; it fails the test naming the
// command and what it printed.
func run(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
}

// deploy/deb/version.sh, in a repository of its own through the cases of README.md's table
// (no tag, uncommitted changes, on a tag, commits after it, a pre-release tag), gives the
// versions the table says, which this test's rule gives too, and which dpkg orders as the
// commits.
func TestVersionRule(t *testing.T) {
	repo := strings.TrimSpace(run(t, "", "git", "rev-parse", "--show-toplevel"))
	script, err := os.ReadFile(filepath.Join(repo, "deploy/deb/version.sh"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	mkdirAll(t, filepath.Join(dir, "deploy/deb"))
	if err := os.WriteFile(filepath.Join(dir, "deploy/deb/version.sh"), script, 0o755); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.org", "GIT_CONFIG_GLOBAL": "/dev/null"} {
		t.Setenv(k, v)
	}
	git := func(args ...string) string { t.Helper(); return strings.TrimSpace(run(t, dir, "git", args...)) }
	commit := func(date string) string {
		t.Helper()
		t.Setenv("GIT_COMMITTER_DATE", date)
		t.Setenv("GIT_AUTHOR_DATE", date)
		git("commit", "-q", "--allow-empty", "-m", date)
		return git("rev-parse", "--short", "HEAD")
	}
	git("init", "-q")
	git("add", ".")
	a := commit("2026-01-02T03:04:05Z")
	var versions []string
	check := func(want string) {
		t.Helper()
		got := strings.TrimSpace(run(t, dir, filepath.Join(dir, "deploy/deb/version.sh")))
		if got != want || gitVersion(t, dir) != want {
			t.Errorf("git describe %s: version.sh says %q, the test's rule %q; want %q", git("describe", "--tags", "--always", "--dirty"), got, gitVersion(t, dir), want)
		}
		run(t, "", "dpkg", "--validate-version", want)
		versions = append(versions, want)
	}
	check("0.0.0~git20260102030405." + a)
	writeFile(t, filepath.Join(dir, "deploy/deb/version.sh"), string(script)+"\n")
	check("0.0.0~git20260102030405." + a + "+dirty")
	git("checkout", "-q", "--", ".")
	git("tag", "v1.2.0")
	check("1.2.0")
	b := commit("2026-02-03T04:05:06Z")
	check("1.2.0+git20260203040506.1." + b)
	git("tag", "v1.3.0-rc.1")
	check("1.3.0~rc.1")
	// The dirty build sorts after its clean one; each later commit or tag after the earlier.
	for i := 1; i < len(versions); i++ {
		if exec.Command("dpkg", "--compare-versions", versions[i-1], "lt", versions[i]).Run() != nil {
			t.Errorf("dpkg does not order %s before %s", versions[i-1], versions[i])
		}
	}
}

// A real dpkg installs every package into an empty root (--root, the maintainer scripts run
// outside it with DPKG_ROOT set, as in a bootstrap): the unitlet group, the sockets and
// unitlet.target enabled, the conffile kept across a reinstall with the administrator's
// change, and a purge that deletes the purged service's state and nobody else's.
func TestInstallReinstallPurge(t *testing.T) {
	requireRoot(t)
	repo, version := repoAndVersion(t)
	arch := hostArch(t)
	root := t.TempDir()
	for _, dir := range []string{"var/lib/dpkg/info", "var/lib/dpkg/updates", "etc"} {
		mkdirAll(t, filepath.Join(root, dir))
	}
	writeFile(t, filepath.Join(root, "var/lib/dpkg/status"), "")
	writeFile(t, filepath.Join(root, "etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n")
	writeFile(t, filepath.Join(root, "etc/group"), "root:x:0:\n")
	pkg := func(name, arch string) string {
		return filepath.Join(distDir(repo), fmt.Sprintf("%s_%s_%s.deb", name, version, arch))
	}
	// libc6 and systemd are not in the empty root's database: --force-depends.
	dpkg := func(args ...string) {
		t.Helper()
		run(t, "", "dpkg", slices.Concat([]string{"--root=" + root, "--force-script-chrootless", "--force-depends", "--log=/dev/null"}, args)...)
	}
	debs := []string{pkg("unitlet", "all"), pkg("unitletctl", arch)}
	for _, svc := range services(t, repo) {
		debs = append(debs, pkg("unitlet-"+svc, arch))
	}
	dpkg(append([]string{"--install"}, debs...)...)

	group, err := os.ReadFile(filepath.Join(root, "etc/group"))
	if err != nil || !regexp.MustCompile(`(?m)^unitlet:x:[0-9]+:`).Match(group) {
		t.Errorf("no unitlet group after the install (%v):\n%s", err, group)
	}
	enabled := func(link string) bool {
		_, err := os.Lstat(filepath.Join(root, "etc/systemd/system", link))
		return err == nil
	}
	for _, svc := range services(t, repo) {
		if !enabled("unitlet.target.wants/unitlet-" + svc + ".socket") {
			t.Errorf("unitlet-%s.socket is not enabled after the install", svc)
		}
	}
	if !enabled("multi-user.target.wants/unitlet.target") {
		t.Error("unitlet.target is not enabled after the install")
	}

	// The administrator's change to the conffile survives a reinstall of unitlet-config.
	config := filepath.Join(root, "etc/unitlet/config.yaml")
	b, err := os.ReadFile(config)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, config, string(b)+"# changed here\n")
	dpkg("--install", pkg("unitlet-config", arch))
	if b, _ := os.ReadFile(config); !strings.HasSuffix(string(b), "# changed here\n") {
		t.Errorf("reinstalling unitlet-config replaced the changed /etc/unitlet/config.yaml:\n%s", b)
	}

	// Each service's state, the shared pods' directory, and a purge of podsync, then of config.
	state := map[string][]string{
		"config":   {"var/lib/unitlet/checkpoints", "var/lib/unitlet/unitlet-config.lock"},
		"podsync":  {"var/lib/unitlet/podsync", "var/lib/unitlet/image_manager"},
		"eviction": {"var/lib/unitlet/eviction"},
		"":         {"var/lib/unitlet/pods/a-pod"},
	}
	for _, paths := range state {
		for _, p := range paths {
			mkdirAll(t, filepath.Join(root, p))
		}
	}
	exists := func(p string) bool { _, err := os.Lstat(filepath.Join(root, p)); return err == nil }
	var purged []string
	for _, svc := range []string{"podsync", "config"} {
		dpkg("--purge", "unitlet-"+svc)
		purged = append(purged, svc)
		for owner, paths := range state {
			for _, p := range paths {
				if want := !slices.Contains(purged, owner); exists(p) != want {
					t.Errorf("after purging %v: /%s exists: %v, want %v", purged, p, exists(p), want)
				}
			}
		}
		if enabled("unitlet.target.wants/unitlet-" + svc + ".socket") {
			t.Errorf("unitlet-%s.socket is still enabled after its purge", svc)
		}
	}
	if exists("etc/unitlet/config.yaml") {
		t.Error("/etc/unitlet/config.yaml is still there after unitlet-config's purge")
	}
	if !enabled("unitlet.target.wants/unitlet-status.socket") {
		t.Error("purging other packages disabled unitlet-status.socket")
	}
}

// requireRoot fails the test unless it runs as root: dpkg installs as root, and the
// maintainer scripts run in a mount namespace of their own.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test installs packages with dpkg: run it as root (make deb-check does, on the machines make test runs on)")
	}
}

func mkdirAll(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// Each service's maintainer scripts, run as on a systemd host (a mount namespace of their
// own with /run/systemd/system, the systemd and debhelper commands and sysctl replaced by
// stand-ins that log their arguments): a first install starts the service's socket, an upgrade
// restarts that one service if it runs, a removal stops it and its socket, an upgrade's
// prerm stops nothing; no script names another service's unit.
func TestMaintainerScriptsOnASystemdHost(t *testing.T) {
	requireRoot(t)
	repo, version := repoAndVersion(t)
	stubs, log := stubCommands(t, "deb-systemd-invoke", "deb-systemd-helper", "systemctl", "systemd-sysusers", "sysctl")
	for _, svc := range services(t, repo) {
		name := "unitlet-" + svc
		d := open(t, repo, name, version, hostArch(t))
		for _, c := range []struct {
			script string
			args   []string
			want   []string // the deb-systemd-invoke calls
		}{
			{"postinst", []string{"configure", ""}, []string{"start " + name + ".socket"}},
			{"postinst", []string{"configure", "0.0.0~old"}, []string{"try-restart " + name + ".service"}},
			{"prerm", []string{"upgrade", version}, nil},
			{"prerm", []string{"remove"}, []string{"stop " + name + ".service " + name + ".socket"}},
			{"postrm", []string{"remove"}, nil},
		} {
			b := runScript(t, d, c.script, c.args, stubs, log)
			var invoked, sysctl []string
			for _, call := range strings.Split(strings.TrimSpace(string(b)), "\n") {
				if rest, ok := strings.CutPrefix(call, "deb-systemd-invoke "); ok {
					invoked = append(invoked, rest)
				}
				if rest, ok := strings.CutPrefix(call, "sysctl "); ok {
					sysctl = append(sysctl, rest)
				}
				for _, m := range unitNameRE.FindAllStringSubmatch(call, -1) {
					if m[1] != svc {
						t.Errorf("%s %s %v: %q acts on another package's unit", name, c.script, c.args, call)
					}
				}
			}
			if !slices.Equal(invoked, c.want) {
				t.Errorf("%s %s %v: deb-systemd-invoke %q, want %q (all calls:\n%s)", name, c.script, c.args, invoked, c.want, b)
			}
			// unitlet-config's postinst applies the kernel tunables it ships at once (a
			// node with protectKernelDefaults: true starts without a reboot); no other
			// script touches a tunable.
			var wantSysctl []string
			if svc == "config" && c.script == "postinst" {
				wantSysctl = []string{"-q -p /usr/lib/sysctl.d/90-unitlet.conf"}
			}
			if !slices.Equal(sysctl, wantSysctl) {
				t.Errorf("%s %s %v: sysctl %q, want %q (all calls:\n%s)", name, c.script, c.args, sysctl, wantSysctl, b)
			}
		}
	}
}

// stubCommands makes a directory of stand-ins for the commands, each of which appends its
// name and arguments to the log file it returns.
func stubCommands(t *testing.T, cmds ...string) (dir, log string) {
	t.Helper()
	dir = t.TempDir()
	log = filepath.Join(t.TempDir(), "calls")
	for _, cmd := range cmds {
		if err := os.WriteFile(filepath.Join(dir, cmd), []byte("#!/bin/sh\necho \"${0##*/} $*\" >>"+log+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir, log
}

// runScript runs the package's maintainer script with args as on a systemd host, the
// stubs first in PATH, and returns the calls they logged.
func runScript(t *testing.T, d deb, script string, args []string, stubs, log string) []byte {
	t.Helper()
	if err := os.Remove(log); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	// unshare(1) makes the namespace's mounts private: the tmpfs on /run is the script's alone.
	cmd := exec.Command("unshare", slices.Concat([]string{"--mount", "sh", "-c",
		`mount -t tmpfs unitlet-debtest /run && mkdir -p /run/systemd/system && exec sh "$@"`, "sh",
		filepath.Join(d.root, "DEBIAN", script)}, args)...)
	cmd.Env = append(os.Environ(), "PATH="+stubs+":"+os.Getenv("PATH"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %s %v: %v\n%s", d.fields["Package"], script, args, err, out)
	}
	b, err := os.ReadFile(log)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return b
}
