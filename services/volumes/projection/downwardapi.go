package projection

import (
	"errors"
	"fmt"
	"path"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/unitlet/unitlet/services/volumes/atomicwriter"
)

// DownwardAPIPayload builds the files of a downwardAPI volume: fieldRef (metadata.name,
// metadata.namespace, metadata.uid, metadata.labels, metadata.annotations and single
// keys of those as metadata.labels['key']) and resourceFieldRef (limits and requests of
// cpu, memory, ephemeral-storage and hugepages-*, divided by the divisor and rounded up;
// a limit the container does not set is the node's allocatable). A file's mode is its
// item's mode, else source.defaultMode, else defaultMode (pass DefaultMode).
func DownwardAPIPayload(source *corev1.DownwardAPIVolumeSource, pod *corev1.Pod, allocatable corev1.ResourceList, defaultMode int32) (Payload, error) {
	return downwardAPIFiles(source.Items, pod, allocatable, modeOr(source.DefaultMode, defaultMode))
}

func downwardAPIFiles(items []corev1.DownwardAPIVolumeFile, pod *corev1.Pod, allocatable corev1.ResourceList, mode int32) (Payload, error) {
	payload := make(Payload, len(items))
	var errs []error
	for _, item := range items {
		var value string
		var err error
		switch {
		case item.FieldRef != nil:
			value, err = FieldValue(pod, item.FieldRef.FieldPath)
		case item.ResourceFieldRef != nil:
			value, err = ResourceValue(pod, item.ResourceFieldRef, allocatable)
		default:
			err = errors.New("neither fieldRef nor resourceFieldRef is set")
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("downwardAPI file %q: %w", item.Path, err))
			continue
		}
		payload[path.Clean(item.Path)] = atomicwriter.FileProjection{Data: []byte(value), Mode: modeOr(item.Mode, mode)}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return payload, nil
}

// FieldValue returns the value of a downward API fieldRef a volume may use.
func FieldValue(pod *corev1.Pod, fieldPath string) (string, error) {
	if field, key, ok := subscript(fieldPath); ok {
		switch field {
		case "metadata.labels":
			if errs := validation.IsQualifiedName(key); len(errs) > 0 {
				return "", fmt.Errorf("invalid label key in %s: %s", fieldPath, strings.Join(errs, "; "))
			}
			return pod.Labels[key], nil
		case "metadata.annotations":
			if errs := validation.IsQualifiedName(strings.ToLower(key)); len(errs) > 0 {
				return "", fmt.Errorf("invalid annotation key in %s: %s", fieldPath, strings.Join(errs, "; "))
			}
			return pod.Annotations[key], nil
		}
		return "", fmt.Errorf("fieldPath %q takes no key", fieldPath)
	}
	switch fieldPath {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "metadata.labels":
		return FormatMap(pod.Labels), nil
	case "metadata.annotations":
		return FormatMap(pod.Annotations), nil
	}
	return "", fmt.Errorf("fieldPath %q is not supported in volumes", fieldPath)
}

// subscript splits "metadata.labels['key']" into its field and key.
func subscript(fieldPath string) (field, key string, ok bool) {
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

// FormatMap renders labels or annotations as the kubelet does: one key="value" line per
// key, sorted by key, the value quoted as Go's %q does, no trailing newline.
func FormatMap(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(strconv.Quote(m[k]))
	}
	return b.String()
}

// ResourceValue returns the value of a resourceFieldRef: the container's limit or
// request divided by the divisor (1 when unset) and rounded up. An unset or zero limit
// of cpu, memory or ephemeral-storage is the node's allocatable.
func ResourceValue(pod *corev1.Pod, ref *corev1.ResourceFieldSelector, allocatable corev1.ResourceList) (string, error) {
	if ref.ContainerName == "" {
		return "", fmt.Errorf("resourceFieldRef %s names no container", ref.Resource)
	}
	container := findContainer(pod, ref.ContainerName)
	if container == nil {
		return "", fmt.Errorf("resourceFieldRef %s: container %q not in the pod", ref.Resource, ref.ContainerName)
	}
	kind, name, ok := strings.Cut(ref.Resource, ".")
	if !ok || (kind != "limits" && kind != "requests") {
		return "", fmt.Errorf("resourceFieldRef %s is not supported", ref.Resource)
	}
	res := corev1.ResourceName(name)
	switch {
	case res == corev1.ResourceCPU, res == corev1.ResourceMemory, res == corev1.ResourceEphemeralStorage:
	case strings.HasPrefix(name, corev1.ResourceHugePagesPrefix):
	default:
		return "", fmt.Errorf("resourceFieldRef %s is not supported", ref.Resource)
	}

	var q resource.Quantity
	if kind == "requests" {
		q = container.Resources.Requests[res]
	} else {
		q = container.Resources.Limits[res]
		if q.IsZero() && !strings.HasPrefix(name, corev1.ResourceHugePagesPrefix) {
			q = allocatable[res]
		}
	}

	divisor := ref.Divisor
	if divisor.IsZero() {
		divisor = resource.MustParse("1")
	}
	if divisor.Sign() < 0 {
		return "", fmt.Errorf("resourceFieldRef %s: divisor %s is negative", ref.Resource, divisor.String())
	}
	if res == corev1.ResourceCPU {
		// CPU in millicores: a divisor of 1m gives millicores, of 1 whole cores.
		return strconv.FormatInt(ceilDiv(q.MilliValue(), divisor.MilliValue()), 10), nil
	}
	return strconv.FormatInt(ceilDiv(q.Value(), divisor.Value()), 10), nil
}

// ceilDiv divides non-negative a by positive b, rounding up.
func ceilDiv(a, b int64) int64 {
	if b <= 0 {
		return 0
	}
	if a <= 0 {
		return 0
	}
	return (a-1)/b + 1
}

func findContainer(pod *corev1.Pod, name string) *corev1.Container {
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == name {
			return &pod.Spec.Containers[i]
		}
	}
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == name {
			return &pod.Spec.InitContainers[i]
		}
	}
	return nil
}
