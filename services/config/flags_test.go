package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/unitlet/unitlet/services/config/kubeletconfig"
	"github.com/unitlet/unitlet/services/config/kubeletenv"
)

// parseOptions reads unitlet-config's command line and environment as its main does.
func parseOptions(args []string, environ map[string]string) (*Options, error) {
	if environ == nil {
		environ = map[string]string{}
	}
	cfg, _, err := Command().Parse(args, environ)
	return &cfg.Options, err
}

func TestFlagsOverEnvironmentOverNothing(t *testing.T) {
	o, err := parseOptions(
		[]string{"--config=/etc/unitlet/config.yaml", "--max-pods=50", "--hostname-override=flag-name"},
		map[string]string{
			"UNITLET_HOSTNAME_OVERRIDE": "env-name",
			"UNITLET_ROOT_DIR":          "/srv/unitlet",
			"UNITLET_MAX_PODS":          "20",
			"UNITLET_CLUSTER_DOMAIN":    "example.org",
			"UNITLET_NODE_IP":           "192.0.2.1,2001:db8::1",
		})
	if err != nil {
		t.Fatal(err)
	}
	if o.HostnameOverride != "flag-name" {
		t.Errorf("hostname override %q: the flag must win over the environment", o.HostnameOverride)
	}
	if o.RootDir != "/srv/unitlet" || o.CertDir != "/srv/unitlet/pki" {
		t.Errorf("root dir %q cert dir %q", o.RootDir, o.CertDir)
	}
	if !reflect.DeepEqual(o.NodeIPs, []string{"192.0.2.1", "2001:db8::1"}) {
		t.Errorf("node IPs %v", o.NodeIPs)
	}
	want := []kubeletconfig.Override{
		{Kind: kubeletconfig.SourceEnvironment, Name: "UNITLET_CLUSTER_DOMAIN", Patch: map[string]any{"clusterDomain": "example.org"}},
		{Kind: kubeletconfig.SourceFlags, Name: "--max-pods", Patch: map[string]any{"maxPods": int32(50)}},
	}
	if !reflect.DeepEqual(o.Overrides, want) {
		t.Errorf("overrides\n got %#v\nwant %#v", o.Overrides, want)
	}
}

func TestFlagErrorsNameTheFlagOrVariable(t *testing.T) {
	cases := []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--max-pods=lots"}, nil, "max-pods"},
		{nil, map[string]string{"UNITLET_MAX_PODS": "lots"}, "UNITLET_MAX_PODS"},
		{[]string{"--no-such-flag"}, nil, "no-such-flag"},
		{[]string{"stray"}, nil, `"stray"`},
		{[]string{"--register-with-taints=dedicated"}, nil, "register-with-taints"},
		{[]string{"--node-labels=novalue"}, nil, "node-labels"},
		{[]string{"--bootstrap-kubeconfig=/etc/unitlet/bootstrap.conf"}, nil, "--kubeconfig"},
	}
	for _, c := range cases {
		_, err := parseOptions(c.args, c.env)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v %v: error %v, want one naming %s", c.args, c.env, err, c.want)
		}
	}
}

func TestRegisterWithTaintsFlag(t *testing.T) {
	o, err := parseOptions([]string{"--register-with-taints=a=b:NoSchedule,c:NoExecute"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := o.Overrides[0].Patch["registerWithTaints"]
	want := []map[string]any{{"key": "a", "value": "b", "effect": "NoSchedule"}, {"key": "c", "effect": "NoExecute"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %#v want %#v", got, want)
	}
}

func TestKubeletEnvFilesApplyAfterTheCommandLine(t *testing.T) {
	dir := t.TempDir()
	kubeadm := filepath.Join(dir, "kubeadm-flags.env")
	extra := filepath.Join(dir, "kubelet")
	writeFile(t, kubeadm, `KUBELET_KUBEADM_ARGS="--hostname-override=worker-1 --register-with-taints=dedicated=infra:NoSchedule --node-ip=10.0.0.5 --node-labels=a=1"`+"\n")
	writeFile(t, extra, "KUBELET_EXTRA_ARGS=--node-labels=b=2 --max-pods 30 --node-ip=10.0.0.6\n")
	o, err := parseOptions([]string{
		"--config=/var/lib/kubelet/config.yaml", "--kubeconfig=/etc/kubernetes/kubelet.conf",
		"--hostname-override=cmdline", "--node-ip=192.0.2.1", "--max-pods=10",
		"--kubelet-env-file=" + kubeadm, "--kubelet-env-file=" + filepath.Join(dir, "missing"), "--kubelet-env-file=" + extra,
	}, map[string]string{"UNITLET_MAX_PODS": "20"})
	if err != nil {
		t.Fatal(err)
	}
	if o.HostnameOverride != "worker-1" || !reflect.DeepEqual(o.NodeIPs, []string{"10.0.0.6"}) ||
		!reflect.DeepEqual(o.NodeLabels, map[string]string{"a": "1", "b": "2"}) {
		t.Errorf("hostname %q, node IPs %v, labels %v: want the files' values over the command line's, later files last", o.HostnameOverride, o.NodeIPs, o.NodeLabels)
	}
	// Each file is a source of its own, named by the file, holding the fields it set last.
	want := []kubeletconfig.Override{
		{Kind: kubeletconfig.SourceFlags, Name: "--register-with-taints (" + kubeadm + ")", Patch: map[string]any{
			"registerWithTaints": []map[string]any{{"key": "dedicated", "value": "infra", "effect": "NoSchedule"}},
		}},
		{Kind: kubeletconfig.SourceFlags, Name: "--max-pods (" + extra + ")", Patch: map[string]any{"maxPods": int32(30)}},
	}
	if !reflect.DeepEqual(o.Overrides, want) {
		t.Errorf("overrides\n got %#v\nwant %#v", o.Overrides, want)
	}
}

func TestKubeletEnvFileErrorsNameTheFileAndFlag(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubeadm-flags.env")
	writeFile(t, path, `KUBELET_KUBEADM_ARGS="--pod-infra-container-image=registry.k8s.io/pause:3.9"`+"\n")
	_, err := parseOptions([]string{"--kubelet-env-file=" + path}, nil)
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "--pod-infra-container-image") {
		t.Fatalf("err = %v, want one naming %s and --pod-infra-container-image", err, path)
	}
	writeFile(t, path, "KUBELET_EXTRA_ARGS=--max-pods=lots\n")
	_, err = parseOptions([]string{"--kubelet-env-file=" + path}, nil)
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "--max-pods") {
		t.Fatalf("err = %v, want one naming %s and --max-pods", err, path)
	}
}

// Every kubelet flag kubeletenv maps has its unitlet-config flag.
func TestKubeletEnvTableNamesUnitletConfigFlags(t *testing.T) {
	fs := pflag.NewFlagSet("unitlet-config", pflag.ContinueOnError)
	bindFlags(fs, &Options{})
	for kubelet, unitlet := range kubeletenv.Supported {
		if fs.Lookup(unitlet) == nil {
			t.Errorf("kubelet flag --%s maps to --%s, which unitlet-config does not have", kubelet, unitlet)
		}
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}
