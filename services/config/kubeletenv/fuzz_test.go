package kubeletenv

import (
	"slices"
	"testing"
)

// FuzzParse: any file content either fails or gives flags that unitlet-config has, each
// from the table. testdata/fuzz/FuzzParse holds the seed corpus.
func FuzzParse(f *testing.F) {
	f.Add(`KUBELET_KUBEADM_ARGS="--hostname-override=n --node-ip=10.0.0.1"` + "\n")
	f.Add("KUBELET_EXTRA_ARGS=--max-pods 3\n")
	targets := make([]string, 0, len(Supported))
	for _, v := range Supported {
		targets = append(targets, v)
	}
	f.Fuzz(func(t *testing.T, data string) {
		flags, err := Parse(data)
		if err != nil {
			return
		}
		for _, fl := range flags {
			if !slices.Contains(targets, fl.Name) {
				t.Fatalf("Parse(%q) gave --%s, not in the table", data, fl.Name)
			}
		}
	})
}
