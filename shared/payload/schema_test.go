package payload

import (
	"maps"
	"reflect"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

type node struct {
	metav1.TypeMeta `json:",inline"`
	Name            string            `json:"name"`
	Size            *int32            `json:"size,omitempty"`
	Created         metav1.Time       `json:"created"`
	Children        []node            `json:"children"`
	Labels          map[string]string `json:"labels"`
	Ports           map[string]port   `json:"ports"`
	Data            []byte            `json:"data"`
	Skipped         string            `json:"-"`
	Untagged        bool
}

type port struct {
	Number int64 `json:"number"`
}

func TestDescribeJSONFollowsEncodingJSON(t *testing.T) {
	s := describeJSON(reflect.TypeFor[node]())
	want := map[string]string{
		"apiVersion":     "string",
		"kind":           "string",
		"name":           "string",
		"size":           "int32",
		"created":        "json:k8s.io/apimachinery/pkg/apis/meta/v1.Time",
		"children":       "[]object",
		"labels":         "map[string]string",
		"ports":          "map[string]object",
		"ports{}.number": "int64",
		"data":           "bytes",
		"Untagged":       "bool",
	}
	if !maps.Equal(s.Fields, want) {
		t.Errorf("fields:\n got %v\nwant %v", s.Fields, want)
	}
	if s.Encoding != EncodingJSON || s.GoType != "github.com/unitlet/unitlet/shared/payload.node" {
		t.Errorf("encoding %s, Go type %s", s.Encoding, s.GoType)
	}
}

func TestDescribeCoversEverySchemaWritten(t *testing.T) {
	schemas := Describe().Schemas
	for _, f := range Fields {
		for _, name := range append([]string{f.Write}, f.Read...) {
			if len(schemas[name].Fields) == 0 {
				t.Errorf("%s: schema %s is not described", f, name)
			}
		}
	}
	if got := schemas[SchemaPod].Fields["spec.containers[].image"]; got != "string" {
		t.Errorf("core/v1.Pod spec.containers[].image = %q, want string", got)
	}
	if got := schemas[SchemaMetricFamilies].Fields["metric.counter.value"]; got != "double #1" {
		t.Errorf("MetricFamily metric.counter.value = %q, want double #1", got)
	}
}

func TestBreaking(t *testing.T) {
	base := File{Schemas: map[string]Schema{
		"a/v1.Thing": {Encoding: EncodingJSON, Fields: map[string]string{
			"name": "string", "spec": "object", "spec.size": "int32", "spec.items": "[]object", "spec.items[].id": "string",
		}},
		"b/v1.Other": {Encoding: EncodingJSON, Fields: map[string]string{"x": "string"}},
	}}
	clone := func() File {
		f := File{Schemas: map[string]Schema{}}
		for name, s := range base.Schemas {
			s.Fields = maps.Clone(s.Fields)
			f.Schemas[name] = s
		}
		return f
	}
	for _, tc := range []struct {
		name   string
		change func(File)
		want   []string
	}{
		{"unchanged", func(File) {}, nil},
		{"field added", func(f File) { f.Schemas["a/v1.Thing"].Fields["spec.color"] = "string" }, nil},
		{"schema added", func(f File) { f.Schemas["c/v1.New"] = Schema{Encoding: EncodingJSON} }, nil},
		{"field removed", func(f File) { delete(f.Schemas["a/v1.Thing"].Fields, "spec.size") },
			[]string{"a/v1.Thing: spec.size: field removed (was int32)"}},
		{"type changed", func(f File) { f.Schemas["a/v1.Thing"].Fields["spec.size"] = "string" },
			[]string{"a/v1.Thing: spec.size: type changed from int32 to string"}},
		{"object removed, its fields not listed again", func(f File) {
			for _, p := range []string{"spec", "spec.size", "spec.items", "spec.items[].id"} {
				delete(f.Schemas["a/v1.Thing"].Fields, p)
			}
		}, []string{"a/v1.Thing: spec: field removed (was object)"}},
		{"schema removed", func(f File) { delete(f.Schemas, "b/v1.Other") }, []string{"b/v1.Other: schema removed"}},
		{"encoding changed", func(f File) {
			f.Schemas["b/v1.Other"] = Schema{Encoding: EncodingProtobufDelimited, Fields: map[string]string{"x": "string"}}
		},
			[]string{"b/v1.Other: encoding changed from json to protobuf;delimited"}},
	} {
		cur := clone()
		tc.change(cur)
		if got := Breaking(base, cur); !slices.Equal(got, tc.want) {
			t.Errorf("%s: Breaking = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestFileRoundTrips(t *testing.T) {
	f := Describe()
	back, err := ParseFile(f.Marshal())
	if err != nil {
		t.Fatal(err)
	}
	if got := Breaking(f, back); len(got) > 0 || len(back.Schemas) != len(f.Schemas) {
		t.Errorf("parsed back: %d schemas (want %d), breaking %q", len(back.Schemas), len(f.Schemas), got)
	}
}
