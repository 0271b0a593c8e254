package kubeletconfig

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
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

// asError fails unless err is an *Error on one line that starts with its file.
func asError(t *testing.T, err error) *Error {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T), want *Error", err, err)
	}
	if s := e.Error(); strings.ContainsAny(s, "\r\n") || !strings.HasPrefix(s, e.File+": ") {
		t.Fatalf("Error() = %q: want one line starting with %q", s, e.File+": ")
	}
	return e
}

func TestLoadRejectsBadFiles(t *testing.T) {
	cases := []struct {
		name, content, field, msg string
	}{
		// Decoding.
		{"unknown field", header + "maxPodz: 3\n", "maxPodz", "unknown field (did you mean maxPods?)"},
		{"unknown nested field", header + "authentication:\n  webhook:\n    cacheTLL: 1m\n", "authentication.webhook.cacheTLL", "unknown field (did you mean cacheTTL?)"},
		{"unknown field deep in a list", header + "registerWithTaints:\n- key: a\n  effect: NoSchedule\n  colour: red\n", "registerWithTaints[0].colour", "unknown field"},
		{"field names are case-sensitive", header + "MaxPods: 3\n", "MaxPods", "unknown field (did you mean maxPods?)"},
		{"wrong type", header + "maxPods: many\n", "maxPods", `want an integer (int32), got string "many"`},
		{"fraction for an integer", header + "maxPods: 1.5\n", "maxPods", "want an integer (int32), got number 1.5"},
		{"integer overflow", header + "maxPods: 99999999999\n", "maxPods", "want an integer (int32), got number 99999999999"},
		{"wrong nested type", header + "authentication:\n  anonymous:\n    enabled: sometimes\n", "authentication.anonymous.enabled", `want a boolean, got string "sometimes"`},
		{"scalar for an object", header + "authentication: 3\n", "authentication", "want an object, got number 3"},
		{"scalar for a list", header + "clusterDNS: 10.0.0.10\n", "clusterDNS", `want a list, got string "10.0.0.10"`},
		{"list for a map", header + "evictionHard: [a]\n", "evictionHard", "want a map, got a list"},
		{"wrong type in a map", header + "featureGates:\n  Foo: maybe\n", "featureGates[Foo]", "want a boolean"},
		{"wrong type in a list", header + "clusterDNS: [1]\n", "clusterDNS[0]", "want a string, got number 1"},
		{"YAML boolean for a string", header + "clusterDomain: yes\n", "clusterDomain", "want a string, got boolean true"},
		{"invalid duration", header + "syncFrequency: 5 parsecs\n", "syncFrequency", `invalid duration "5 parsecs"`},
		{"number for a duration", header + "syncFrequency: 5\n", "syncFrequency", "want a duration"},
		{"invalid nested duration", header + "authentication:\n  webhook:\n    cacheTTL: soon\n", "authentication.webhook.cacheTTL", `invalid duration "soon"`},
		{"invalid pointer duration", header + "cpuCFSQuotaPeriod: 1x\n", "cpuCFSQuotaPeriod", "invalid duration"},
		{"invalid quantity", header + "reservedMemory:\n- numaNode: 0\n  limits:\n    memory: lots\n", "reservedMemory[0].limits[memory]", `invalid quantity "lots"`},
		{"invalid time", header + "registerWithTaints:\n- key: a\n  effect: NoSchedule\n  timeAdded: yesterday\n", "registerWithTaints[0].timeAdded", `invalid time "yesterday"`},
		{"duplicate field", header + "maxPods: 3\nmaxPods: 4\n", "maxPods", "set twice (line 4)"},
		{"duplicate nested field", header + "authentication:\n  x509: {}\n  x509: {}\n", "authentication.x509", "set twice (line 5)"},
		{"duplicate map key", header + "evictionHard:\n  memory.available: 1Gi\n  memory.available: 2Gi\n", "evictionHard[memory.available]", "set twice"},
		{"duplicate JSON field", `{"apiVersion":"kubelet.config.k8s.io/v1beta1","kind":"KubeletConfiguration","authentication":{"x509":{"clientCAFile":"/a","clientCAFile":"/b"}}}`, "authentication.x509.clientCAFile", "set twice"},

		// The document and its type.
		{"missing apiVersion", "kind: KubeletConfiguration\n", "apiVersion", "want kubelet.config.k8s.io/v1beta1, got none"},
		{"wrong apiVersion", "apiVersion: kubelet.config.k8s.io/v1\nkind: KubeletConfiguration\n", "apiVersion", `got "kubelet.config.k8s.io/v1"`},
		{"apiVersion not a string", "apiVersion: 3\nkind: KubeletConfiguration\n", "apiVersion", "got number 3"},
		{"missing kind", "apiVersion: kubelet.config.k8s.io/v1beta1\n", "kind", "want KubeletConfiguration, got none"},
		{"wrong kind", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: Pod\n", "kind", `want KubeletConfiguration, got "Pod"`},
		{"not an object", "- a\n- b\n", "", "got a list"},
		{"a scalar", "3\n", "", "got number 3"},
		{"null", "null\n", "", "got null"},
		{"empty", "  \n", "", "empty"},
		{"bad YAML", header + "maxPods: [\n", "", "not valid YAML or JSON"},
		{"bad JSON", `{"apiVersion": "kubelet.config.k8s.io/v1beta1",`, "", "not valid YAML or JSON"},

		// Validation.
		{"image GC threshold", header + "imageGCHighThresholdPercent: 150\n", "imageGCHighThresholdPercent", "between 0 and 100"},
		{"bad eviction signal", header + "evictionHard:\n  memory.avail: 1Gi\n", "evictionHard[memory.avail]", "supported values"},
		{"bad eviction value", header + "evictionHard:\n  memory.available: lots\n", "evictionHard[memory.available]", "quantity"},
		{"soft without grace", header + "evictionSoft:\n  memory.available: 1Gi\n", "evictionSoftGracePeriod[memory.available]", "grace period"},
		{"bad cluster DNS", header + "clusterDNS: [10.0.0.300]\n", "clusterDNS[0]", "IP address"},
		{"bad runtime endpoint", header + "containerRuntimeEndpoint: tcp://1.2.3.4:5\n", "containerRuntimeEndpoint", "unix://"},
		{"bad taint effect", header + "registerWithTaints:\n- key: a\n  effect: Sometimes\n", "registerWithTaints[0].effect", "supported values"},
		{"negative duration", header + "nodeStatusUpdateFrequency: -1s\n", "nodeStatusUpdateFrequency", "greater than zero"},
		{"bad cgroup driver", header + "cgroupDriver: upstart\n", "cgroupDriver", "supported values"},
		{"several errors", header + "cgroupDriver: upstart\nhairpinMode: sometimes\nport: -1\n", "port", "(and 2 more errors)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			file := write(t, t.TempDir(), "config.yaml", c.content)
			_, err := Load(file, "")
			e := asError(t, err)
			if e.File != file || e.Field != c.field || !strings.Contains(e.Msg, c.msg) {
				t.Fatalf("got %q\nwant field %q and a message containing %q", e.Error(), c.field, c.msg)
			}
		})
	}
}

