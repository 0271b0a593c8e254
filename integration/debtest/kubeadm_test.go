package debtest

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// unitlet-kubeadm: kubelet.service and the services' drop-ins as systemd/kubeadm has them,
// in the real kubelet's place (Provides, Conflicts, Replaces), /etc/kubernetes for
// kubelet.conf, kubelet.service enabled and nothing started by its scripts.
func TestKubeadmPackage(t *testing.T) {
	repo, version := repoAndVersion(t)
	d := open(t, repo, "unitlet-kubeadm", version, "all")
	for _, field := range []string{"Provides", "Conflicts", "Replaces"} {
		if !slices.Contains(list(d.fields[field]), "kubelet") {
			t.Errorf("unitlet-kubeadm: %s: %q lacks kubelet", field, d.fields[field])
		}
	}
	if !slices.Contains(list(d.fields["Depends"]), "unitlet") {
		t.Errorf("unitlet-kubeadm: Depends: %q lacks unitlet (unitlet.target and every service)", d.fields["Depends"])
	}
	src := filepath.Join(repo, "systemd", "kubeadm")
	files, err := filepath.Glob(filepath.Join(src, "*.service.d", "*.conf"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no drop-ins in %s (%v)", src, err)
	}
	for _, f := range append(files, filepath.Join(src, "kubelet.service")) {
		d.sameAs(t, filepath.Join(unitDir, strings.TrimPrefix(f, src+"/")), f)
	}
	for _, dir := range []string{"etc/kubernetes", "etc/kubernetes/manifests"} {
		if fi, err := os.Stat(filepath.Join(d.root, dir)); err != nil || !fi.IsDir() {
			t.Errorf("unitlet-kubeadm: no directory /%s (%v)", dir, err)
		}
	}
	d.wantConffiles(t)
	postinst := code(d.script(t, "postinst"))
	if !strings.Contains(postinst, "deb-systemd-helper enable kubelet.service") {
		t.Errorf("unitlet-kubeadm: postinst does not enable kubelet.service:\n%s", postinst)
	}
}

// Its maintainer scripts as on a systemd host: a first install starts nothing (kubeadm
// starts the kubelet once its files are there), an upgrade restarts it if it runs, a
// removal stops it.
func TestKubeadmMaintainerScripts(t *testing.T) {
	requireRoot(t)
	repo, version := repoAndVersion(t)
	d := open(t, repo, "unitlet-kubeadm", version, "all")
	stubs, log := stubCommands(t, "deb-systemd-invoke", "deb-systemd-helper", "systemctl")
	for _, c := range []struct {
		script string
		args   []string
		want   []string // the deb-systemd-invoke calls
	}{
		{"postinst", []string{"configure", ""}, nil},
		{"postinst", []string{"configure", "0.0.0~old"}, []string{"try-restart kubelet.service"}},
		{"prerm", []string{"upgrade", version}, nil},
		{"prerm", []string{"remove"}, []string{"stop kubelet.service"}},
		{"postrm", []string{"remove"}, nil},
		{"postrm", []string{"purge"}, nil},
	} {
		b := runScript(t, d, c.script, c.args, stubs, log)
		var invoked []string
		for _, call := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if rest, ok := strings.CutPrefix(call, "deb-systemd-invoke "); ok {
				invoked = append(invoked, rest)
			}
			if m := unitNameRE.FindString(call); m != "" {
				t.Errorf("%s %v: %q acts on a unitlet service's unit; only kubelet.service is this package's", c.script, c.args, call)
			}
		}
		if !slices.Equal(invoked, c.want) {
			t.Errorf("%s %v: deb-systemd-invoke %q, want %q (all calls:\n%s)", c.script, c.args, invoked, c.want, b)
		}
	}
}
