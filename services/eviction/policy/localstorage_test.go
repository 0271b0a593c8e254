package policy

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestLocalStorageViolations(t *testing.T) {
	sidecar := corev1.ContainerRestartPolicyAlways
	two := func(p *corev1.Pod) {
		p.Spec.Containers = []corev1.Container{
			{Name: "a", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"ephemeral-storage": q("1Gi")}}},
			{Name: "b", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"ephemeral-storage": q("2Gi")}}},
		}
	}
	tests := []struct {
		name   string
		pod    PodStats
		layout FsLayout
		kind   string
		msg    string
	}{
		{
			name: "emptyDir over its size limit",
			pod: PodStats{Pod: newPod("p", volume(emptyDir("small", "", "1Mi")), volume(emptyDir("cache", "", "1Gi")), volume(emptyDir("ram", corev1.StorageMediumMemory, "1Gi"))),
				Volumes: map[string]int64{"small": 1 << 20, "cache": 1<<30 + 1, "ram": 2 << 30}},
			kind: ViolationEmptyDir,
			msg:  `Usage of EmptyDir volume "cache" exceeds the limit "1Gi". `,
		},
		{
			name: "memory emptyDir over its size limit",
			pod:  PodStats{Pod: newPod("p", volume(emptyDir("ram", corev1.StorageMediumMemory, "64Mi"))), Volumes: map[string]int64{"ram": 65 << 20}},
			kind: ViolationEmptyDir,
			msg:  `Usage of EmptyDir volume "ram" exceeds the limit "64Mi". `,
		},
		{
			name: "emptyDir at its size limit, unmeasured, or without one",
			pod: PodStats{Pod: newPod("p", volume(emptyDir("at", "", "1Mi")), volume(emptyDir("unmeasured", "", "1Mi")), volume(emptyDir("unlimited", "", ""))),
				Volumes: map[string]int64{"at": 1 << 20, "unlimited": 1 << 40}},
		},
		{
			name: "pod over its containers' total, as measured",
			pod:  PodStats{Pod: newPod("p", two), EphemeralStorage: ptr(int64(3<<30 + 1)), Containers: []ContainerUsage{{Name: "a"}, {Name: "b"}}},
			kind: ViolationPod,
			msg:  "Pod ephemeral local storage usage exceeds the total limit of containers 3Gi. ",
		},
		{
			name: "pod at its containers' total",
			pod:  PodStats{Pod: newPod("p", two), EphemeralStorage: ptr(int64(3 << 30))},
		},
		{
			name: "pod total computed from containers and local ephemeral volumes",
			pod: PodStats{Pod: newPod("p", two, volume(emptyDir("scratch", "", "")), volume(emptyDir("ram", corev1.StorageMediumMemory, ""))),
				Containers: []ContainerUsage{{Name: "a", Rootfs: 512 << 20, Logs: 1}, {Name: "b", Rootfs: 1 << 30}},
				Volumes:    map[string]int64{"scratch": 1536 << 20, "ram": 1 << 40}},
			kind: ViolationPod,
			msg:  "Pod ephemeral local storage usage exceeds the total limit of containers 3Gi. ",
		},
		{
			name: "a sidecar's limit adds to the pod's",
			pod: PodStats{Pod: newPod("p", two, func(p *corev1.Pod) {
				p.Spec.InitContainers = []corev1.Container{{Name: "s", RestartPolicy: &sidecar, Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"ephemeral-storage": q("1Gi")}}}}
			}), EphemeralStorage: ptr(int64(3<<30 + 1))},
		},
		{
			name: "no ephemeral-storage limit",
			pod:  PodStats{Pod: newPod("p"), EphemeralStorage: ptr(int64(1 << 50)), Containers: []ContainerUsage{{Name: "app", Rootfs: 1 << 50}}},
		},
		{
			name: "container over its limit with its writable layer",
			pod:  PodStats{Pod: newPod("p", two), EphemeralStorage: ptr(int64(0)), Containers: []ContainerUsage{{Name: "b", Rootfs: 1 << 30, Logs: 1 << 30}, {Name: "a", Rootfs: 1 << 30, Logs: 1}}},
			kind: ViolationContainer,
			msg:  `Container a exceeded its local ephemeral storage limit "1Gi". `,
		},
		{
			name:   "with a dedicated image filesystem only logs count",
			pod:    PodStats{Pod: newPod("p", two), EphemeralStorage: ptr(int64(0)), Containers: []ContainerUsage{{Name: "a", Rootfs: 1 << 30, Logs: 1}}},
			layout: FsLayout{DedicatedImageFs: true},
		},
		{
			name:   "logs alone over the limit",
			pod:    PodStats{Pod: newPod("p", two), EphemeralStorage: ptr(int64(0)), Containers: []ContainerUsage{{Name: "a", Logs: 1<<30 + 1}}},
			layout: FsLayout{DedicatedImageFs: true},
			kind:   ViolationContainer,
			msg:    `Container a exceeded its local ephemeral storage limit "1Gi". `,
		},
		{
			name: "an init container's limit is not checked on its own",
			pod: PodStats{Pod: newPod("p", func(p *corev1.Pod) {
				p.Spec.InitContainers = []corev1.Container{{Name: "i", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"ephemeral-storage": q("1Mi")}}}}
			}), EphemeralStorage: ptr(int64(0)), Containers: []ContainerUsage{{Name: "i", Rootfs: 1 << 30}}},
		},
		{
			name: "emptyDir is reported before the pod and the container",
			pod: PodStats{Pod: newPod("p", two, volume(emptyDir("cache", "", "1Ki"))), Volumes: map[string]int64{"cache": 1 << 40},
				Containers: []ContainerUsage{{Name: "a", Rootfs: 1 << 40}}},
			kind: ViolationEmptyDir,
			msg:  `Usage of EmptyDir volume "cache" exceeds the limit "1Ki". `,
		},
		{
			name: "the pod before the container",
			pod:  PodStats{Pod: newPod("p", two), Containers: []ContainerUsage{{Name: "a", Rootfs: 1 << 40}}},
			kind: ViolationPod,
			msg:  "Pod ephemeral local storage usage exceeds the total limit of containers 3Gi. ",
		},
		{
			name: "critical pods are not evicted",
			pod:  PodStats{Pod: newPod("p", two, priority(2000000000)), Containers: []ContainerUsage{{Name: "a", Rootfs: 1 << 40}}},
		},
		{
			name: "static pods are not evicted",
			pod:  PodStats{Pod: newPod("p", two), Static: true, Containers: []ContainerUsage{{Name: "a", Rootfs: 1 << 40}}},
		},
		{
			name: "pods without stats are skipped",
			pod:  PodStats{Pod: newPod("p", two), NoStats: true, Containers: []ContainerUsage{{Name: "a", Rootfs: 1 << 40}}},
		},
		{
			name: "entries without a pod are skipped",
			pod:  PodStats{Containers: []ContainerUsage{{Name: "a", Rootfs: 1 << 40}}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := LocalStorageViolations([]PodStats{tc.pod}, tc.layout)
			if tc.kind == "" {
				if len(got) != 0 {
					t.Fatalf("violations %+v", got)
				}
				return
			}
			if len(got) != 1 {
				t.Fatalf("%d violations, want 1: %+v", len(got), got)
			}
			v := got[0]
			if v.Kind != tc.kind || v.Message != tc.msg || v.Annotations != nil || v.Pod.Pod != tc.pod.Pod {
				t.Errorf("violation %s %q %v, want %s %q", v.Kind, v.Message, v.Annotations, tc.kind, tc.msg)
			}
		})
	}
}

func TestLocalStorageViolationsEveryPod(t *testing.T) {
	over := func(name string) PodStats {
		return PodStats{Pod: newPod(name, volume(emptyDir("d", "", "1"))), Volumes: map[string]int64{"d": 2}}
	}
	pods := []PodStats{over("z"), {Pod: newPod("fine")}, over("a")}
	got := LocalStorageViolations(pods, FsLayout{})
	if len(got) != 2 || got[0].Pod.Pod.Name != "z" || got[1].Pod.Pod.Name != "a" {
		t.Errorf("violations %+v", got)
	}
}
