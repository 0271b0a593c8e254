package config

import (
	"reflect"
	"strings"
	"testing"

	"github.com/unitlet/unitlet/services/config/kubeletconfig"
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
