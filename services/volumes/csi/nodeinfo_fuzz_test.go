package csi

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// FuzzSetNodeID: whatever the Node's csi.volume.kubernetes.io/nodeid annotation holds (it
// is anyone's with the right to edit the Node), setting a driver's node ID either fails
// naming the annotation or leaves a JSON object with that ID and every other driver's.
func FuzzSetNodeID(f *testing.F) {
	for _, seed := range []string{"", "{}", `{"a":"1"}`, `{"a":1}`, "[]", "null", `{"d":"x","e":"y"}`, "{", `"s"`} {
		f.Add(seed, "d", "id")
		f.Add(seed, "d", "")
	}
	f.Fuzz(func(t *testing.T, annotation, driver, id string) {
		if !utf8.ValidString(driver) || !utf8.ValidString(id) {
			// Names and IDs come from the driver's gRPC answers, whose strings protobuf
			// has checked are UTF-8; JSON would replace what is not.
			return
		}
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{annotationNodeID: annotation}}}
		before := map[string]string{}
		parsed := annotation == "" || json.Unmarshal([]byte(annotation), &before) == nil
		_, err := setNodeID(node, driver, id)
		if err != nil {
			if parsed {
				t.Fatalf("annotation %q parses, yet: %v", annotation, err)
			}
			if !strings.Contains(err.Error(), annotationNodeID) {
				t.Fatalf("error %q does not name the annotation", err)
			}
			return
		}
		if !parsed {
			t.Fatalf("annotation %q does not parse, yet no error", annotation)
		}
		after := map[string]string{}
		if v := node.Annotations[annotationNodeID]; v != "" {
			if err := json.Unmarshal([]byte(v), &after); err != nil {
				t.Fatalf("left %q, not a JSON object: %v", v, err)
			}
		}
		if id != "" && after[driver] != id {
			t.Fatalf("driver %q's ID %q, want %q", driver, after[driver], id)
		}
		if _, ok := after[driver]; id == "" && ok {
			t.Fatalf("driver %q still in %v after its removal", driver, after)
		}
		for k, v := range before {
			if k != driver && after[k] != v {
				t.Fatalf("driver %q's ID %q became %q", k, v, after[k])
			}
		}
	})
}
