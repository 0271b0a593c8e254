// Package downwardapi holds what the downward API's environment variables (podsync) and
// volumes (unitlet-volumes) share: the values of fieldRefs to the pod's metadata (with
// their one subscript parser and key checks), how labels and annotations are written, and
// the value of a resourceFieldRef.
package downwardapi

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
)

// FormatMap writes labels or annotations as the kubelet does: one key="value" line per key,
// sorted by key, the value quoted as Go's %q does, no trailing newline.
func FormatMap(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	lines := make([]string, 0, len(keys))
	for _, k := range keys {
		lines = append(lines, k+"="+strconv.Quote(m[k]))
	}
	return strings.Join(lines, "\n")
}

// FindContainer is the pod's container or init container of that name, or nil.
func FindContainer(pod *corev1.Pod, name string) *corev1.Container {
	for _, cs := range [][]corev1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		for i := range cs {
			if cs[i].Name == name {
				return &cs[i]
			}
		}
	}
	return nil
}

// ResourceValue is the value of a resourceFieldRef for container c of pod: its request
// or limit divided by the divisor (1 when unset) and rounded up. A cpu, memory or
// ephemeral-storage limit the container does not set is the pod's limit, else the node's
// allocatable.
func ResourceValue(pod *corev1.Pod, c *corev1.Container, ref *corev1.ResourceFieldSelector, allocatable corev1.ResourceList) (string, error) {
	kind, name, ok := strings.Cut(ref.Resource, ".")
	if !ok || (kind != "limits" && kind != "requests") {
		return "", fmt.Errorf("resourceFieldRef %s: unsupported resource", ref.Resource)
	}
	res := corev1.ResourceName(name)
	hugePages := strings.HasPrefix(name, corev1.ResourceHugePagesPrefix)
	if res != corev1.ResourceCPU && res != corev1.ResourceMemory && res != corev1.ResourceEphemeralStorage && !hugePages {
		return "", fmt.Errorf("resourceFieldRef %s: unsupported resource", ref.Resource)
	}
	divisor := ref.Divisor
	if divisor.IsZero() {
		divisor = resource.MustParse("1")
	}
	if divisor.Sign() < 0 {
		return "", fmt.Errorf("resourceFieldRef %s: divisor %s is negative", ref.Resource, divisor.String())
	}
	var q resource.Quantity
	if kind == "requests" {
		q = c.Resources.Requests[res]
	} else {
		q = c.Resources.Limits[res]
		if q.IsZero() && !hugePages {
			if pl, ok := podLimit(pod, res); ok {
				q = pl
			} else {
				q = allocatable[res]
			}
		}
	}
	if res == corev1.ResourceCPU {
		// In millicores: a divisor of 1m gives millicores, of 1 whole cores.
		return strconv.FormatInt(ceilDiv(q.MilliValue(), divisor.MilliValue()), 10), nil
	}
	return strconv.FormatInt(ceilDiv(q.Value(), divisor.Value()), 10), nil
}

// ceilDiv divides a by positive b, rounding up; 0 for a or b not positive.
func ceilDiv(a, b int64) int64 {
	if a <= 0 || b <= 0 {
		return 0
	}
	return (a-1)/b + 1
}

// podLimit is the pod-level limit of res, when the pod sets one.
func podLimit(pod *corev1.Pod, res corev1.ResourceName) (resource.Quantity, bool) {
	if pod.Spec.Resources == nil {
		return resource.Quantity{}, false
	}
	q, ok := pod.Spec.Resources.Limits[res]
	return q, ok && !q.IsZero()
}

// MetadataValue is the value of a fieldRef to the pod's metadata, the paths both
// environment variables and volumes may use: metadata.name, metadata.namespace,
// metadata.uid, metadata.labels, metadata.annotations, and one label or annotation by key
// (metadata.labels['key']), the key checked as the API server checks it. ok is false for
// a path outside the pod's metadata, which the caller resolves or refuses.
func MetadataValue(pod *corev1.Pod, fieldPath string) (value string, ok bool, err error) {
	if field, key, sub := SplitSubscript(fieldPath); sub {
		switch field {
		case "metadata.labels":
			if errs := validation.IsQualifiedName(key); len(errs) > 0 {
				return "", true, fmt.Errorf("invalid label key in %s: %s", fieldPath, strings.Join(errs, "; "))
			}
			return pod.Labels[key], true, nil
		case "metadata.annotations":
			if errs := validation.IsQualifiedName(strings.ToLower(key)); len(errs) > 0 {
				return "", true, fmt.Errorf("invalid annotation key in %s: %s", fieldPath, strings.Join(errs, "; "))
			}
			return pod.Annotations[key], true, nil
		}
		return "", true, fmt.Errorf("fieldPath %q takes no key", fieldPath)
	}
	switch fieldPath {
	case "metadata.name":
		return pod.Name, true, nil
	case "metadata.namespace":
		return pod.Namespace, true, nil
	case "metadata.uid":
		return string(pod.UID), true, nil
	case "metadata.labels":
		return FormatMap(pod.Labels), true, nil
	case "metadata.annotations":
		return FormatMap(pod.Annotations), true, nil
	}
	return "", false, nil
}

// SplitSubscript splits "metadata.labels['key']" into its field and key; ok is false for a
// path without a subscript.
func SplitSubscript(fieldPath string) (field, key string, ok bool) {
	rest, found := strings.CutSuffix(fieldPath, "']")
	if !found {
		return "", "", false
	}
	field, key, found = strings.Cut(rest, "['")
	if !found || field == "" {
		return "", "", false
	}
	return field, key, true
}
