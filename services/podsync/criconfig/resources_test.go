package criconfig

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestCPUShares(t *testing.T) {
	tests := []struct{ milli, want int64 }{
		{0, 2}, {1, 2}, {2, 2}, {3, 3}, {10, 10}, {100, 102}, {250, 256}, {500, 512},
		{1000, 1024}, {1500, 1536}, {256000, 262144}, {300000, 262144},
	}
	for _, tt := range tests {
		if got := CPUShares(tt.milli); got != tt.want {
			t.Errorf("CPUShares(%d) = %d, want %d", tt.milli, got, tt.want)
		}
	}
}

func TestCPUQuota(t *testing.T) {
	tests := []struct{ milli, want int64 }{
		{0, 0}, {1, 1000}, {5, 1000}, {10, 1000}, {11, 1100}, {100, 10000}, {250, 25000},
		{1000, 100000}, {2500, 250000},
	}
	for _, tt := range tests {
		if got := CPUQuota(tt.milli, 100000); got != tt.want {
			t.Errorf("CPUQuota(%d) = %d, want %d", tt.milli, got, tt.want)
		}
	}
}

func TestContainerResources(t *testing.T) {
	const gi = int64(1) << 30
	tests := []struct {
		name     string
		res      corev1.ResourceRequirements
		podLevel *corev1.ResourceRequirements
		want     *runtimeapi.LinuxContainerResources
	}{
		{"best effort", corev1.ResourceRequirements{},
			nil, &runtimeapi.LinuxContainerResources{CpuShares: 2, CpuPeriod: 100000, OomScoreAdj: 1000}},
		{"request only", corev1.ResourceRequirements{Requests: rl("cpu", "250m", "memory", "1Gi")},
			nil, &runtimeapi.LinuxContainerResources{CpuShares: 256, CpuPeriod: 100000, OomScoreAdj: 938}},
		{"limit only: shares from limit", corev1.ResourceRequirements{Limits: rl("cpu", "500m")},
			nil, &runtimeapi.LinuxContainerResources{CpuShares: 512, CpuPeriod: 100000, CpuQuota: 50000, OomScoreAdj: 999}},
		{"explicit zero request keeps minimum shares", corev1.ResourceRequirements{Requests: rl("cpu", "0"), Limits: rl("cpu", "2")},
			nil, &runtimeapi.LinuxContainerResources{CpuShares: 2, CpuPeriod: 100000, CpuQuota: 200000, OomScoreAdj: 999}},
		{"guaranteed", corev1.ResourceRequirements{Requests: rl("cpu", "1", "memory", "512Mi"), Limits: rl("cpu", "1", "memory", "512Mi")},
			nil, &runtimeapi.LinuxContainerResources{CpuShares: 1024, CpuPeriod: 100000, CpuQuota: 100000, MemoryLimitInBytes: 512 << 20, OomScoreAdj: -997}},
		{"pod-level limits fill in", corev1.ResourceRequirements{Requests: rl("cpu", "100m")},
			&corev1.ResourceRequirements{Limits: rl("cpu", "2", "memory", "1Gi")},
			&runtimeapi.LinuxContainerResources{CpuShares: 102, CpuPeriod: 100000, CpuQuota: 200000, MemoryLimitInBytes: gi, OomScoreAdj: 999}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := testPod()
			pod.Spec.Containers[0].Resources = tt.res
			pod.Spec.Resources = tt.podLevel
			got := containerResources(pod, &pod.Spec.Containers[0], Options{MemoryCapacity: 16 * gi})
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("containerResources =\n %v\nwant\n %v", got, tt.want)
			}
			// On cgroup v2 without singleProcessOOMKill, the whole container is killed.
			got = containerResources(pod, &pod.Spec.Containers[0], Options{MemoryCapacity: 16 * gi, OOMKillGroup: true})
			if got.Unified["memory.oom.group"] != "1" || len(got.Unified) != 1 {
				t.Errorf("with OOMKillGroup: unified %v, want memory.oom.group 1", got.Unified)
			}
		})
	}
}

