package systemd

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// kubeadmDir holds unitlet-kubeadm's units: kubelet.service and drop-ins for the services.
const kubeadmDir = "kubeadm"

// kubeadmDropIns returns the drop-ins of kubeadmDir, as "<unit>.d/<file>".
func kubeadmDropIns(t *testing.T) []string {
	t.Helper()
	dropIns, err := filepath.Glob(filepath.Join(kubeadmDir, "*.service.d", "*.conf"))
	if err != nil || len(dropIns) == 0 {
		t.Fatalf("no drop-ins in systemd/%s (%v)", kubeadmDir, err)
	}
	for i, d := range dropIns {
		dropIns[i] = strings.TrimPrefix(d, kubeadmDir+"/")
	}
	return dropIns
}

// stageKubeadmUnits stages every unit of systemd/ as stageUnits does, with
// unitlet-kubeadm's kubelet.service and drop-ins beside them, and returns the directory.
func stageKubeadmUnits(t *testing.T) string {
	t.Helper()
	dir, _ := stageUnits(t, unitFiles(t), nil)
	for _, name := range append([]string{"kubelet.service"}, kubeadmDropIns(t)...) {
		b, err := os.ReadFile(filepath.Join(kubeadmDir, name))
		if err != nil {
			t.Fatal(err)
		}
		text := binRE.ReplaceAllString(string(b), filepath.Join(dir, "bin")+"/$1")
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// analyzeIn runs systemd-analyze with the staged directory first in the unit path, so that
// units named bare load from it with their drop-ins.
func analyzeIn(t *testing.T, dir string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(analyze(t), args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "SYSTEMD_LOG_COLOR=0", "SYSTEMD_UNIT_PATH="+dir+":")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func TestKubeadmUnitsVerify(t *testing.T) {
	dir := stageKubeadmUnits(t)
	units := []string{"kubelet.service"}
	for _, d := range kubeadmDropIns(t) {
		units = append(units, strings.TrimSuffix(filepath.Dir(d), ".d"))
	}
	out, err := analyzeIn(t, dir, append([]string{"verify", "--no-pager"}, units...)...)
	if err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("systemd-analyze verify %s with unitlet-kubeadm's drop-ins: %v\n%s", strings.Join(units, " "), err, out)
	}
	// Live: a mistake in a drop-in is reported, so the drop-ins were read.
	conf := filepath.Join(dir, "unitlet-config.service.d", "kubeadm.conf")
	b, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(conf, append(b, "UnitletNoSuchSetting=1\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, _ := analyzeIn(t, dir, "verify", "--no-pager", "unitlet-config.service"); !strings.Contains(out, "UnitletNoSuchSetting") {
		t.Errorf("systemd-analyze verify did not read the drop-in: %q", out)
	}
}

// The drop-ins open paths to kubeadm's files; a service's exposure stays under its ceiling.
func TestKubeadmUnitsSecurityExposure(t *testing.T) {
	dir := stageKubeadmUnits(t)
	for _, d := range kubeadmDropIns(t) {
		name := strings.TrimSuffix(filepath.Dir(d), ".d")
		out, err := analyzeIn(t, dir, "security", "--offline=yes", "--no-pager", name)
		m := exposureRE.FindStringSubmatch(out)
		if err != nil || m == nil {
			t.Errorf("systemd-analyze security %s: %v\n%s", name, err, out)
			continue
		}
		t.Logf("EXPOSURE %s with %s: %s", name, d, m[1])
		ceiling := maxExposure
		if c, ok := exposureCeilings[name]; ok {
			ceiling = c
		}
		if level, _ := strconv.ParseFloat(m[1], 64); level > ceiling {
			t.Errorf("%s with %s: exposure %s is above %.1f:\n%s", name, d, m[1], ceiling, exposedLines(out))
		}
	}
}

// kubelet.service stands for unitlet.target: start pulls it in, stop stops it, restart
// restarts unitlet-config alone; unitlet-config reads kubeadm's files.
func TestKubeadmUnitsConventions(t *testing.T) {
	k := parseUnit(t, filepath.Join(kubeadmDir, "kubelet.service"))
	for _, kv := range [][3]string{
		{"Unit", "Wants", target}, {"Unit", "After", target}, {"Unit", "PropagatesStopTo", target},
		{"Service", "Type", "oneshot"}, {"Service", "RemainAfterExit", "yes"}, {"Install", "WantedBy", "multi-user.target"},
	} {
		if !slices.Contains(k.values(kv[0], kv[1]), kv[2]) {
			t.Errorf("kubelet.service: want %s=%s", kv[1], kv[2])
		}
	}
	for _, w := range parseUnit(t, target).values("Unit", "Wants") {
		if !slices.Contains(k.values("Unit", "Wants"), w) {
			t.Errorf("kubelet.service: want Wants=%s, as %s has: a restart of kubelet.service must start it when it is down", w, target)
		}
	}
	services := unitFiles(t, ".service")
	for _, d := range kubeadmDropIns(t) {
		if name := strings.TrimSuffix(filepath.Dir(d), ".d"); !slices.Contains(services, name) {
			t.Errorf("%s: %s is not a unit in systemd/", d, name)
		}
	}
	c := parseUnit(t, filepath.Join(kubeadmDir, "unitlet-config.service.d", "kubeadm.conf"))
	if !slices.Contains(c.values("Unit", "PartOf"), "kubelet.service") {
		t.Errorf("unitlet-config's drop-in: want PartOf=kubelet.service, so that kubeadm's restart of the kubelet rereads its files")
	}
	starts := c.values("Service", "ExecStart")
	for _, want := range []string{
		"/usr/bin/unitlet-config", "--config=/var/lib/kubelet/config.yaml",
		"--kubeconfig=/etc/kubernetes/kubelet.conf", "--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf",
		"--cert-dir=/var/lib/kubelet/pki", "--kubelet-env-file=/var/lib/kubelet/kubeadm-flags.env", "--kubelet-env-file=/etc/default/kubelet",
	} {
		if !slices.Contains(starts, want) {
			t.Errorf("unitlet-config's drop-in: ExecStart= %q lacks %s", starts, want)
		}
	}
}