func TestLoadRejectsUnreadableFiles(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name, file, msg string
	}{
		{"missing", filepath.Join(dir, "missing.yaml"), "cannot read: no such file or directory"},
		{"a directory", dir, "cannot read: is a directory"},
	}
	if os.Getuid() != 0 { // root reads anything
		locked := write(t, dir, "locked.yaml", header)
		if err := os.Chmod(locked, 0); err != nil {
			t.Fatal(err)
		}
		cases = append(cases, struct{ name, file, msg string }{"permission denied", locked, "cannot read: permission denied"})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Load(c.file, "")
			if e := asError(t, err); e.File != c.file || e.Field != "" || e.Msg != c.msg {
				t.Fatalf("got %q, want %q", err, c.file+": "+c.msg)
			}
		})
	}

	// A drop-in directory that is a file, and a drop-in that is a dangling link.
	notDir := write(t, dir, "not-a-dir", "")
	if _, err := Load("", notDir); asError(t, err).File != notDir {
		t.Errorf("drop-in dir that is a file: %v", err)
	}
	d := filepath.Join(dir, "d")
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	dangling := filepath.Join(d, "10-gone.conf")
	if err := os.Symlink(filepath.Join(dir, "nowhere"), dangling); err != nil {
		t.Fatal(err)
	}
	if _, err := Load("", d); asError(t, err).File != dangling {
		t.Errorf("dangling drop-in: %v", err)
	}
}

