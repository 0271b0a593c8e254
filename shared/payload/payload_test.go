package payload

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestCheckAcceptsEmptyAndTheSchemasRead(t *testing.T) {
	for _, f := range Fields {
		for _, schema := range append([]string{""}, f.Read...) {
			if err := f.Check(schema); err != nil {
				t.Errorf("%s: schema %q: %v", f, schema, err)
			}
		}
		if err := f.Check(f.Write); err != nil {
			t.Errorf("%s refuses the schema its writers write: %v", f, err)
		}
	}
}

func TestCheckRefusesAnUnknownSchemaNamingWhatItUnderstands(t *testing.T) {
	err := PodsyncPodStatus.Check("core/v2.PodStatus")
	var unknown *UnknownSchemaError
	if !errors.As(err, &unknown) || unknown.Schema != "core/v2.PodStatus" {
		t.Fatalf("Check(core/v2.PodStatus) = %v, want an *UnknownSchemaError for it", err)
	}
	want := `unitlet.podsync.v1.Pod.status: unknown schema "core/v2.PodStatus" in status_schema; this reader understands "core/v1.PodStatus" (an empty status_schema means "core/v1.PodStatus")`
	if err.Error() != want {
		t.Errorf("message:\n got %s\nwant %s", err, want)
	}
}

func TestDecodeJSON(t *testing.T) {
	body := []byte(`{"metadata":{"name":"web","uid":"u1"},"spec":{"nodeName":"n1"},"somethingNewer":1}`)
	for _, schema := range []string{"", SchemaPod} {
		var pod corev1.Pod
		if err := VolumesPod.DecodeJSON(schema, body, &pod); err != nil || pod.Name != "web" || pod.Spec.NodeName != "n1" {
			t.Errorf("schema %q: pod %s on %q, err %v; want web on n1", schema, pod.Name, pod.Spec.NodeName, err)
		}
	}
	var pod corev1.Pod
	err := VolumesPod.DecodeJSON("core/v2.Pod", body, &pod)
	if err == nil || !strings.Contains(err.Error(), `unknown schema "core/v2.Pod" in pod_schema`) || pod.Name != "" {
		t.Errorf("schema core/v2.Pod: pod %q, err %v; want nothing decoded and the unknown schema named", pod.Name, err)
	}
	err = VolumesPod.DecodeJSON("", []byte(`{"metadata":`), &pod)
	if err == nil || !strings.Contains(err.Error(), "unitlet.volumes.v1.PrepareVolumesRequest.pod: not a core/v1.Pod") {
		t.Errorf("truncated JSON: err %v; want the field and the schema named", err)
	}
}
