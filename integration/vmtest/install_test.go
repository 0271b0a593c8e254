package vmtest

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/unitlet/unitlet/integration/harness"
)

// The vm node is a real host install: at boot the guest installed unitlet from the
// packages `make deb` built (apt-get install ./*.deb, harness.VMInstallUnit), so every
// unitlet package is installed at the built version, the binaries in /usr/bin are the
// packages' files and the built ones, and the services run from the packaged units with
// only the harness's drop-in over them. It logs the times from boot to the install's end,
// to Ready and to the first pod.
func TestVMNodeInstalledFromThePackages(t *testing.T) {
	n := vmNode(t)
	dist := harness.DistDir(stack.Repo())
	packages := []string{"unitlet", "unitletctl"}
	for _, svc := range n.Services {
		packages = append(packages, "unitlet-"+svc)
	}
	slices.Sort(packages)

	version := debVersion(t, dist)

	// dpkg's database in the guest: each package installed at that version.
	got := map[string]string{}
	query := stack.InNode(t, n.Name, append([]string{"dpkg-query", "-W", "-f", "${Package}\t${Version}\t${Status}\n"}, packages...)...)
	for _, line := range strings.Split(query, "\n") {
		if f := strings.Split(line, "\t"); len(f) == 3 {
			got[f[0]] = f[1] + " " + f[2]
		}
	}
	for _, p := range packages {
		if want := version + " install ok installed"; got[p] != want {
			t.Errorf("dpkg-query -W %s on %s: %q, want %q:\n%s", p, n.Name, got[p], want, query)
		}
	}

	for _, name := range packages {
		if name == "unitlet" {
			continue
		}
		bin := "/usr/bin/" + name
		// The file is the package's, unchanged since dpkg put it there ...
		if owner := stack.InNode(t, n.Name, "dpkg", "-S", bin); owner != name+": "+bin {
			t.Errorf("dpkg -S %s: %q, want %q", bin, owner, name+": "+bin)
		}
		if v := stack.InNode(t, n.Name, "sh", "-c", "dpkg --verify "+name+"; echo rc=$?"); v != "rc=0" {
			t.Errorf("dpkg --verify %s: files differ from the package's:\n%s", name, v)
		}
		// ... and the one this checkout built, which the other backends run.
		local, err := os.ReadFile(filepath.Join(os.Getenv("UNITLET_BIN_DIR"), name))
		if err != nil {
			t.Fatalf("the built %s: %v (run with UNITLET_BIN_DIR=$PWD/bin after `make build deb`)", name, err)
		}
		sum := sha256.Sum256(local)
		if guest := strings.Fields(stack.InNode(t, n.Name, "sha256sum", bin)); len(guest) == 0 || guest[0] != hex.EncodeToString(sum[:]) {
			t.Errorf("%s on %s is not bin/%s (sha256 %v, want %x)", bin, n.Name, name, guest, sum)
		}
	}

	// Each service runs from its packaged unit, its binary from the package, with the
	// harness's drop-in the only one over it.
	for _, svc := range n.Services {
		unit := "unitlet-" + svc + ".service"
		props := stack.UnitProps(t, n.Name, unit, "FragmentPath", "DropInPaths", "ActiveState", "MainPID")
		if props["ActiveState"] != "active" {
			t.Errorf("%s: ActiveState %q, want active", unit, props["ActiveState"])
		}
		// /lib is /usr/lib on Debian 12 (merged /usr): systemd may name either.
		fragment := stack.InNode(t, n.Name, "readlink", "-f", props["FragmentPath"])
		if fragment != "/usr/lib/systemd/system/"+unit {
			t.Errorf("%s runs from %s (FragmentPath %s), want the packaged /usr/lib/systemd/system/%s", unit, fragment, props["FragmentPath"], unit)
		}
		if owner := stack.InNode(t, n.Name, "dpkg", "-S", fragment); owner != "unitlet-"+svc+": "+fragment {
			t.Errorf("dpkg -S %s: %q, want unitlet-%s's", fragment, owner, svc)
		}
		if want := "/etc/systemd/system/" + unit + ".d/harness.conf"; props["DropInPaths"] != want {
			t.Errorf("%s: drop-ins %q, want the harness's alone (%s)", unit, props["DropInPaths"], want)
		}
		if exe := stack.InNode(t, n.Name, "readlink", "/proc/"+props["MainPID"]+"/exe"); exe != "/usr/bin/unitlet-"+svc {
			t.Errorf("%s's main process (pid %s) runs %q, want /usr/bin/unitlet-%s", unit, props["MainPID"], exe, svc)
		}
	}

	// The configuration is the packaged conffile, as shipped, and the node's drop-in.
	if v := stack.InNode(t, n.Name, "sh", "-c", "dpkg --verify unitlet-config; echo rc=$?"); v != "rc=0" {
		t.Errorf("dpkg --verify unitlet-config: /etc/unitlet/config.yaml is not the packaged one:\n%s", v)
	}

	times, err := stack.VMBootTimes(n.Name)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range times {
		t.Log(line)
	}
	if !strings.Contains(strings.Join(times, "\n"), "boot to unitlet installed") {
		t.Errorf("the boot times of %s say nothing of the install:\n%s", n.Name, strings.Join(times, "\n"))
	}
}

// debVersion is the version of the packages in dist, from its unitlet meta-package.
func debVersion(t *testing.T, dist string) string {
	t.Helper()
	metas, _ := filepath.Glob(filepath.Join(dist, "unitlet_*_all.deb"))
	if len(metas) != 1 {
		t.Fatalf("want one unitlet_*_all.deb in %s, found %v: run `make deb`", dist, metas)
	}
	out, err := exec.Command("dpkg-deb", "--field", metas[0], "Version").CombinedOutput()
	if err != nil {
		t.Fatalf("dpkg-deb --field %s Version: %v\n%s (dpkg-deb is in the package dpkg)", metas[0], err, out)
	}
	return strings.TrimSpace(string(out))
}