func TestDropInsMergeInLexicalOrder(t *testing.T) {
	dir := t.TempDir()
	file := write(t, dir, "config.yaml", header+"maxPods: 10\nclusterDomain: a.local\nevictionHard:\n  memory.available: 1Gi\n")
	d := filepath.Join(dir, "config.d")
	// Written out of order: the names decide.
	write(t, d, "20-b.conf", header+"maxPods: 30\nclusterDNS: [10.0.0.20]\n")
	write(t, d, "10-a.conf", header+"maxPods: 20\nclusterDNS: [10.0.0.10, 10.0.0.11]\n")
	write(t, d, "30-c.conf", header+"evictionHard:\n  nodefs.available: 5%\n")
	write(t, d, "99-ignored.yaml", "garbage: [")
	write(t, d, "conf", "garbage: [")
	write(t, d, "50-x.conf.bak", "garbage: [")
	write(t, d, "sub/50-nested.conf", "garbage: [")
	if err := os.Mkdir(filepath.Join(d, "40-dir.conf"), 0o755); err != nil {
		t.Fatal(err)
	}
	linked := write(t, dir, "elsewhere.yaml", header+"clusterDomain: b.local\n")
	if err := os.Symlink(linked, filepath.Join(d, "25-link.conf")); err != nil {
		t.Fatal(err)
	}

	res, err := Load(file, d)
	if err != nil {
		t.Fatal(err)
	}
	c := res.Config
	if c.MaxPods != 30 {
		t.Errorf("maxPods %d, want 30 from the last drop-in that sets it", c.MaxPods)
	}
	if !slices.Equal(c.ClusterDNS, []string{"10.0.0.20"}) {
		t.Errorf("clusterDNS %v: a list replaces the list", c.ClusterDNS)
	}
	if c.ClusterDomain != "b.local" {
		t.Errorf("clusterDomain %q from the linked drop-in", c.ClusterDomain)
	}
	// A map merges key by key.
	if want := map[string]string{"memory.available": "1Gi", "nodefs.available": "5%"}; !maps.Equal(c.EvictionHard, want) {
		t.Errorf("evictionHard %v, want %v", c.EvictionHard, want)
	}
	var names []string
	for _, s := range res.Sources {
		names = append(names, s.Kind.String()+":"+filepath.Base(s.Name))
		if s.Kind == SourceFile || s.Kind == SourceDropIn {
			if len(s.SHA256) != 64 {
				t.Errorf("%s has digest %q", s.Name, s.SHA256)
			}
		} else if s.SHA256 != "" {
			t.Errorf("%v has digest %q", s.Kind, s.SHA256)
		}
	}
	want := "defaults:. file:config.yaml drop-in:10-a.conf drop-in:20-b.conf drop-in:25-link.conf drop-in:30-c.conf"
	if got := strings.Join(names, " "); got != want {
		t.Errorf("sources %s\nwant    %s", got, want)
	}
}

func TestDropInDirMayBeMissingOrEmpty(t *testing.T) {
	dir := t.TempDir()
	file := write(t, dir, "config.yaml", header+"maxPods: 10\n")
	for _, d := range []string{"", filepath.Join(dir, "missing"), t.TempDir()} {
		res, err := Load(file, d)
		if err != nil || res.Config.MaxPods != 10 || len(res.Sources) != 2 {
			t.Errorf("drop-in dir %q: %v", d, err)
		}
	}
	// Drop-ins without a file start from the defaults.
	d := t.TempDir()
	write(t, d, "10.conf", header+"maxPods: 7\n")
	res, err := Load("", d)
	if err != nil || res.Config.MaxPods != 7 || res.Config.Port != 10250 {
		t.Fatalf("drop-ins without a file: %v", err)
	}
}

