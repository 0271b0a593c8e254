package projection

import (
	"errors"
	"fmt"
	"path"

	corev1 "k8s.io/api/core/v1"

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

// FieldValue returns the value of a downward API fieldRef a volume may use: the pod's
// metadata only, as the kubelet allows (shared/downwardapi).
func FieldValue(pod *corev1.Pod, fieldPath string) (string, error) {
	v, ok, err := downwardapi.MetadataValue(pod, fieldPath)
	if !ok {
		return "", fmt.Errorf("fieldPath %q is not supported in volumes", fieldPath)
	}
	return v, err
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
