package kubeletconfig

import (
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/unitlet/unitlet/shared/nodeconfig"
	v1beta1 "k8s.io/kubelet/config/v1beta1"
	"sigs.k8s.io/yaml"
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
		_, unsupported := notSupported[name]
		for _, in := range []bool{appliedBy[name] != "", contains(refusedUnlessDefault, name), unsupported, irrelevant[name] != ""} {
			if in {
				classes++
			}
		}
		if classes != 1 {
			t.Errorf("%s is in %d of appliedBy, refusedUnlessDefault, notSupported and irrelevant, want exactly one", name, classes)
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
		case unsupported && !strings.Contains(row, "not supported: "+notSupported[name].why):
			t.Errorf("README.md: %q, want it not supported: %s", row, notSupported[name].why)
		case irrelevant[name] != "" && !strings.Contains(row, "irrelevant: "+irrelevant[name]):
			t.Errorf("README.md: %q, want it irrelevant: %s", row, irrelevant[name])
		}
	}
	// The featureGates row names every gate unitlet follows at either value.
	for _, line := range strings.Split(string(readme), "\n") {
		if !strings.HasPrefix(line, "| `featureGates` |") {
			continue
		}
		for _, gate := range gatesFollowed {
			if !strings.Contains(line, "`"+gate+"`") {
				t.Errorf("README.md: the featureGates row does not name %s, a gate unitlet follows", gate)
			}
		}
	}
	for _, name := range refusedUnlessDefault {
		if !contains(jsonNames(), name) {
			t.Errorf("%s is not a KubeletConfiguration field", name)
		}
	}
	for _, m := range []map[string]string{appliedBy, whys(), irrelevant} {
		for name := range m {
			if !contains(jsonNames(), name) {
				t.Errorf("%s is not a KubeletConfiguration field", name)
			}
		}
	}
}

func whys() map[string]string {
	out := map[string]string{}
	for name, u := range notSupported {
		out[name] = u.why
	}
	return out
}

// unsupportedValues is a value unitlet would not honour for each field it does not apply.
var unsupportedValues = map[string]string{
	"enableServer":                              "false",
	"enableContentionProfiling":                 "true",
	"enableProfilingHandler":                    "null", // nil: unitlet accepts true (the default) and false
	"enableDebugFlagsHandler":                   "null",
	"enableSystemLogHandler":                    "null",
	"enableSystemLogQuery":                      "true",
	"volumeStatsAggPeriod":                      "2m",
	"kubeletCgroups":                            "/kubelet.slice",
	"systemCgroups":                             "/system.slice",
	"cpuManagerPolicy":                          "static",
	"cpuManagerPolicyOptions":                   "{full-pcpus-only: \"true\"}",
	"cpuManagerReconcilePeriod":                 "5s",
	"memoryManagerPolicy":                       "Static",
	"reservedMemory":                            "[{numaNode: 0, limits: {memory: 1Gi}}]",
	"topologyManagerPolicy":                     "single-numa-node",
	"topologyManagerScope":                      "pod",
	"topologyManagerPolicyOptions":              "{prefer-closest-numa-nodes: \"true\"}",
	"qosReserved":                               "{memory: 50%}",
	"podCIDR":                                   "10.1.0.0/24",
	"cpuCFSQuota":                               "false",
	"cpuCFSQuotaPeriod":                         "50ms",
	"maxOpenFiles":                              "4096",
	"makeIPTablesUtilChains":                    "null",
	"iptablesMasqueradeBit":                     "13",
	"iptablesDropBit":                           "16",
	"memorySwap":                                "{swapBehavior: LimitedSwap}",
	"configMapAndSecretChangeDetectionStrategy": "Cache",
	"showHiddenMetricsForVersion":               "\"1.35\"",
	"logging":                                   "{format: json}",
	"crashLoopBackOff":                          "{maxContainerRestartPeriod: 60s}",
	"memoryThrottlingFactor":                    "0.5",
	"memoryReservationPolicy":                   "TieredReservation",
	"tracing":                                   "{endpoint: localhost:4317}",
	"userNamespaces":                            "{idsPerPod: 131072}",
}

// Each field unitlet does not apply is refused with a value it would not honour, naming
// the field and why; the values unitlet accepts besides the default pass.
func TestUnsupportedFieldsAreRefused(t *testing.T) {
	with := func(name, v string) *v1beta1.KubeletConfiguration {
		c := loaded()
		if err := yaml.UnmarshalStrict([]byte(name+": "+v), &c); err != nil {
			t.Fatalf("%s: %s: %v", name, v, err)
		}
		return &c
	}
	for name, u := range notSupported {
		v, ok := unsupportedValues[name]
		if !ok {
			t.Errorf("%s: no value in unsupportedValues to test its refusal with", name)
			continue
		}
		if v != "null" { // a nil that defaulting fills: only its accepted values are tested
			errs := Unsupported(with(name, v))
			if len(errs) != 1 || errs[0].Field != name || !strings.Contains(errs[0].Detail, "is not supported: "+u.why) {
				t.Errorf("%s: %s: %v, want one error naming the field, saying why", name, v, errs)
			}
		}
		for _, v := range u.accept {
			if errs := Unsupported(with(name, v)); len(errs) != 0 {
				t.Errorf("%s: %s: %v, want it accepted", name, v, errs)
			}
		}
	}
	c := loaded()
	if errs := Unsupported(&c); len(errs) != 0 {
		t.Errorf("the defaults: %v", errs)
	}

	// Load refuses them, naming the file.
	file := write(t, t.TempDir(), "config.yaml", header+"cpuManagerPolicy: static\n")
	_, err := Load(file, "")
	if e := asError(t, err); e.File != file || e.Field != "cpuManagerPolicy" || !strings.Contains(e.Msg, `"static" is not supported: unitlet has no CPU manager`) {
		t.Errorf("cpuManagerPolicy: static: %v", err)
	}
}