func TestDropInErrorsNameTheDropIn(t *testing.T) {
	dir := t.TempDir()
	file := write(t, dir, "config.yaml", header+"maxPods: 10\nimageGCHighThresholdPercent: 90\n")
	cases := []struct {
		name, content, field, msg string
	}{
		{"breaks validation", header + "imageGCLowThresholdPercent: 95\n", "imageGCLowThresholdPercent", "must be less than imageGCHighThresholdPercent (90)"},
		{"breaks validation with the file's value", header + "imageGCHighThresholdPercent: 50\n", "imageGCLowThresholdPercent", "must be less than imageGCHighThresholdPercent (50)"},
		{"out of range", header + "imageGCHighThresholdPercent: 150\n", "imageGCHighThresholdPercent", "between 0 and 100"},
		{"unknown field", header + "maxPodz: 1\n", "maxPodz", "unknown field"},
		{"wrong type", header + "maxPods: lots\n", "maxPods", "want an integer"},
		{"no apiVersion", "kind: KubeletConfiguration\nmaxPods: 1\n", "apiVersion", "got none"},
		{"no kind", "apiVersion: kubelet.config.k8s.io/v1beta1\nmaxPods: 1\n", "kind", "got none"},
		{"empty", "", "", "empty"},
		{"relative path", header + "staticPodPath: manifests\n", "staticPodPath", "absolute"},
		{"soft threshold without grace period", header + "evictionSoft:\n  memory.available: 1Gi\n", "evictionSoftGracePeriod[memory.available]", "grace period"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := t.TempDir()
			write(t, d, "10-good.conf", header+"maxPods: 20\n")
			bad := write(t, d, "50-bad.conf", c.content)
			write(t, d, "90-good.conf", header+"maxPods: 30\n")
			_, err := Load(file, d)
			e := asError(t, err)
			if e.File != bad || e.Field != c.field || !strings.Contains(e.Msg, c.msg) {
				t.Fatalf("got %q\nwant %s, field %q, a message containing %q", err, bad, c.field, c.msg)
			}
		})
	}
}

func TestValidationBlamesTheInputThatSetTheField(t *testing.T) {
	dir := t.TempDir()
	file := write(t, dir, "config.yaml", header+"evictionHard:\n  memory.available: lots\n")
	d := filepath.Join(dir, "d")
	write(t, d, "10.conf", header+"evictionHard:\n  nodefs.available: 5%\n")
	_, err := Load(file, d)
	if e := asError(t, err); e.File != file || e.Field != "evictionHard[memory.available]" {
		t.Errorf("a bad key the file set, in a map a drop-in changed: %v", err)
	}

	// An error on a field nothing set is blamed on the input that set the field it is
	// compared with.
	file = write(t, dir, "ok.yaml", header)
	dropIn := write(t, d, "10.conf", header+"imageGCHighThresholdPercent: 70\n")
	_, err = Load(file, d)
	if e := asError(t, err); e.File != dropIn || e.Field != "imageGCLowThresholdPercent" {
		t.Errorf("default low threshold over the drop-in's high one: %v", err)
	}
	dropIn = write(t, d, "10.conf", header+"evictionSoft:\n  memory.available: 1Gi\n")
	_, err = Load(file, d)
	if e := asError(t, err); e.File != dropIn {
		t.Errorf("soft threshold without grace period: %v", err)
	}
	dropIn = write(t, d, "10.conf", header+"cgroupsPerQOS: false\n")
	_, err = Load(file, d)
	if e := asError(t, err); e.File != dropIn || e.Field != "enforceNodeAllocatable[0]" {
		t.Errorf("default enforcement without cgroupsPerQOS: %v", err)
	}
}

