package kubeletconfig

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const header = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"

func write(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestBadInputNamesFileAndField(t *testing.T) {
	cases := []struct {
		name, content, field, msg string
	}{
		{"unknown field", header + "maxPodz: 3\n", "maxPodz", "unknown field (did you mean maxPods?)"},
		{"unknown nested field", header + "authentication:\n  webhook:\n    cacheTLL: 1m\n", "authentication.webhook.cacheTLL", "unknown field"},
		{"case matters", header + "MaxPods: 3\n", "MaxPods", "unknown field"},
		{"wrong type", header + "maxPods: many\n", "maxPods", "want an integer"},
		{"wrong nested type", header + "authentication:\n  anonymous:\n    enabled: sometimes\n", "authentication.anonymous.enabled", "want a boolean"},
		{"invalid duration", header + "syncFrequency: 5 parsecs\n", "syncFrequency", "invalid duration"},
		{"wrong list item", header + "registerWithTaints:\n- key: a\n  effect: NoSchedule\n  colour: red\n", "registerWithTaints[0].colour", "unknown field"},
		{"missing apiVersion", "kind: KubeletConfiguration\n", "apiVersion", "want kubelet.config.k8s.io/v1beta1, got none"},
		{"wrong apiVersion", "apiVersion: kubelet.config.k8s.io/v1\nkind: KubeletConfiguration\n", "apiVersion", "got \"kubelet.config.k8s.io/v1\""},
		{"wrong kind", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: Pod\n", "kind", "want KubeletConfiguration"},
		{"duplicate field", header + "maxPods: 3\nmaxPods: 4\n", "maxPods", "set twice (line 4)"},
		{"not an object", "- a\n- b\n", "", "got a list"},
		{"empty", "  \n", "", "empty"},
		{"bad yaml", header + "maxPods: [\n", "", "not valid YAML"},
		{"validation", header + "imageGCHighThresholdPercent: 150\n", "imageGCHighThresholdPercent", "between 0 and 100"},
		{"bad eviction signal", header + "evictionHard:\n  memory.avail: 1Gi\n", "evictionHard[memory.avail]", "supported values"},
		{"bad eviction value", header + "evictionHard:\n  memory.available: lots\n", "evictionHard[memory.available]", "quantity"},
		{"soft without grace", header + "evictionSoft:\n  memory.available: 1Gi\n", "evictionSoftGracePeriod[memory.available]", "grace period"},
		{"bad cluster DNS", header + "clusterDNS: [10.0.0.300]\n", "clusterDNS[0]", "IP address"},
		{"bad runtime endpoint", header + "containerRuntimeEndpoint: tcp://1.2.3.4:5\n", "containerRuntimeEndpoint", "unix://"},
		{"bad taint effect", header + "registerWithTaints:\n- key: a\n  effect: Sometimes\n", "registerWithTaints[0].effect", "supported values"},
		{"negative duration", header + "nodeStatusUpdateFrequency: -1s\n", "nodeStatusUpdateFrequency", "greater than zero"},
		{"bad cgroup driver", header + "cgroupDriver: upstart\n", "cgroupDriver", "supported values"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			file := write(t, t.TempDir(), "config.yaml", c.content)
			_, err := Load(file, "")
			e, ok := err.(*Error)
			if !ok {
				t.Fatalf("error %v (%T), want *Error", err, err)
			}
			if e.File != file || e.Field != c.field || !strings.Contains(e.Msg, c.msg) {
				t.Fatalf("got file %q field %q msg %q; want field %q msg containing %q", e.File, e.Field, e.Msg, c.field, c.msg)
			}
			if strings.Contains(e.Error(), "\n") || !strings.HasPrefix(e.Error(), file+": ") {
				t.Fatalf("Error() = %q: want one line starting with the file", e.Error())
			}
		})
	}
}

func TestUnreadableFiles(t *testing.T) {
	dir := t.TempDir()
	if _, err := Load(filepath.Join(dir, "missing.yaml"), ""); err == nil || !strings.Contains(err.Error(), "missing.yaml: cannot read: no such file") {
		t.Errorf("missing file: %v", err)
	}
	if _, err := Load(dir, ""); err == nil || !strings.Contains(err.Error(), "is a directory") {
		t.Errorf("directory as file: %v", err)
	}
	file := write(t, dir, "config.yaml", header)
	os.Chmod(file, 0)
	if os.Getuid() != 0 { // root reads anything
		if _, err := Load(file, ""); err == nil || !strings.Contains(err.Error(), "permission denied") {
			t.Errorf("unreadable file: %v", err)
		}
	}
}

func TestDropInsMergeInLexicalOrder(t *testing.T) {
	dir := t.TempDir()
	file := write(t, dir, "config.yaml", header+"maxPods: 10\nclusterDomain: a.local\nevictionHard:\n  memory.available: 1Gi\n")
	d := filepath.Join(dir, "config.d")
	write(t, d, "20-b.conf", header+"maxPods: 30\n")
	write(t, d, "10-a.conf", header+"maxPods: 20\nclusterDNS: [10.0.0.10]\n")
	write(t, d, "30-c.conf", header+"evictionHard:\n  nodefs.available: 5%\n")
	write(t, d, "99-ignored.yaml", "garbage: [")
	write(t, d, "sub/50-nested.conf", "garbage: [")
	os.Mkdir(filepath.Join(d, "40-dir.conf"), 0o755)

	res, err := Load(file, d)
	if err != nil {
		t.Fatal(err)
	}
	c := res.Config
	if c.MaxPods != 30 || c.ClusterDomain != "a.local" || len(c.ClusterDNS) != 1 {
		t.Errorf("maxPods %d clusterDomain %q clusterDNS %v", c.MaxPods, c.ClusterDomain, c.ClusterDNS)
	}
	// Merge patch merges maps key by key.
	if c.EvictionHard["memory.available"] != "1Gi" || c.EvictionHard["nodefs.available"] != "5%" || len(c.EvictionHard) != 2 {
		t.Errorf("evictionHard %v", c.EvictionHard)
	}
	var names []string
	for _, s := range res.Sources {
		names = append(names, s.Kind.String()+":"+filepath.Base(s.Name))
	}
	if got := strings.Join(names, " "); got != "defaults:. file:config.yaml drop-in:10-a.conf drop-in:20-b.conf drop-in:30-c.conf" {
		t.Errorf("sources %s", got)
	}
	if res.Sources[1].SHA256 == "" {
		t.Error("file source has no digest")
	}

	// A missing drop-in dir is an empty one; no file at all is the defaults.
	if res, err := Load(file, filepath.Join(dir, "nope")); err != nil || res.Config.MaxPods != 10 {
		t.Errorf("missing drop-in dir: %v", err)
	}
	if res, err := Load("", ""); err != nil || res.Config.MaxPods != 110 {
		t.Errorf("no inputs: %v", err)
	}
}

func TestDropInErrorsNameTheDropIn(t *testing.T) {
	dir := t.TempDir()
	file := write(t, dir, "config.yaml", header+"maxPods: 10\n")
	d := filepath.Join(dir, "config.d")
	for _, c := range []struct{ content, field string }{
		{header + "imageGCLowThresholdPercent: 90\nimageGCHighThresholdPercent: 85\n", "imageGCLowThresholdPercent"},
		{header + "maxPodz: 1\n", "maxPodz"},
		{"maxPods: 1\n", "apiVersion"},
	} {
		bad := write(t, d, "50-bad.conf", c.content)
		_, err := Load(file, d)
		e, ok := err.(*Error)
		if !ok || e.File != bad || e.Field != c.field {
			t.Errorf("%q: error %v, want it to name %s and %s", c.content, err, bad, c.field)
		}
	}
}

func TestOverridesWinAndAreBlamed(t *testing.T) {
	dir := t.TempDir()
	file := write(t, dir, "config.yaml", header+"maxPods: 10\n")
	write(t, filepath.Join(dir, "d"), "10.conf", header+"maxPods: 20\n")
	res, err := Load(file, filepath.Join(dir, "d"),
		Override{Kind: SourceEnvironment, Name: "UNITLET_MAX_PODS", Patch: map[string]any{"maxPods": 30}},
		Override{Kind: SourceFlags, Name: "--max-pods", Patch: map[string]any{"maxPods": 40}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Config.MaxPods != 40 || res.Sources[len(res.Sources)-1].Kind != SourceFlags {
		t.Errorf("maxPods %d", res.Config.MaxPods)
	}
	_, err = Load(file, "", Override{Kind: SourceFlags, Name: "--cluster-dns", Patch: map[string]any{"clusterDNS": []string{"nope"}}})
	if e, ok := err.(*Error); !ok || e.File != "--cluster-dns" || e.Field != "clusterDNS[0]" {
		t.Errorf("bad override: %v", err)
	}
}

func TestDefaultsAndRelativePaths(t *testing.T) {
	dir := t.TempDir()
	file := write(t, dir, "config.yaml", header+"staticPodPath: manifests\nauthentication:\n  x509:\n    clientCAFile: pki/ca.crt\nnodeStatusUpdateFrequency: 20s\n")
	res, err := Load(file, "")
	if err != nil {
		t.Fatal(err)
	}
	c := res.Config
	if c.StaticPodPath != filepath.Join(dir, "manifests") || c.Authentication.X509.ClientCAFile != filepath.Join(dir, "pki/ca.crt") {
		t.Errorf("relative paths: %q %q", c.StaticPodPath, c.Authentication.X509.ClientCAFile)
	}
	checks := map[string]bool{
		"syncFrequency 1m":              c.SyncFrequency.Duration == time.Minute,
		"port 10250":                    c.Port == 10250,
		"maxPods 110":                   c.MaxPods == 110,
		"healthzPort 10248":             *c.HealthzPort == 10248,
		"report follows update (20s)":   c.NodeStatusReportFrequency.Duration == 20*time.Second,
		"update 20s":                    c.NodeStatusUpdateFrequency.Duration == 20*time.Second,
		"runtime endpoint containerd":   c.ContainerRuntimeEndpoint == "unix:///run/containerd/containerd.sock",
		"default evictionHard":          len(c.EvictionHard) == 5 && c.EvictionHard["memory.available"] == "100Mi",
		"anonymous auth off":            !*c.Authentication.Anonymous.Enabled,
		"authorization Webhook":         c.Authorization.Mode == "Webhook",
		"serialize image pulls":         *c.SerializeImagePulls,
		"logging format text":           c.Logging.Format == "text",
		"apiVersion set":                c.APIVersion == APIVersion && c.Kind == Kind,
		"containerLogMaxSize 10Mi":      c.ContainerLogMaxSize == "10Mi",
		"enforceNodeAllocatable [pods]": len(c.EnforceNodeAllocatable) == 1,
	}
	for name, ok := range checks {
		if !ok {
			t.Errorf("default: %s", name)
		}
	}

	// Default thresholds only when none are set, or merged per signal when asked.
	file = write(t, dir, "evict.yaml", header+"evictionHard:\n  memory.available: 1Gi\n")
	if res, _ := Load(file, ""); len(res.Config.EvictionHard) != 1 {
		t.Errorf("set evictionHard got defaults added: %v", res.Config.EvictionHard)
	}
	file = write(t, dir, "merge.yaml", header+"mergeDefaultEvictionSettings: true\nevictionHard:\n  memory.available: 1Gi\n")
	if res, _ := Load(file, ""); len(res.Config.EvictionHard) != 5 || res.Config.EvictionHard["memory.available"] != "1Gi" {
		t.Errorf("mergeDefaultEvictionSettings: %v", res.Config.EvictionHard)
	}
}

func TestJSONInputAndDeterminism(t *testing.T) {
	dir := t.TempDir()
	file := write(t, dir, "config.json", `{"apiVersion":"kubelet.config.k8s.io/v1beta1","kind":"KubeletConfiguration","maxPods":7,"evictionHard":{"memory.available":"1Gi","nodefs.available":"5%","pid.available":"10%"}}`)
	first, err := Load(file, "")
	if err != nil {
		t.Fatal(err)
	}
	if first.Config.MaxPods != 7 {
		t.Fatalf("maxPods %d", first.Config.MaxPods)
	}
	for range 10 {
		again, err := Load(file, "")
		if err != nil || !bytes.Equal(again.JSON, first.JSON) {
			t.Fatalf("the same input gave different JSON")
		}
	}
	if !bytes.Contains(first.JSON, []byte(`"apiVersion":"kubelet.config.k8s.io/v1beta1"`)) {
		t.Errorf("JSON lacks apiVersion: %s", first.JSON)
	}
}