func TestIrrelevantFieldsAreLogged(t *testing.T) {
	c := loaded()
	if w := Irrelevant(&c); len(w) != 0 {
		t.Fatalf("the defaults: %q, want nothing logged", w)
	}
	c.HairpinMode = "hairpin-veth"
	if w := Irrelevant(&c); len(w) != 1 || !strings.HasPrefix(w[0], `hairpinMode is set to "hairpin-veth", which changes nothing on a unitlet node`) {
		t.Errorf("lines %q, want one naming hairpinMode", w)
	}
}

// Feature gates: a gate unitlet does not know, or one it does not follow set away from its
// default, is refused; the followed ones load at either value.
func TestFeatureGatesAreFollowedOrRefused(t *testing.T) {
	gates := func(g map[string]bool) field.ErrorList {
		c := kc{FeatureGates: g} // defaulted under its gates, as Load does
		Default(&c)
		return Unsupported(&c)
	}
	if errs := gates(map[string]bool{"NoSuchGate": true}); len(errs) != 1 || errs[0].Field != "featureGates[NoSuchGate]" || !strings.Contains(errs[0].Detail, "unrecognized feature gate") {
		t.Errorf("an unknown gate: %v", errs)
	}
	if errs := gates(map[string]bool{"MemoryQoS": true}); len(errs) != 1 || !strings.Contains(errs[0].Detail, "true is not supported") {
		t.Errorf("MemoryQoS on: %v, want it refused", errs)
	}
	for _, name := range gatesFollowed {
		if _, ok := kubeletGates[name]; !ok {
			t.Errorf("unitlet follows %s, which kubelet v1.36 does not have", name)
		}
		for _, on := range []bool{true, false} {
			if errs := gates(map[string]bool{name: on}); len(errs) != 0 {
				t.Errorf("%s=%t: %v, want it accepted", name, on, errs)
			}
		}
	}
	// Every kubelet v1.36 gate loads at its default (one fleet-wide config line must not
	// take the node down); AllBeta turned on is refused.
	all := map[string]bool{}
	for name, g := range kubeletGates {
		all[name] = g.def
	}
	if errs := gates(all); len(errs) != 0 {
		t.Errorf("all %d kubelet gates at their defaults: %v", len(all), errs)
	}
	if errs := gates(map[string]bool{"AllBeta": true}); len(errs) != 1 || !strings.Contains(errs[0].Detail, "true is not supported") {
		t.Errorf("AllBeta on: %v, want it refused", errs)
	}
	if errs := gates(map[string]bool{"MemoryQoS": false}); len(errs) != 0 {
		t.Errorf("MemoryQoS at its default: %v", errs)
	}
}

// What the table says each service applies, each service's follower knows (so that a
// change of the field restarts it or reaches it live): the two lists cannot drift apart.
func TestAppliedFieldsAreFollowedByTheirServices(t *testing.T) {
	followers := []string{"certs", "podsync", "status", "volumes", "eviction"}
	for name, by := range appliedBy {
		var services []string
		switch {
		case strings.HasPrefix(by, "every service's API client"):
			services = []string{"certs", "podsync", "status", "volumes"}
		case strings.HasPrefix(by, "every service's CRI client"):
			services = []string{"podsync", "status", "volumes", "eviction"}
		default:
			for _, s := range followers {
				if strings.Contains(by, s) {
					services = append(services, s)
				}
			}
		}
		for _, s := range services {
			if !slices.Contains(nodeconfig.Uses[s], name) {
				t.Errorf("%s is applied by %s (%q), but nodeconfig.Uses[%q] does not list it", name, s, by, s)
			}
		}
	}
	for s, fields := range nodeconfig.Uses {
		for _, name := range fields {
			if appliedBy[name] == "" && !contains(refusedUnlessDefault, name) {
				t.Errorf("nodeconfig.Uses[%q] lists %s, which the table does not say is applied", s, name)
			}
		}
		for _, name := range nodeconfig.Live[s] {
			if !slices.Contains(fields, name) {
				t.Errorf("nodeconfig.Live[%q] lists %s, which Uses does not", s, name)
			}
		}
	}
}
