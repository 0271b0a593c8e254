package kubeletenv

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestParseMapsTheFlagsKubeadmWrites(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		want       []Flag
	}{{
		// kubeadm v1.36 join on a worker named apart from its host name, with a taint and
		// nodeRegistration.kubeletExtraArgs (Go's %q quoting, as kubeadm writes it).
		name: "kubeadm v1.36",
		file: `KUBELET_KUBEADM_ARGS="--hostname-override=worker-1 --register-with-taints=dedicated=infra:NoSchedule --node-ip=10.0.0.5 --node-labels=tier=\"gold\""` + "\n",
		want: []Flag{
			{"hostname-override", "worker-1"}, {"register-with-taints", "dedicated=infra:NoSchedule"},
			{"node-ip", "10.0.0.5"}, {"node-labels", `tier="gold"`},
		},
	}, {
		// Before NodeLocalCRISocket, kubeadm put the CRI socket on the command line.
		name: "kubeadm v1.33",
		file: `KUBELET_KUBEADM_ARGS="--container-runtime-endpoint=unix:///var/run/containerd/containerd.sock"` + "\n",
		want: []Flag{{"container-runtime-endpoint", "unix:///var/run/containerd/containerd.sock"}},
	}, {
		name: "nothing to add",
		file: `KUBELET_KUBEADM_ARGS=""` + "\n",
	}, {
		// /etc/default/kubelet as an operator writes it: bare, separate values, comments.
		name: "default file",
		file: "# extra flags\n; another comment\n\nKUBELET_EXTRA_ARGS=--max-pods 50   --cluster-dns=10.96.0.10,10.96.0.11  \n",
		want: []Flag{{"max-pods", "50"}, {"cluster-dns", "10.96.0.10,10.96.0.11"}},
	}, {
		// The kubeadm variable comes first on the command line, wherever it is in the file;
		// other variables are not the kubelet's.
		name: "both variables",
		file: "KUBELET_EXTRA_ARGS='--max-pods=20'\nOTHER=--whatever\nKUBELET_KUBEADM_ARGS=\"--max-pods=10\"\n",
		want: []Flag{{"max-pods", "10"}, {"max-pods", "20"}},
	}, {
		name: "later assignment wins",
		file: "KUBELET_EXTRA_ARGS=--max-pods=1\nKUBELET_EXTRA_ARGS=--max-pods=2\n",
		want: []Flag{{"max-pods", "2"}},
	}, {
		name: "continued line",
		file: "KUBELET_EXTRA_ARGS=\"--max-pods=3 \\\n--cluster-domain=example.org\"\nKUBELET_KUBEADM_ARGS=--node-ip=10.0.0.1 \\\n--hostname-override=n\n",
		want: []Flag{{"node-ip", "10.0.0.1"}, {"hostname-override", "n"}, {"max-pods", "3"}, {"cluster-domain", "example.org"}},
	}, {
		// A backslash before another character stays inside double quotes, as in systemd;
		// a quote inside a bare value is a character.
		name: "escapes",
		file: `KUBELET_EXTRA_ARGS="--node-labels=a=\x" ` + "\n" + `KUBELET_KUBEADM_ARGS=--node-labels=b="c"` + "\r\n",
		want: []Flag{{"node-labels", `b="c"`}, {"node-labels", `a=\x`}},
	}, {
		name: "quoted parts joined",
		file: `KUBELET_EXTRA_ARGS="--node-labels="'a=b' "--max-pods=4"` + "\n",
		want: []Flag{{"node-labels", "a=b--max-pods=4"}},
	}, {
		name: "empty value",
		file: "KUBELET_EXTRA_ARGS=--node-labels=\n",
		want: []Flag{{"node-labels", ""}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(tc.file)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Parse = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestParseFailsClosed(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		want       []string
	}{
		{"pod infra image", `KUBELET_KUBEADM_ARGS="--container-runtime-endpoint=unix:///run/containerd/containerd.sock --pod-infra-container-image=registry.k8s.io/pause:3.9"`,
			[]string{"KUBELET_KUBEADM_ARGS", "--pod-infra-container-image", "sandbox_image"}},
		{"unknown flag", "KUBELET_EXTRA_ARGS=--max-pods=3 --fail-swap-on=false\n", []string{"KUBELET_EXTRA_ARGS", "--fail-swap-on", "no such flag"}},
		{"removed runtime flag", `KUBELET_KUBEADM_ARGS="--container-runtime=remote"`, []string{"--container-runtime:", "v1.27"}},
		{"verbosity", "KUBELET_EXTRA_ARGS=--v=4", []string{"--v", "UNITLET_LOG_LEVEL"}},
		{"short verbosity", "KUBELET_EXTRA_ARGS=-v 4", []string{"--v", "UNITLET_LOG_LEVEL"}},
		{"single dash", "KUBELET_EXTRA_ARGS=-max-pods=3", []string{`"-max-pods=3": write --max-pods`}},
		{"not a flag", "KUBELET_EXTRA_ARGS=--max-pods=3 4", []string{`"4": not a flag`}},
		{"no value", "KUBELET_EXTRA_ARGS=--max-pods", []string{"--max-pods: no value"}},
		{"no assignment", "KUBELET_EXTRA_ARGS\n", []string{"line 1", "no assignment"}},
		{"space in name", "KUBELET_EXTRA_ARGS --max-pods=3\n", []string{"line 1", "no variable name"}},
		{"bad name", "\n\nKUBELET-EXTRA-ARGS=--max-pods=3\n", []string{"line 3", "no variable name"}},
		{"open quote", "KUBELET_EXTRA_ARGS=\"--max-pods=3\n", []string{"line 1", "KUBELET_EXTRA_ARGS", "not closed"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(tc.file)
			if err == nil {
				t.Fatalf("Parse = %q, want an error", got)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

func TestReadNamesTheFile(t *testing.T) {
	dir := t.TempDir()
	flags, err := Read(filepath.Join(dir, "kubeadm-flags.env"))
	if err != nil || flags != nil {
		t.Fatalf("Read of a missing file = %q, %v; want none, no error", flags, err)
	}
	path := filepath.Join(dir, "kubelet")
	if err := os.WriteFile(path, []byte("KUBELET_EXTRA_ARGS=--feature-gates=Foo=true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Read(path)
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "--feature-gates") {
		t.Fatalf("Read = %v, want an error naming %s and --feature-gates", err, path)
	}
	if err := os.WriteFile(path, []byte("KUBELET_EXTRA_ARGS=--node-ip=10.1.2.3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	flags, err = Read(path)
	if want := []Flag{{"node-ip", "10.1.2.3"}}; err != nil || !reflect.DeepEqual(flags, want) {
		t.Fatalf("Read = %q, %v; want %q", flags, err, want)
	}
}

// Every flag the table supports is one that unitlet-config has is checked where the flags
// are bound (services/config); here, that no flag is both supported and refused.
func TestTablesAreDisjoint(t *testing.T) {
	for name := range Refused {
		if _, ok := Supported[name]; ok {
			t.Errorf("--%s is both supported and refused", name)
		}
	}
}