func TestOverrides(t *testing.T) {
	dir := t.TempDir()
	file := write(t, dir, "config.yaml", header+"maxPods: 10\nclusterDomain: file.local\nfeatureGates:\n  HostnameOverride: true\n")
	d := filepath.Join(dir, "d")
	write(t, d, "10.conf", header+"maxPods: 20\nclusterDomain: dropin.local\n")
	env := Override{Kind: SourceEnvironment, Name: "UNITLET_MAX_PODS,UNITLET_CLUSTER_DNS", Patch: map[string]any{"maxPods": 30, "clusterDNS": []string{"10.0.0.10"}}}
	flags := Override{Kind: SourceFlags, Name: "--max-pods", Patch: map[string]any{"maxPods": int32(40), "featureGates": map[string]bool{"CustomCPUCFSQuotaPeriod": false}}}

	res, err := Load(file, d, env, flags)
	if err != nil {
		t.Fatal(err)
	}
	c := res.Config
	if c.MaxPods != 40 || c.ClusterDomain != "dropin.local" || !slices.Equal(c.ClusterDNS, []string{"10.0.0.10"}) {
		t.Errorf("maxPods %d clusterDomain %q clusterDNS %v", c.MaxPods, c.ClusterDomain, c.ClusterDNS)
	}
	if want := map[string]bool{"HostnameOverride": true, "CustomCPUCFSQuotaPeriod": false}; !maps.Equal(c.FeatureGates, want) {
		t.Errorf("featureGates %v, want %v merged", c.FeatureGates, want)
	}
	if got := res.Sources[len(res.Sources)-2:]; got[0] != (Source{Kind: SourceEnvironment, Name: env.Name}) || got[1] != (Source{Kind: SourceFlags, Name: "--max-pods"}) {
		t.Errorf("sources end with %v", got)
	}
	// Overrides apply in the order given.
	if res, err := Load(file, d, flags, env); err != nil || res.Config.MaxPods != 30 {
		t.Errorf("reversed overrides: %v", err)
	}
	// null removes a field: its default applies.
	if res, err := Load(file, d, Override{Kind: SourceFlags, Name: "--max-pods", Patch: map[string]any{"maxPods": nil}}); err != nil || res.Config.MaxPods != 110 {
		t.Errorf("null override: %v", err)
	}
	// An empty override changes nothing but is a source.
	if res, err := Load(file, "", Override{Kind: SourceFlags, Name: "none"}); err != nil || res.Config.MaxPods != 10 || len(res.Sources) != 3 {
		t.Errorf("empty override: %v", err)
	}

	bad := []struct {
		name  string
		patch map[string]any
		field string
	}{
		{"invalid value", map[string]any{"clusterDNS": []string{"nope"}}, "clusterDNS[0]"},
		{"unknown field", map[string]any{"maxPodz": 1}, "maxPodz"},
		{"wrong type", map[string]any{"maxPods": "many"}, "maxPods"},
		{"wrong nested type", map[string]any{"authentication": map[string]any{"webhook": map[string]any{"cacheTTL": "soon"}}}, "authentication.webhook.cacheTTL"},
		{"changes kind", map[string]any{"kind": "Pod"}, "kind"},
		{"not JSON", map[string]any{"maxPods": func() {}}, ""},
	}
	for _, b := range bad {
		t.Run(b.name, func(t *testing.T) {
			_, err := Load(file, d, env, Override{Kind: SourceFlags, Name: "--bad", Patch: b.patch})
			if e := asError(t, err); e.File != "--bad" || e.Field != b.field {
				t.Fatalf("got %q, want it to name --bad and field %q", err, b.field)
			}
		})
	}
}

func TestDefaultEvictionHard(t *testing.T) {
	defaults := defaultEvictionHard()
	with := func(kv ...string) map[string]string {
		m := maps.Clone(defaults)
		for i := 0; i < len(kv); i += 2 {
			if kv[i+1] == "" {
				delete(m, kv[i])
			} else {
				m[kv[i]] = kv[i+1]
			}
		}
		return m
	}
	cases := []struct {
		name, file string // file "" means no file
		dropIns    []string
		want       map[string]string
	}{
		{"no input", "", nil, defaults},
		{"file sets none", header + "maxPods: 3\n", nil, defaults},
		{"file sets null", header + "evictionHard: null\n", nil, defaults},
		{"file sets some: only those", header + "evictionHard:\n  memory.available: 1Gi\n", nil, map[string]string{"memory.available": "1Gi"}},
		{"file sets an empty map: none", header + "evictionHard: {}\n", nil, nil},
		{"file sets some and asks to merge", header + "mergeDefaultEvictionSettings: true\nevictionHard:\n  memory.available: 1Gi\n", nil, with("memory.available", "1Gi")},
		{"drop-in changes one of the defaults", header, []string{"evictionHard:\n  memory.available: 1Gi\n"}, with("memory.available", "1Gi")},
		{"drop-in removes one of the defaults", header, []string{"evictionHard:\n  nodefs.inodesFree: null\n"}, with("nodefs.inodesFree", "")},
		{"drop-in removes all", header, []string{"evictionHard: null\n"}, nil},
		{"drop-in over the file's", header + "evictionHard:\n  memory.available: 1Gi\n", []string{"evictionHard:\n  pid.available: 10%\n"}, map[string]string{"memory.available": "1Gi", "pid.available": "10%"}},
		{"drop-in asks to merge", header + "evictionHard:\n  memory.available: 1Gi\n", []string{"mergeDefaultEvictionSettings: true\n"}, with("memory.available", "1Gi")},
		{"drop-ins without a file", "", []string{"evictionHard:\n  memory.available: 1Gi\n"}, with("memory.available", "1Gi")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			file := ""
			if c.file != "" {
				file = write(t, dir, "config.yaml", c.file)
			}
			d := filepath.Join(dir, "d")
			for i, s := range c.dropIns {
				write(t, d, string(rune('a'+i))+".conf", header+s)
			}
			res, err := Load(file, d)
			if err != nil {
				t.Fatal(err)
			}
			if got := res.Config.EvictionHard; !maps.Equal(got, c.want) {
				t.Fatalf("evictionHard %v, want %v", got, c.want)
			}
		})
	}
}

