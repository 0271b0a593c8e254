package criconfig

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Label keys the kubelet puts on sandboxes and containers; the runtime keeps them, so
// they identify the pod and container after a restart.
const (
	LabelPodName       = "io.kubernetes.pod.name"
	LabelPodNamespace  = "io.kubernetes.pod.namespace"
	LabelPodUID        = "io.kubernetes.pod.uid"
	LabelContainerName = "io.kubernetes.container.name"
)

// Annotation keys the kubelet puts on containers.
const (
	AnnotationContainerHash                     = "io.kubernetes.container.hash"
	AnnotationContainerRestartCount             = "io.kubernetes.container.restartCount"
	AnnotationContainerTerminationMessagePath   = "io.kubernetes.container.terminationMessagePath"
	AnnotationContainerTerminationMessagePolicy = "io.kubernetes.container.terminationMessagePolicy"
	AnnotationContainerPreStopHandler           = "io.kubernetes.container.preStopHandler"
	AnnotationContainerPorts                    = "io.kubernetes.container.ports"
	AnnotationPodTerminationGracePeriod         = "io.kubernetes.pod.terminationGracePeriod"
	AnnotationPodDeletionGracePeriod            = "io.kubernetes.pod.deletionGracePeriod"
)

// SandboxInfo is what a sandbox's labels say about its pod.
type SandboxInfo struct {
	PodName      string
	PodNamespace string
	PodUID       types.UID
	// Labels are the pod's own labels: the sandbox labels without the three above.
	Labels map[string]string
}

// ContainerInfo is what a container's labels and annotations say about it.
type ContainerInfo struct {
	PodName       string
	PodNamespace  string
	PodUID        types.UID
	ContainerName string

	// Hash is the container spec hash it was created from (see Hash).
	Hash         uint64
	RestartCount int

	TerminationMessagePath   string
	TerminationMessagePolicy corev1.TerminationMessagePolicy
	// PodTerminationGracePeriod and PodDeletionGracePeriod are nil when not recorded.
	PodTerminationGracePeriod *int64
	PodDeletionGracePeriod    *int64
	PreStopHandler            *corev1.LifecycleHandler
	Ports                     []corev1.ContainerPort

	// Err holds the annotations that were present but could not be parsed; their
	// fields are left zero, as the kubelet does.
	Err error
}

func sandboxLabels(pod *corev1.Pod) map[string]string {
	labels := make(map[string]string, len(pod.Labels)+3)
	maps.Copy(labels, pod.Labels)
	labels[LabelPodName] = pod.Name
	labels[LabelPodNamespace] = pod.Namespace
	labels[LabelPodUID] = string(pod.UID)
	return labels
}

func sandboxAnnotations(pod *corev1.Pod) map[string]string {
	return maps.Clone(pod.Annotations)
}

func containerLabels(pod *corev1.Pod, c *corev1.Container) map[string]string {
	return map[string]string{
		LabelPodName:       pod.Name,
		LabelPodNamespace:  pod.Namespace,
		LabelPodUID:        string(pod.UID),
		LabelContainerName: c.Name,
	}
}

func containerAnnotations(pod *corev1.Pod, c *corev1.Container, restartCount int) (map[string]string, error) {
	a := map[string]string{
		AnnotationContainerHash:                     strconv.FormatUint(Hash(c), 16),
		AnnotationContainerRestartCount:             strconv.Itoa(restartCount),
		AnnotationContainerTerminationMessagePath:   c.TerminationMessagePath,
		AnnotationContainerTerminationMessagePolicy: string(c.TerminationMessagePolicy),
	}
	if pod.DeletionGracePeriodSeconds != nil {
		a[AnnotationPodDeletionGracePeriod] = strconv.FormatInt(*pod.DeletionGracePeriodSeconds, 10)
	}
	if pod.Spec.TerminationGracePeriodSeconds != nil {
		a[AnnotationPodTerminationGracePeriod] = strconv.FormatInt(*pod.Spec.TerminationGracePeriodSeconds, 10)
	}
	if c.Lifecycle != nil && c.Lifecycle.PreStop != nil {
		raw, err := json.Marshal(c.Lifecycle.PreStop)
		if err != nil {
			return nil, fmt.Errorf("container %s: encode lifecycle.preStop: %w", c.Name, err)
		}
		a[AnnotationContainerPreStopHandler] = string(raw)
	}
	if len(c.Ports) > 0 {
		raw, err := json.Marshal(c.Ports)
		if err != nil {
			return nil, fmt.Errorf("container %s: encode ports: %w", c.Name, err)
		}
		a[AnnotationContainerPorts] = string(raw)
	}
	return a, nil
}

// ParseSandboxLabels reads back the pod identity and the pod's own labels from a
// sandbox's labels.
func ParseSandboxLabels(labels map[string]string) SandboxInfo {
	info := SandboxInfo{
		PodName:      labels[LabelPodName],
		PodNamespace: labels[LabelPodNamespace],
		PodUID:       types.UID(labels[LabelPodUID]),
		Labels:       make(map[string]string, len(labels)),
	}
	for k, v := range labels {
		switch k {
		case LabelPodName, LabelPodNamespace, LabelPodUID:
		default:
			info.Labels[k] = v
		}
	}
	return info
}

// ParseContainerLabels reads back a container's identity from its labels and what the
// kubelet records in its annotations. Missing keys leave zero values; malformed ones
// also leave zero values and are reported in ContainerInfo.Err.
func ParseContainerLabels(labels, annotations map[string]string) ContainerInfo {
	info := ContainerInfo{
		PodName:                  labels[LabelPodName],
		PodNamespace:             labels[LabelPodNamespace],
		PodUID:                   types.UID(labels[LabelPodUID]),
		ContainerName:            labels[LabelContainerName],
		TerminationMessagePath:   annotations[AnnotationContainerTerminationMessagePath],
		TerminationMessagePolicy: corev1.TerminationMessagePolicy(annotations[AnnotationContainerTerminationMessagePolicy]),
	}
	var errs []error
	fail := func(key string, err error) {
		errs = append(errs, fmt.Errorf("annotation %s: %w", key, err))
	}
	if v, ok := annotations[AnnotationContainerHash]; ok {
		h, err := strconv.ParseUint(v, 16, 64)
		if err != nil {
			fail(AnnotationContainerHash, err)
		}
		info.Hash = h
	}
	if v, ok := annotations[AnnotationContainerRestartCount]; ok {
		n, err := strconv.Atoi(v)
		if err != nil {
			fail(AnnotationContainerRestartCount, err)
			n = 0
		}
		info.RestartCount = n
	}
	for key, dst := range map[string]**int64{
		AnnotationPodTerminationGracePeriod: &info.PodTerminationGracePeriod,
		AnnotationPodDeletionGracePeriod:    &info.PodDeletionGracePeriod,
	} {
		if v, ok := annotations[key]; ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				fail(key, err)
				continue
			}
			*dst = &n
		}
	}
	if v, ok := annotations[AnnotationContainerPreStopHandler]; ok {
		h := &corev1.LifecycleHandler{}
		if err := json.Unmarshal([]byte(v), h); err != nil {
			fail(AnnotationContainerPreStopHandler, err)
		} else {
			info.PreStopHandler = h
		}
	}
	if v, ok := annotations[AnnotationContainerPorts]; ok {
		var ports []corev1.ContainerPort
		if err := json.Unmarshal([]byte(v), &ports); err != nil {
			fail(AnnotationContainerPorts, err)
		} else {
			info.Ports = ports
		}
	}
	info.Err = errors.Join(errs...)
	return info
}
