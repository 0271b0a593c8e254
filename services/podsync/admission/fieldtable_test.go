package admission

import (
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// schedulerOnly are the PodSpec fields only the scheduler or the API server act on, which
// the README's prose names instead of the table.
var schedulerOnly = []string{"affinity", "topologySpreadConstraints", "schedulingGates", "priority", "preemptionPolicy", "schedulerName", "schedulingGroup"}

// TestPodFieldTableIsComplete: the README's pod field table ("Pod spec support") has a
// row naming every field of the v1.36 PodSpec, Container, PodSecurityContext and
// SecurityContext, each saying what unitlet does with it.
func TestPodFieldTableIsComplete(t *testing.T) {
	readme, err := os.ReadFile("../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	section := string(readme)
	start := strings.Index(section, "### Pod spec support")
	if start < 0 {
		t.Fatal("README.md: no Pod spec support section")
	}
	section = section[start:]
	if end := strings.Index(section[4:], "\n##"); end >= 0 {
		section = section[:end+4]
	}
	named := map[string]bool{}
	code := regexp.MustCompile("`([^`]+)`")
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(line, "|")
		if !strings.HasPrefix(line, "| ") || len(cells) < 4 || strings.HasPrefix(line, "| field") || strings.HasPrefix(line, "| ---") {
			continue
		}
		if strings.TrimSpace(cells[2]) == "" {
			t.Errorf("README.md: row %q says nothing of what unitlet does", line)
		}
		for _, m := range code.FindAllStringSubmatch(cells[1], -1) {
			// "securityContext.runAsUser: 0" and the like name the field before the colon.
			named[strings.TrimSpace(strings.SplitN(m[1], ":", 2)[0])] = true
		}
	}
	has := func(paths ...string) bool {
		for n := range named {
			for _, p := range paths {
				if n == p || strings.HasPrefix(n, p+".") || strings.HasPrefix(n, p+"[") {
					return true
				}
			}
		}
		return false
	}
	for _, f := range jsonFields(reflect.TypeFor[corev1.PodSpec]()) {
		if !slices.Contains(schedulerOnly, f) && !has(f) {
			t.Errorf("README.md: the pod field table has no row for PodSpec's %s", f)
		}
	}
	for _, f := range jsonFields(reflect.TypeFor[corev1.Container]()) {
		if !has(f, "containers[]."+f) {
			t.Errorf("README.md: the pod field table has no row for Container's %s", f)
		}
	}
	for _, f := range jsonFields(reflect.TypeFor[corev1.PodSecurityContext]()) {
		if !has("securityContext." + f) {
			t.Errorf("README.md: the pod field table has no row for PodSecurityContext's %s", f)
		}
	}
	for _, f := range jsonFields(reflect.TypeFor[corev1.SecurityContext]()) {
		if !has("securityContext."+f, "containers[].securityContext."+f) {
			t.Errorf("README.md: the pod field table has no row for a container's SecurityContext's %s", f)
		}
	}
}

// jsonFields are the JSON names of t's fields.
func jsonFields(t reflect.Type) []string {
	var out []string
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name != "" && name != "-" {
			out = append(out, name)
		}
	}
	return out
}