func TestRelativePathsAreRelativeToTheFile(t *testing.T) {
	dir := t.TempDir()
	file := write(t, dir, "etc/config.yaml", header+`staticPodPath: manifests
tlsCertFile: pki/kubelet.crt
tlsPrivateKeyFile: ../pki/kubelet.key
authentication:
  x509:
    clientCAFile: ./ca.crt
resolvConf: resolv.conf
volumePluginDir: /abs/plugins
podLogsDir: logs
`)
	res, err := Load(file, "")
	if err != nil {
		t.Fatal(err)
	}
	c := res.Config
	etc := filepath.Join(dir, "etc")
	for got, want := range map[string]string{
		c.StaticPodPath:                    filepath.Join(etc, "manifests"),
		c.TLSCertFile:                      filepath.Join(etc, "pki/kubelet.crt"),
		c.TLSPrivateKeyFile:                filepath.Join(dir, "pki/kubelet.key"),
		c.Authentication.X509.ClientCAFile: filepath.Join(etc, "ca.crt"),
		*c.ResolverConfig:                  filepath.Join(etc, "resolv.conf"),
		c.VolumePluginDir:                  "/abs/plugins",
		c.PodLogsDir:                       filepath.Join(etc, "logs"),
	} {
		if got != want {
			t.Errorf("path %q, want %q", got, want)
		}
	}

	// An empty resolvConf (no DNS from the host) stays empty.
	file = write(t, dir, "empty.yaml", header+"resolvConf: \"\"\n")
	if res, err := Load(file, ""); err != nil || *res.Config.ResolverConfig != "" {
		t.Errorf("empty resolvConf: %v", err)
	}
	// A relative path from a flag has no directory to be relative to.
	_, err = Load("", "", Override{Kind: SourceFlags, Name: "--pod-manifest-path", Patch: map[string]any{"staticPodPath": "manifests"}})
	if e := asError(t, err); e.File != "--pod-manifest-path" || e.Field != "staticPodPath" {
		t.Errorf("relative path from a flag: %v", err)
	}
}

func TestJSONInputIsAccepted(t *testing.T) {
	dir := t.TempDir()
	yamlFile := write(t, dir, "config.yaml", header+"maxPods: 7\nevictionHard:\n  memory.available: 1Gi\n  pid.available: 10%\nsyncFrequency: 30s\n")
	jsonFile := write(t, dir, "config.json", `{"apiVersion":"kubelet.config.k8s.io/v1beta1","kind":"KubeletConfiguration",
		"maxPods":7,"evictionHard":{"memory.available":"1Gi","pid.available":"10%"},"syncFrequency":"30s"}`)
	fromYAML, err := Load(yamlFile, "")
	if err != nil {
		t.Fatal(err)
	}
	fromJSON, err := Load(jsonFile, "")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(fromYAML.JSON, fromJSON.JSON) {
		t.Errorf("YAML and JSON of the same configuration differ:\n%s\n%s", fromYAML.JSON, fromJSON.JSON)
	}
	if fromJSON.Config.SyncFrequency.Duration != 30*time.Second {
		t.Errorf("syncFrequency %v", fromJSON.Config.SyncFrequency)
	}
	// A JSON drop-in.
	d := filepath.Join(dir, "d")
	write(t, d, "10.conf", `{"apiVersion":"kubelet.config.k8s.io/v1beta1","kind":"KubeletConfiguration","maxPods":8}`)
	if res, err := Load(jsonFile, d); err != nil || res.Config.MaxPods != 8 {
		t.Errorf("JSON drop-in: %v", err)
	}
}

