package projection

import (
	"errors"
	"fmt"
	"path"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/unitlet/unitlet/services/volumes/atomicwriter"
	"github.com/unitlet/unitlet/shared/downwardapi"
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

// FormatMap renders labels or annotations as the kubelet does (shared/downwardapi).
func FormatMap(m map[string]string) string { return downwardapi.FormatMap(m) }

// ResourceValue returns the value of a resourceFieldRef, which in a volume must name its
// container (shared/downwardapi).
func ResourceValue(pod *corev1.Pod, ref *corev1.ResourceFieldSelector, allocatable corev1.ResourceList) (string, error) {
	if ref.ContainerName == "" {
		return "", fmt.Errorf("resourceFieldRef %s names no container", ref.Resource)
	}
	container := downwardapi.FindContainer(pod, ref.ContainerName)
	if container == nil {
		return "", fmt.Errorf("resourceFieldRef %s: container %q not in the pod", ref.Resource, ref.ContainerName)
	}
	return downwardapi.ResourceValue(pod, container, ref, allocatable)
}