func TestQOSClass(t *testing.T) {
	tests := []struct {
		name string
		cs   []corev1.ResourceRequirements
		pod  *corev1.ResourceRequirements
		want corev1.PodQOSClass
	}{
		{"nothing", []corev1.ResourceRequirements{{}}, nil, corev1.PodQOSBestEffort},
		{"only extended resource", []corev1.ResourceRequirements{{Limits: rl("example.com/gpu", "1")}}, nil, corev1.PodQOSBestEffort},
		{"equal requests and limits", []corev1.ResourceRequirements{
			{Requests: rl("cpu", "1", "memory", "1Gi"), Limits: rl("cpu", "1", "memory", "1Gi")},
			{Requests: rl("cpu", "200m", "memory", "10Mi"), Limits: rl("cpu", "200m", "memory", "10Mi")},
		}, nil, corev1.PodQOSGuaranteed},
		{"one container without limits", []corev1.ResourceRequirements{
			{Requests: rl("cpu", "1", "memory", "1Gi"), Limits: rl("cpu", "1", "memory", "1Gi")}, {},
		}, nil, corev1.PodQOSBurstable},
		{"memory only", []corev1.ResourceRequirements{{Requests: rl("memory", "1Gi"), Limits: rl("memory", "1Gi")}}, nil, corev1.PodQOSBurstable},
		{"pod-level guaranteed", []corev1.ResourceRequirements{{}},
			&corev1.ResourceRequirements{Requests: rl("cpu", "1", "memory", "1Gi"), Limits: rl("cpu", "1", "memory", "1Gi")}, corev1.PodQOSGuaranteed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := testPod()
			pod.Spec.Containers = nil
			for i, r := range tt.cs {
				pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: string(rune('a' + i)), Resources: r})
			}
			pod.Spec.Resources = tt.pod
			if got := QOSClass(pod); got != tt.want {
				t.Errorf("QOSClass = %s, want %s", got, tt.want)
			}
		})
	}
	pod := testPod()
	pod.Status.QOSClass = corev1.PodQOSGuaranteed
	if got := QOSClass(pod); got != corev1.PodQOSGuaranteed {
		t.Errorf("status.qosClass not used: %s", got)
	}
}

func TestOOMScoreAdj(t *testing.T) {
	const capacity = int64(10) << 30
	tests := []struct {
		name   string
		mutate func(*corev1.Pod)
		want   int64
	}{
		{"best effort", nil, 1000},
		{"guaranteed", func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: rl("cpu", "1", "memory", "1Gi"), Limits: rl("cpu", "1", "memory", "1Gi")}
		}, -997},
		{"burstable 10% of memory", func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: rl("memory", "1Gi")}
		}, 900},
		{"burstable tiny request", func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: rl("cpu", "10m")}
		}, 999},
		{"burstable huge request floored", func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: rl("memory", "10Gi")}
		}, 3},
		{"static node-critical", func(p *corev1.Pod) {
			p.Annotations[annotationConfigSource] = "file"
			p.Spec.PriorityClassName = "system-node-critical"
		}, -997},
		{"node-critical class without priority is not critical", func(p *corev1.Pod) {
			p.Spec.PriorityClassName = "system-node-critical"
		}, 1000},
		{"sidecar follows smallest regular container", func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: rl("memory", "2Gi")}
			p.Spec.InitContainers = []corev1.Container{{Name: "proxy", RestartPolicy: ptrTo(corev1.ContainerRestartPolicyAlways),
				Resources: corev1.ResourceRequirements{Requests: rl("memory", "100Mi")}}}
		}, 800},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := testPod()
			if tt.mutate != nil {
				tt.mutate(pod)
			}
			c := &pod.Spec.Containers[0]
			if len(pod.Spec.InitContainers) > 0 {
				c = &pod.Spec.InitContainers[0]
			}
			if got := OOMScoreAdj(pod, c, capacity); got != tt.want {
				t.Errorf("OOMScoreAdj = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestHugepageLimits(t *testing.T) {
	pod := testPod()
	c := &pod.Spec.Containers[0]
	c.Resources.Limits = rl("hugepages-2Mi", "100Mi", "memory", "1Gi")
	got := hugepageLimits(pod, c, []string{"2MB", "1GB"})
	want := []*runtimeapi.HugepageLimit{{PageSize: "2MB", Limit: 100 << 20}, {PageSize: "1GB", Limit: 0}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("hugepageLimits = %v, want %v", got, want)
	}
	for in, want := range map[int64]string{2 << 20: "2MB", 1 << 30: "1GB", 64 << 10: "64KB", 1000: "1000B"} {
		if got, ok := pageSizeString(in); !ok || got != want {
			t.Errorf("pageSizeString(%d) = %q, %v; want %q", in, got, ok, want)
		}
	}
	if _, err := HostHugePageSizes(); err != nil {
		t.Errorf("HostHugePageSizes: %v", err)
	}
}
