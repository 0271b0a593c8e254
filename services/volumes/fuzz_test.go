package volumes

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"

	volumesv1 "github.com/unitlet/unitlet/proto/unitlet/volumes/v1"
)

// FuzzPrepareVolumesPod sends PrepareVolumes any pod JSON. A pod that does not decode is
// INVALID_ARGUMENT; one that does is prepared or refused with a named error, never a
// panic, and every host path it answers with lies in the pod's directory or in a hostPath
// volume. Host paths are moved below the test's directory and memory media dropped, so the
// fuzzer touches neither the host's files nor its mounts.
func FuzzPrepareVolumesPod(f *testing.F) {
	seeds := []*corev1.Pod{
		testPod("uid-1", []corev1.Volume{
			{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{}}},
		}, []corev1.VolumeMount{
			{Name: "scratch", MountPath: "/s", SubPath: "a/b"},
			{Name: "config", MountPath: "/c/key", SubPath: "key"},
		}),
		testPod("uid-2", []corev1.Volume{
			{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/etc"}}},
		}, []corev1.VolumeMount{{Name: "host", MountPath: "/h", SubPath: "../../etc"}}),
		testPod("../uid", nil, []corev1.VolumeMount{{Name: "missing", MountPath: "/m"}}),
	}
	for _, p := range seeds {
		b, err := json.Marshal(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, "")
		f.Add(b, "main")
	}
	f.Add([]byte(`{"metadata":{"uid":"u"},"spec":{"volumes":[{"name":"v","emptyDir":{"sizeLimit":"-1"}}]}}`), "nope")
	f.Add([]byte(`{`), "")
	f.Fuzz(func(t *testing.T, raw []byte, container string) {
		dir := t.TempDir()
		podsDir := filepath.Join(dir, "pods")
		hostDir := filepath.Join(dir, "host")
		m := NewManager(ManagerOptions{PodsDir: podsDir, Payloads: &fakePayloads{content: "v"}, Clock: clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0)), Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
		s := NewServer(m, newMetrics(prometheus.NewRegistry(), m))

		pod := &corev1.Pod{}
		if err := json.Unmarshal(raw, pod); err != nil {
			_, err := s.PrepareVolumes(context.Background(), &volumesv1.PrepareVolumesRequest{Pod: raw, Container: container})
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("undecodable pod: %v, want INVALID_ARGUMENT", err)
			}
			return
		}
		for i := range pod.Spec.Volumes {
			v := &pod.Spec.Volumes[i]
			switch {
			case v.HostPath != nil:
				v.HostPath.Path = filepath.Join(hostDir, filepath.Clean("/"+v.HostPath.Path))
			case v.EmptyDir != nil:
				v.EmptyDir.Medium = corev1.StorageMediumDefault
			case v.Secret != nil || v.Projected != nil:
				v.VolumeSource = corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{}}
			}
		}
		b, err := json.Marshal(pod)
		if err != nil {
			return
		}
		resp, err := s.PrepareVolumes(context.Background(), &volumesv1.PrepareVolumesRequest{Pod: b, Container: container})
		defer func() {
			if pod.UID != "" && validName("pod uid", string(pod.UID)) == nil {
				if err := m.Release(context.Background(), pod.UID); err != nil {
					t.Errorf("release: %v", err)
				}
			}
			if mi, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(mi), dir) {
				t.Errorf("mounts left below %s after the release", dir)
			}
		}()
		switch status.Code(err) {
		case codes.OK:
		case codes.InvalidArgument, codes.FailedPrecondition, codes.Internal:
			if status.Convert(err).Message() == "" {
				t.Errorf("error without a message: %v", err)
			}
			return
		default:
			t.Fatalf("PrepareVolumes: unexpected %v", err)
		}
		podDir := filepath.Join(podsDir, string(pod.UID)) + "/"
		for _, cm := range resp.GetContainers() {
			if container != "" && cm.GetContainer() != container {
				t.Errorf("asked for container %q, got %q's mounts", container, cm.GetContainer())
			}
			for _, mt := range cm.GetMounts() {
				if p := mt.GetHostPath(); !strings.HasPrefix(p, podDir) && p != hostDir && !strings.HasPrefix(p, hostDir+"/") {
					t.Errorf("mount %s of container %s: host path %s outside the pod's directory and its host paths", mt.GetContainerPath(), cm.GetContainer(), p)
				}
			}
		}
	})
}