func TestResultIsDeterministic(t *testing.T) {
	content := header + `maxPods: 7
featureGates: {HostnameOverride: true, GracefulNodeShutdown: false, CustomCPUCFSQuotaPeriod: true}
evictionHard: {pid.available: 10%, memory.available: 1Gi, nodefs.available: 5%}
kubeReserved: {memory: 1Gi, cpu: 500m}
registerWithTaints: [{key: b, effect: NoSchedule}, {key: a, effect: NoExecute}]
`
	var first []byte
	for i := range 20 {
		dir := t.TempDir()
		file := write(t, dir, "config.yaml", content)
		d := filepath.Join(dir, "d")
		write(t, d, "10.conf", header+"clusterDNS: [10.0.0.10]\n")
		res, err := Load(file, d, Override{Kind: SourceFlags, Name: "--x", Patch: map[string]any{"systemReserved": map[string]string{"memory": "1Gi", "cpu": "1"}}})
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = res.JSON
			continue
		}
		if !bytes.Equal(res.JSON, first) {
			t.Fatalf("load %d gave different JSON:\n%s\n%s", i, first, res.JSON)
		}
	}
	if !bytes.HasPrefix(first, []byte(`{"kind":"KubeletConfiguration","apiVersion":"kubelet.config.k8s.io/v1beta1",`)) {
		t.Errorf("JSON does not start with kind and apiVersion: %.100s", first)
	}
}

func TestResultJSONIsTheConfig(t *testing.T) {
	dir := t.TempDir()
	file := write(t, dir, "config.yaml", header+"maxPods: 7\nclusterDNS: [10.0.0.10]\n")
	res, err := Load(file, "")
	if err != nil {
		t.Fatal(err)
	}
	want, err := json.Marshal(res.Config)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(res.JSON, want) {
		t.Errorf("JSON is not the encoded Config")
	}
	if res.Config.APIVersion != APIVersion || res.Config.Kind != Kind {
		t.Errorf("TypeMeta %v", res.Config.TypeMeta)
	}
	if errs := Validate(res.Config); len(errs) > 0 {
		t.Errorf("the result does not validate: %v", errs)
	}
}

func TestErrorIsOneLine(t *testing.T) {
	cases := []struct {
		err  Error
		want string
	}{
		{Error{File: "/etc/k.yaml", Field: "maxPods", Msg: "bad"}, "/etc/k.yaml: field maxPods: bad"},
		{Error{File: "/etc/k.yaml", Msg: "bad"}, "/etc/k.yaml: bad"},
		{Error{File: "--x", Field: "a\nb", Msg: "line one\nline two\r\nthree"}, "--x: field a b: line one line two three"},
	}
	for _, c := range cases {
		if got := c.err.Error(); got != c.want {
			t.Errorf("Error() = %q, want %q", got, c.want)
		}
	}
}

func TestSourceKindString(t *testing.T) {
	for k, want := range map[SourceKind]string{
		SourceDefaults: "defaults", SourceFile: "file", SourceDropIn: "drop-in",
		SourceEnvironment: "environment", SourceFlags: "flags", SourceKind(9): "SourceKind(9)",
	} {
		if got := k.String(); got != want {
			t.Errorf("%d: %q, want %q", int(k), got, want)
		}
	}
}

