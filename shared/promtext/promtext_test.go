package promtext

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	body := `# TYPE a_total counter
a_total{x="1",y="2"} 3 1700000000000
a_total{x="2",y="2"} 4
# TYPE b gauge
b 5
`
	families, err := Parse(body)
	if err != nil {
		t.Fatal(err)
	}
	if m := Sample(families, "a_total", map[string]string{"y": "2", "x": "1"}); m == nil || Value(m) != 3 || m.GetTimestampMs() != 1700000000000 {
		t.Errorf("a_total{x=1,y=2}: %v, want 3 at 1700000000000", m)
	}
	if m := Sample(families, "a_total", map[string]string{"x": "1"}); m != nil {
		t.Errorf("a subset of the labels matched %v", m)
	}
	if m := Find(families, "a_total", map[string]string{"x": "2"}); m == nil || Value(m) != 4 {
		t.Errorf("Find a_total{x=2}: %v, want 4", m)
	}
	if m := Find(families, "a_total", map[string]string{"x": "2", "z": ""}); m == nil || Label(m, "z") != "" || Label(m, "y") != "2" {
		t.Errorf("Find a_total{x=2,z=\"\"}: %v, want the series without z", m)
	}
	if m := Find(families, "a_total", map[string]string{"x": "3"}); m != nil {
		t.Errorf("Find a_total{x=3}: %v, want none", m)
	}
	later, err := Parse("# TYPE a_total counter\na_total{x=\"1\",y=\"2\"} 5 1700000004000\n")
	if err != nil {
		t.Fatal(err)
	}
	x1 := map[string]string{"x": "1", "y": "2"}
	if r, err := Rate(Sample(families, "a_total", x1), Sample(later, "a_total", x1)); err != nil || r != 0.5 {
		t.Errorf("Rate: %v %v, want 0.5 (2 over 4 s)", r, err)
	}
	if _, err := Rate(Sample(later, "a_total", x1), Sample(families, "a_total", x1)); err == nil {
		t.Error("Rate of samples in the wrong order: no error")
	}
	if m := Sample(families, "b", nil); m == nil || Value(m) != 5 {
		t.Errorf("b: %v, want 5", m)
	}
}

func TestParseRefuses(t *testing.T) {
	for name, body := range map[string]string{
		"a series twice":    "# TYPE a gauge\na{x=\"1\"} 1\na{x=\"1\"} 2\n",
		"not an exposition": "a{x=1} 1\n",
	} {
		if _, err := Parse(body); err == nil {
			t.Errorf("%s: parsed", name)
		} else if name == "a series twice" && !strings.Contains(err.Error(), `a{x="1"} given twice`) {
			t.Errorf("%s: %v, want the series named", name, err)
		}
	}
}
