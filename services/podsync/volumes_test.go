package podsync

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	volumesv1 "github.com/unitlet/unitlet/proto/unitlet/volumes/v1"
)

// A container's block volumes come back as devices; a unitlet-volumes that did not hand
// one over (older than block volumes) is an error naming the volume, for the container
// that lists it only.
func TestFromProtoDevices(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{
		{Name: "db", VolumeDevices: []corev1.VolumeDevice{{Name: "disk", DevicePath: "/dev/xvda"}}},
		{Name: "web"},
	}}}
	got, err := fromProto(pod, "", []*volumesv1.ContainerMounts{{Container: "db", Devices: []*volumesv1.Device{
		{Volume: "disk", HostPath: "/var/lib/kubelet/pods/u/volumeDevices/kubernetes.io~csi/pv", ContainerPath: "/dev/xvda", ReadOnly: true}}}})
	if err != nil {
		t.Fatal(err)
	}
	if d := got["db"]; len(d) != 1 || !d[0].Device || !d[0].ReadOnly || d[0].ContainerPath != "/dev/xvda" {
		t.Errorf("db's mounts %+v, want the read-only device", d)
	}
	if _, err := fromProto(pod, "", nil); err == nil || !strings.Contains(err.Error(), "did not hand over the device of volume disk") {
		t.Errorf("no devices from unitlet-volumes: %v, want an error naming the volume", err)
	}
	if _, err := fromProto(pod, "web", nil); err != nil {
		t.Errorf("web, which has no devices: %v", err)
	}
}