func TestSplitPath(t *testing.T) {
	for in, want := range map[string][]string{
		"maxPods":                          {"maxPods"},
		"authentication.webhook.cacheTTL":  {"authentication", "webhook", "cacheTTL"},
		"evictionHard[memory.available]":   {"evictionHard", "memory.available"},
		"registerWithTaints[0].effect":     {"registerWithTaints", "0", "effect"},
		"reservedMemory[1].limits[memory]": {"reservedMemory", "1", "limits", "memory"},
		"a[unclosed":                       {"a", "unclosed"},
		"":                                 nil,
	} {
		if got := splitPath(in); !slices.Equal(got, want) {
			t.Errorf("splitPath(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestLoadRotatesCertificatesUnlessToldNot(t *testing.T) {
	dir := t.TempDir()
	for _, file := range []string{"", write(t, dir, "plain.yaml", header)} {
		res, err := Load(file, "")
		if err != nil {
			t.Fatal(err)
		}
		if !res.Config.RotateCertificates {
			t.Errorf("Load(%q): rotateCertificates false, want true when nothing sets it", file)
		}
	}
	// false, from the file or from a drop-in, is refused and blamed on its input.
	file := write(t, dir, "off.yaml", header+"rotateCertificates: false\n")
	_, err := Load(file, "")
	if e := asError(t, err); e.File != file || e.Field != "rotateCertificates" || !strings.Contains(e.Msg, "unitlet-certs always renews") {
		t.Errorf("rotateCertificates: false in the file: %v", err)
	}
	d := filepath.Join(dir, "d")
	dropIn := write(t, d, "10.conf", header+"rotateCertificates: false\n")
	_, err = Load(write(t, dir, "on.yaml", header+"rotateCertificates: true\n"), d)
	if e := asError(t, err); e.File != dropIn || e.Field != "rotateCertificates" {
		t.Errorf("rotateCertificates: false in a drop-in: %v", err)
	}
}

func TestLoadRefusesAReadOnlyPort(t *testing.T) {
	file := write(t, t.TempDir(), "config.yaml", header+"readOnlyPort: 10255\n")
	_, err := Load(file, "")
	if e := asError(t, err); e.File != file || e.Field != "readOnlyPort" || !strings.Contains(e.Msg, "no unauthenticated read-only port") {
		t.Errorf("readOnlyPort: 10255: %v", err)
	}
}

// A kubelet's configuration as kubeadm writes it loads as it is, so unitlet-config can
// read a replaced kubelet's /var/lib/kubelet/config.yaml (docs/install.md), and its
// values are the ones in effect.
func TestLoadsTheKubeletConfigKubeadmWrites(t *testing.T) {
	res, err := Load(filepath.Join("testdata", "kubeadm-config.yaml"), "")
	if err != nil {
		t.Fatalf("kubeadm's kubelet configuration: %v", err)
	}
	c := res.Config
	if c.CgroupDriver != "systemd" || c.StaticPodPath != "/etc/kubernetes/manifests" || c.Authentication.X509.ClientCAFile != "/etc/kubernetes/pki/ca.crt" ||
		c.Authorization.Mode != "Webhook" || c.ResolverConfig == nil || *c.ResolverConfig != "/run/systemd/resolve/resolv.conf" ||
		c.HealthzPort == nil || *c.HealthzPort != 10248 || !slices.Equal(c.ClusterDNS, []string{"10.96.0.10"}) {
		t.Errorf("kubeadm's values are not the ones in effect: %s", res.JSON)
	}
	// Its zero durations are the kubelet's defaults, as the kubelet reads them.
	if c.SyncFrequency.Duration != time.Minute || c.NodeStatusUpdateFrequency.Duration != 10*time.Second {
		t.Errorf("syncFrequency %v, nodeStatusUpdateFrequency %v: want the defaults 1m and 10s for kubeadm's 0s", c.SyncFrequency.Duration, c.NodeStatusUpdateFrequency.Duration)
	}
}

// The packaged /etc/unitlet/config.yaml (deploy/config.yaml) loads, and runs the pods'
// cgroups with the systemd driver, the only one the packaged units allow.
func TestThePackagedConfigLoads(t *testing.T) {
	res, err := Load(filepath.Join("..", "..", "..", "deploy", "config.yaml"), "")
	if err != nil {
		t.Fatalf("deploy/config.yaml: %v", err)
	}
	if res.Config.CgroupDriver != "systemd" {
		t.Errorf("deploy/config.yaml: cgroupDriver %q, want systemd (the packaged units set ProtectControlGroups=yes)", res.Config.CgroupDriver)
	}
}
