package criconfig

import (
	"reflect"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func TestSandboxLabelsRoundTrip(t *testing.T) {
	pod := testPod()
	info := ParseSandboxLabels(sandboxLabels(pod))
	want := SandboxInfo{PodName: "web", PodNamespace: "shop", PodUID: pod.UID, Labels: map[string]string{"app": "web"}}
	if !reflect.DeepEqual(info, want) {
		t.Errorf("ParseSandboxLabels = %+v, want %+v", info, want)
	}
}

func TestContainerLabelsRoundTrip(t *testing.T) {
	pod := testPod()
	pod.Spec.TerminationGracePeriodSeconds = ptrTo(int64(45))
	pod.DeletionGracePeriodSeconds = ptrTo(int64(5))
	c := &pod.Spec.Containers[0]
	c.Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{
		HTTPGet: &corev1.HTTPGetAction{Path: "/quit", Port: intstr.FromInt32(8080)},
	}}
	c.Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}}

	ann, err := containerAnnotations(pod, c, 7)
	if err != nil {
		t.Fatal(err)
	}
	info := ParseContainerLabels(containerLabels(pod, c), ann)
	if info.Err != nil {
		t.Fatalf("Err = %v", info.Err)
	}
	want := ContainerInfo{
		PodName: "web", PodNamespace: "shop", PodUID: pod.UID, ContainerName: "app",
		Hash: Hash(c), RestartCount: 7,
		TerminationMessagePath:    "/dev/termination-log",
		TerminationMessagePolicy:  corev1.TerminationMessageReadFile,
		PodTerminationGracePeriod: ptrTo(int64(45)),
		PodDeletionGracePeriod:    ptrTo(int64(5)),
		PreStopHandler:            c.Lifecycle.PreStop,
		Ports:                     c.Ports,
	}
	if !reflect.DeepEqual(info, want) {
		t.Errorf("ParseContainerLabels =\n %+v\nwant\n %+v", info, want)
	}
	// The hash is written in hex, as the kubelet writes it.
	if got, want := ann[AnnotationContainerHash], strconv.FormatUint(Hash(c), 16); got != want {
		t.Errorf("hash annotation = %q, want %q", got, want)
	}
	if got := ann[AnnotationContainerRestartCount]; got != "7" {
		t.Errorf("restart count annotation = %q, want 7", got)
	}
}

func TestParseContainerLabelsTolerant(t *testing.T) {
	tests := []struct {
		name        string
		annotations map[string]string
		wantErr     bool
		check       func(ContainerInfo) bool
	}{
		{"missing everything", nil, false, func(i ContainerInfo) bool {
			return i.Hash == 0 && i.RestartCount == 0 && i.PodTerminationGracePeriod == nil && i.PreStopHandler == nil
		}},
		{"bad restart count", map[string]string{AnnotationContainerRestartCount: "x", AnnotationContainerHash: "ff"}, true,
			func(i ContainerInfo) bool { return i.RestartCount == 0 && i.Hash == 0xff }},
		{"bad hash", map[string]string{AnnotationContainerHash: "zz", AnnotationContainerRestartCount: "3"}, true,
			func(i ContainerInfo) bool { return i.Hash == 0 && i.RestartCount == 3 }},
		{"bad grace period", map[string]string{AnnotationPodTerminationGracePeriod: "soon"}, true,
			func(i ContainerInfo) bool { return i.PodTerminationGracePeriod == nil }},
		{"bad prestop json", map[string]string{AnnotationContainerPreStopHandler: "{"}, true,
			func(i ContainerInfo) bool { return i.PreStopHandler == nil }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			info := ParseContainerLabels(map[string]string{LabelContainerName: "c"}, tt.annotations)
			if (info.Err != nil) != tt.wantErr {
				t.Errorf("Err = %v, want error %v", info.Err, tt.wantErr)
			}
			if info.ContainerName != "c" || !tt.check(info) {
				t.Errorf("unexpected info %+v", info)
			}
		})
	}
}
