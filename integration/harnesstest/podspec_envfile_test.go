package harnesstest

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"
)

// TestPodSpecEnvFromFileKeyRef: env[].valueFrom.fileKeyRef (EnvFiles, beta and on in
// v1.36) reads a key of an environment file an init container wrote into the pod's
// emptyDir, as the kubelet does: the app container's variable has the file's value, an
// optional key the file lacks is left out, and a required one keeps the container waiting
// in CreateContainerConfigError naming the key.
func TestPodSpecEnvFromFileKeyRef(t *testing.T) {
	t.Parallel()
	waitNodeReady(t, 90*time.Second)
	pod := func(name, key string, optional bool) *corev1.Pod {
		p := busyboxPod(name, `echo "token=${TOKEN-unset}"; while true; do sleep 1; done`)
		p.Spec.Volumes = []corev1.Volume{{Name: "cfg", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
		p.Spec.InitContainers = []corev1.Container{{
			Name: "write", Image: p.Spec.Containers[0].Image, ImagePullPolicy: corev1.PullNever,
			Command:      []string{"sh", "-c", `printf "# written by the init container\nTOKEN='from-init'\n" >/cfg/env`},
			VolumeMounts: []corev1.VolumeMount{{Name: "cfg", MountPath: "/cfg"}},
		}}
		p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "TOKEN", ValueFrom: &corev1.EnvVarSource{
			FileKeyRef: &corev1.FileKeySelector{VolumeName: "cfg", Path: "env", Key: key, Optional: ptr.To(optional)}}}}
		return p
	}
	createPod(t, pod("envfile", "TOKEN", false))
	createPod(t, pod("envfile-optional", "MISSING", true))
	createPod(t, pod("envfile-required", "MISSING", false))
	apiPodRunningReady(t, "envfile", time.Minute)
	// The last line: kubectl says first which container it chose.
	last := func(s string) string { l := strings.Split(strings.TrimSpace(s), "\n"); return l[len(l)-1] }
	if out := last(mustInPod(t, "envfile", "sh", "-c", "echo $TOKEN")); out != "from-init" {
		t.Errorf("TOKEN in the app container = %q, want from-init (the init container's file)", out)
	}
	apiPodRunningReady(t, "envfile-optional", time.Minute)
	if out := last(mustInPod(t, "envfile-optional", "sh", "-c", "echo ${TOKEN-unset}")); out != "unset" {
		t.Errorf("TOKEN from an optional missing key = %q, want it unset", out)
	}
	apiPodUntil(t, "envfile-required", "waiting in CreateContainerConfigError naming the key", time.Minute, func(p *corev1.Pod) bool {
		for _, cs := range p.Status.ContainerStatuses {
			if w := cs.State.Waiting; w != nil && w.Reason == "CreateContainerConfigError" && strings.Contains(w.Message, `environment variable key "MISSING" not found`) {
				return true
			}
		}
		return false
	})
}

// TestPodSpecImageVolume: an image volume (GA in v1.36) on a runtime that mounts images
// (containerd 2.x): the image's files are in the container, read-only, its subPath too;
// on containerd 1.6 the pod is refused naming the runtime.
func TestPodSpecImageVolume(t *testing.T) {
	t.Parallel()
	waitNodeReady(t, 90*time.Second)
	v, err := criClient(t).Runtime.Version(context.Background(), &runtimeapi.VersionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	p := busyboxPod("imagevol", "while true; do sleep 1; done")
	p.Spec.Volumes = []corev1.Volume{{Name: "tools", VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{
		Reference: p.Spec.Containers[0].Image, PullPolicy: corev1.PullNever}}}}
	p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "tools", MountPath: "/img"}, {Name: "tools", MountPath: "/imgbin", SubPath: "bin"}}
	createPod(t, p)
	if strings.HasPrefix(strings.TrimPrefix(v.RuntimeVersion, "v"), "1.") {
		want := "Pod was rejected: Failed to admit pod: spec.volumes[0].image: image volumes (the container runtime, " + v.RuntimeName + " " + v.RuntimeVersion +
			", does not mount images; containerd 2.1 or later does) are not supported by this node (unitlet)"
		apiPodUntil(t, "imagevol", "Failed, UnsupportedPodSpec naming the runtime", time.Minute, func(p *corev1.Pod) bool {
			return p.Status.Phase == corev1.PodFailed && p.Status.Reason == "UnsupportedPodSpec" && p.Status.Message == want
		})
		return
	}
	apiPodRunningReady(t, "imagevol", time.Minute)
	mustInPod(t, "imagevol", "test", "-x", "/img/bin/busybox")
	mustInPod(t, "imagevol", "test", "-x", "/imgbin/busybox")
	if out, err := inPod(t, "imagevol", "touch", "/img/x"); err == nil {
		t.Errorf("the image volume is writable: %s", out)
	}
}
