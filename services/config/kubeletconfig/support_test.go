package kubeletconfig

import (
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	v1beta1 "k8s.io/kubelet/config/v1beta1"
)

// jsonNames are the KubeletConfiguration's fields by JSON name, in the type's order.
func jsonNames() []string {
	var out []string
	t := reflect.TypeOf(v1beta1.KubeletConfiguration{})
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" {
			out = append(out, name)
		}
	}
	return out
}

func contains(xs []string, x string) bool { return slices.Contains(xs, x) }

// Every field is in exactly one class, and the README's field table has a row for each
// that says the same: a new field of a new Kubernetes cannot go unclassified.
func TestFieldSupportIsComplete(t *testing.T) {
	readme, err := os.ReadFile("../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range jsonNames() {
		classes := 0
		for _, in := range []bool{appliedBy[name] != "", contains(refusedUnlessDefault, name), contains(notApplied, name)} {
			if in {
				classes++
			}
		}
		if classes != 1 {
			t.Errorf("%s is in %d of appliedBy, refusedUnlessDefault and notApplied, want exactly one", name, classes)
			continue
		}
		row := ""
		for _, line := range strings.Split(string(readme), "\n") {
			if strings.HasPrefix(line, "| `"+name+"` |") {
				row = line
			}
		}
		switch {
		case row == "":
			t.Errorf("README.md: no row for %s in the field table", name)
		case appliedBy[name] != "" && !strings.Contains(row, "applied by "+appliedBy[name]):
			t.Errorf("README.md: %q, want it applied by %s", row, appliedBy[name])
		case contains(refusedUnlessDefault, name) && !strings.Contains(row, "refused"):
			t.Errorf("README.md: %q, want it refused", row)
		case contains(notApplied, name) && !strings.Contains(row, "not applied"):
			t.Errorf("README.md: %q, want it not applied", row)
		}
	}
	for _, list := range [][]string{refusedUnlessDefault, notApplied} {
		for _, name := range list {
			if !contains(jsonNames(), name) {
				t.Errorf("%s is not a KubeletConfiguration field", name)
			}
		}
	}
	for name := range appliedBy {
		if !contains(jsonNames(), name) {
			t.Errorf("%s is not a KubeletConfiguration field", name)
		}
	}
}

func TestNotAppliedFieldsAreReported(t *testing.T) {
	c := loaded()
	if w := NotApplied(&c); len(w) != 0 {
		t.Fatalf("the defaults: %q, want no warning", w)
	}
	c.MaxOpenFiles = 9 // not applied
	c.MaxPods = 7      // applied
	w := NotApplied(&c)
	if len(w) != 1 || !strings.HasPrefix(w[0], "maxOpenFiles is set to 9, but unitlet does not apply it yet") {
		t.Errorf("warnings %q, want one naming maxOpenFiles", w)
	}
}
