package kubeletconfig

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1beta1 "k8s.io/kubelet/config/v1beta1"
)

// fuzzSeeds are configurations good and bad; testdata/fuzz holds more, among them the
// inputs the fuzzers found interesting.
var fuzzSeeds = []string{
	header,
	header + "maxPods: 3\n",
	header + "maxPodz: 3\n",
	header + "syncFrequency: 5 parsecs\n",
	header + "evictionHard:\n  memory.available: 100Mi\n  nodefs.available: 10%\n",
	header + "evictionHard: {}\nmergeDefaultEvictionSettings: true\n",
	header + "evictionSoft:\n  memory.available: 1Gi\nevictionSoftGracePeriod:\n  memory.available: 1m\n",
	header + "registerWithTaints:\n- key: a\n  value: b\n  effect: NoSchedule\n",
	header + "authentication:\n  x509:\n    clientCAFile: ca.crt\n",
	header + "staticPodPath: manifests\nresolvConf: \"\"\n",
	`{"apiVersion":"kubelet.config.k8s.io/v1beta1","kind":"KubeletConfiguration","clusterDNS":["10.0.0.10"]}`,
	"kind: KubeletConfiguration\n",
	"- a\n",
	"",
	header + "maxPods: 3\nmaxPods: 4\n",
	header + "authentication:\n  x509: {}\n  x509: {}\n",
	header + "featureGates:\n  Foo: true\nkubeReserved:\n  cpu: 100m\n",
	header + "reservedMemory:\n- numaNode: 0\n  limits:\n    memory: 1Gi\n",
	header + "logging:\n  format: json\n  verbosity: 4\n",
	header + "maxPods: null\nclusterDNS: null\n",
	header + "a: &x [1, 2]\nb: *x\n",
}

// checkLoad fails when Load broke its contract: an error is an *Error on one line naming
// one of files; a result is valid, and its JSON is its Config and decodes to it again.
func checkLoad(t *testing.T, files []string, res *Result, err error) {
	t.Helper()
	if err != nil {
		var e *Error
		if !errors.As(err, &e) {
			t.Fatalf("error of type %T: %v", err, err)
		}
		if strings.ContainsAny(err.Error(), "\r\n") {
			t.Fatalf("error on several lines: %q", err)
		}
		if !slices.Contains(files, e.File) {
			t.Fatalf("error names %q, not one of %v: %v", e.File, files, err)
		}
		return
	}
	if errs := Validate(res.Config); len(errs) > 0 {
		t.Fatalf("Load returned an invalid configuration: %v", errs)
	}
	want, err := json.Marshal(res.Config)
	if err != nil || !bytes.Equal(want, res.JSON) {
		t.Fatalf("JSON is not the encoded Config (%v):\n%s\n%s", err, res.JSON, want)
	}
	var again v1beta1.KubeletConfiguration
	if field, msg := decodeStrict(res.JSON, &again); msg != "" {
		t.Fatalf("the result's JSON does not decode: field %s: %s\n%s", field, msg, res.JSON)
	}
	if errs := Validate(&again); len(errs) > 0 {
		t.Fatalf("the result's JSON does not validate: %v\n%s", errs, res.JSON)
	}
	if b, _ := json.Marshal(&again); !bytes.Equal(b, res.JSON) {
		t.Fatalf("the result's JSON changes when decoded and encoded:\n%s\n%s", res.JSON, b)
	}
}

func FuzzLoadFile(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		file := filepath.Join(t.TempDir(), "config.yaml")
		if err := os.WriteFile(file, data, 0o644); err != nil {
			t.Fatal(err)
		}
		res, err := Load(file, "")
		checkLoad(t, []string{file}, res, err)
	})
}

func FuzzDropInMerge(f *testing.F) {
	for i, s := range fuzzSeeds {
		f.Add([]byte(fuzzSeeds[(i+1)%len(fuzzSeeds)]), []byte(s))
	}
	f.Fuzz(func(t *testing.T, base, dropIn []byte) {
		dir := t.TempDir()
		file := filepath.Join(dir, "config.yaml")
		d := filepath.Join(dir, "config.d")
		conf := filepath.Join(d, "10-fuzz.conf")
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, base, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(conf, dropIn, 0o644); err != nil {
			t.Fatal(err)
		}
		res, err := Load(file, d)
		checkLoad(t, []string{file, conf}, res, err)

		// A drop-in that sets nothing changes nothing.
		empty := filepath.Join(dir, "empty.d")
		if err := os.Mkdir(empty, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(empty, "10-empty.conf"), []byte(header), 0o644); err != nil {
			t.Fatal(err)
		}
		alone, errAlone := Load(file, "")
		withEmpty, errEmpty := Load(file, empty)
		if (errAlone == nil) != (errEmpty == nil) || errAlone != nil && errAlone.Error() != errEmpty.Error() {
			t.Fatalf("an empty drop-in changed the outcome: %v, then %v", errAlone, errEmpty)
		}
		if errAlone == nil && !bytes.Equal(alone.JSON, withEmpty.JSON) {
			t.Fatalf("an empty drop-in changed the configuration:\n%s\n%s", alone.JSON, withEmpty.JSON)
		}
	})
}
