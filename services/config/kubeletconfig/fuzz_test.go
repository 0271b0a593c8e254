package kubeletconfig

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var fuzzSeeds = []string{
	header,
	header + "maxPods: 3\n",
	header + "maxPodz: 3\n",
	header + "syncFrequency: 5 parsecs\n",
	header + "evictionHard:\n  memory.available: 100Mi\n  nodefs.available: 10%\n",
	header + "registerWithTaints:\n- key: a\n  value: b\n  effect: NoSchedule\n",
	header + "authentication:\n  x509:\n    clientCAFile: ca.crt\n",
	`{"apiVersion":"kubelet.config.k8s.io/v1beta1","kind":"KubeletConfiguration","clusterDNS":["10.0.0.10"]}`,
	"kind: KubeletConfiguration\n",
	"- a\n",
	"",
	header + "maxPods: 3\nmaxPods: 4\n",
	header + "featureGates:\n  Foo: true\nkubeReserved:\n  cpu: 100m\n",
}

// checkResult fails when Load broke its contract: an error must be one line naming the
// file; a result must be valid and re-load to the same thing.
func checkResult(t *testing.T, files []string, res *Result, err error) {
	if err != nil {
		var e *Error
		if !errors.As(err, &e) {
			t.Fatalf("error of type %T: %v", err, err)
		}
		if strings.Contains(err.Error(), "\n") {
			t.Fatalf("error with several lines: %q", err)
		}
		named := false
		for _, f := range files {
			named = named || e.File == f
		}
		if !named {
			t.Fatalf("error names %q, not one of %v", e.File, files)
		}
		return
	}
	if errs := Validate(res.Config); len(errs) > 0 {
		t.Fatalf("Load returned an invalid configuration: %v", errs)
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
		checkResult(t, []string{file}, res, err)
		if err == nil {
			// The effective JSON loads to itself.
			again := filepath.Join(t.TempDir(), "again.json")
			os.WriteFile(again, res.JSON, 0o644)
			res2, err := Load(again, "")
			if err != nil {
				t.Fatalf("the effective config does not load again: %v\n%s", err, res.JSON)
			}
			if string(res2.JSON) != string(res.JSON) {
				t.Fatalf("loading the effective config changed it:\n%s\n%s", res.JSON, res2.JSON)
			}
		}
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
		os.Mkdir(d, 0o755)
		conf := filepath.Join(d, "10-fuzz.conf")
		os.WriteFile(file, base, 0o644)
		os.WriteFile(conf, dropIn, 0o644)
		res, err := Load(file, d)
		checkResult(t, []string{file, conf}, res, err)
	})
}
