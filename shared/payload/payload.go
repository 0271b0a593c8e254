// Package payload names the schemas of the payloads the bus carries in bytes fields (pods,
// pod statuses, the KubeletConfiguration, metric families), which buf breaking does not
// see. Beside each such field a string field names the payload's schema: writers set it
// from Field.Write, readers check it with Field.Check before they decode. The package also
// describes every schema's fields, for make proto-check (schema.go).
package payload

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// The payload schema names.
const (
	// SchemaPod is a core/v1 Pod (k8s.io/api/core/v1) as JSON: metadata and spec.
	SchemaPod = "core/v1.Pod"
	// SchemaPodStatus is a core/v1 PodStatus as JSON.
	SchemaPodStatus = "core/v1.PodStatus"
	// SchemaKubeletConfiguration is a KubeletConfiguration (k8s.io/kubelet/config/v1beta1)
	// as JSON, with apiVersion and kind.
	SchemaKubeletConfiguration = "kubelet.config.k8s.io/v1beta1.KubeletConfiguration"
	// SchemaMetricFamilies is Prometheus's io.prometheus.client.MetricFamily
	// (github.com/prometheus/client_model), length-delimited protobuf, one after another.
	SchemaMetricFamilies = "io.prometheus.client.MetricFamily;encoding=delimited"
)

// Field is one payload field of the bus: a bytes field and the string field beside it that
// names the payload's schema.
type Field struct {
	// Message is the proto message's full name; Name is its bytes field.
	Message, Name string
	// SchemaField is the string field naming the schema of Name.
	SchemaField string
	// Write is the schema this build writes.
	Write string
	// Read are the schemas this build decodes. The first is what an empty name means (the
	// schema of writers that predate SchemaField) and stays first for good.
	Read []string
}

// The bus's payload fields.
var (
	ConfigKubeletConfiguration = field("unitlet.config.v1.NodeConfig", "kubelet_configuration", SchemaKubeletConfiguration)
	PodsyncPod                 = field("unitlet.podsync.v1.Pod", "pod", SchemaPod)
	PodsyncPodStatus           = field("unitlet.podsync.v1.Pod", "status", SchemaPodStatus)
	VolumesPod                 = field("unitlet.volumes.v1.PrepareVolumesRequest", "pod", SchemaPod)
	EvictionPod                = field("unitlet.eviction.v1.AdmitPodRequest", "pod", SchemaPod)
	DaemonMetricFamilies       = field("unitlet.daemon.v1.GetMetricsResponse", "metric_families", SchemaMetricFamilies)
)

// field is a payload field that has only ever carried schema, named in <name>_schema.
func field(message, name, schema string) Field {
	return Field{Message: message, Name: name, SchemaField: name + "_schema", Write: schema, Read: []string{schema}}
}

// Fields are every payload field of the bus. A bytes field of a bus message that is not
// here fails this package's tests.
var Fields = []Field{ConfigKubeletConfiguration, PodsyncPod, PodsyncPodStatus, VolumesPod, EvictionPod, DaemonMetricFamilies}

// String is the field's full name, e.g. "unitlet.podsync.v1.Pod.status".
func (f Field) String() string { return f.Message + "." + f.Name }

// Check takes the schema name a reader received beside f's payload: nil when the reader
// can decode it (empty, meaning Read[0], or a name in Read), otherwise an
// *UnknownSchemaError.
func (f Field) Check(schema string) error {
	if schema == "" || slices.Contains(f.Read, schema) {
		return nil
	}
	return &UnknownSchemaError{Field: f, Schema: schema}
}

// DecodeJSON checks schema and decodes data into v. A JSON payload is decoded leniently:
// a newer writer may set fields this reader does not know.
func (f Field) DecodeJSON(schema string, data []byte, v any) error {
	if err := f.Check(schema); err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%s: not a %s: %w", f, f.resolve(schema), err)
	}
	return nil
}

func (f Field) resolve(schema string) string {
	if schema == "" {
		return f.Read[0]
	}
	return schema
}

// UnknownSchemaError is a payload in a schema this reader does not know: a newer writer's.
type UnknownSchemaError struct {
	Field  Field
	Schema string
}

func (e *UnknownSchemaError) Error() string {
	quoted := make([]string, len(e.Field.Read))
	for i, s := range e.Field.Read {
		quoted[i] = fmt.Sprintf("%q", s)
	}
	return fmt.Sprintf("%s: unknown schema %q in %s; this reader understands %s (an empty %s means %q)",
		e.Field, e.Schema, e.Field.SchemaField, strings.Join(quoted, ", "), e.Field.SchemaField, e.Field.Read[0])
}
