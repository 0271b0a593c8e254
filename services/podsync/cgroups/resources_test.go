package cgroups

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// The kubelet's own numbers (pkg/kubelet/cm helpers and their tests, v1.36.3).
func TestMilliCPUToShares(t *testing.T) {
	for _, tt := range []struct {
		milli int64
		want  uint64
	}{
		{0, 2}, {-5, 2}, {1, 2}, {2, 2}, {100, 102}, {250, 256}, {1000, 1024}, {2500, 2560},
		{256000, 262144}, {300000, 262144},
	} {
		if got := MilliCPUToShares(tt.milli); got != tt.want {
			t.Errorf("MilliCPUToShares(%d) = %d, want %d", tt.milli, got, tt.want)
		}
	}
}

func TestMilliCPUToQuota(t *testing.T) {
	for _, tt := range []struct {
		milli, period, want int64
	}{
		{0, 100000, 0}, {5, 100000, 1000}, {9, 100000, 1000}, {10, 100000, 1000}, {200, 100000, 20000},
		{500, 100000, 50000}, {1000, 100000, 100000}, {1500, 100000, 150000},
		{1000, 50000, 50000}, {15, 50000, 1000}, {250, 10000, 2500},
	} {
		if got := MilliCPUToQuota(tt.milli, tt.period); got != tt.want {
			t.Errorf("MilliCPUToQuota(%d, %d) = %d, want %d", tt.milli, tt.period, got, tt.want)
		}
	}
}

func TestSharesToWeight(t *testing.T) {
	for _, tt := range []struct {
		shares, want uint64
	}{
		{0, 1}, {1, 1}, {2, 1}, {28, 1}, {102, 4}, {512, 20}, {1024, 39}, {6398, 244},
		{262143, 9999}, {262144, 10000}, {300000, 10000},
	} {
		if got := SharesToWeight(tt.shares); got != tt.want {
			t.Errorf("SharesToWeight(%d) = %d, want %d", tt.shares, got, tt.want)
		}
	}
}

func TestHugePageUnit(t *testing.T) {
	for size, want := range map[int64]string{2 << 20: "2MB", 1 << 30: "1GB", 64 << 10: "64KB", 16 << 30: "16GB", 1000: "1000B"} {
		if got := hugePageUnit(size); got != want {
			t.Errorf("hugePageUnit(%d) = %q, want %q", size, got, want)
		}
	}
}

const (
	mi = int64(1) << 20
	gi = int64(1) << 30
)

func TestPodResources(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	tests := []struct {
		name     string
		pod      *corev1.Pod
		qos      corev1.PodQOSClass
		enforce  bool
		period   uint64
		pids     int64
		hugeHost []int64
		want     Resources
	}{{
		name: "Guaranteed sums its containers",
		pod:  pod(ctr("a", "cpu=500m,memory=128Mi", "cpu=500m,memory=128Mi"), ctr("b", "cpu=500m,memory=128Mi", "cpu=500m,memory=128Mi")),
		qos:  corev1.PodQOSGuaranteed, enforce: true, period: 100000,
		want: Resources{CPUShares: ptr[uint64](1024), CPUQuota: ptr[int64](100000), CPUPeriod: ptr[uint64](100000), Memory: ptr(256 * mi), HugePages: map[int64]int64{}},
	}, {
		name: "Burstable with every limit declared",
		pod:  pod(ctr("a", "cpu=100m,memory=64Mi", "cpu=200m,memory=128Mi"), ctr("b", "cpu=100m", "cpu=300m,memory=64Mi")),
		qos:  corev1.PodQOSBurstable, enforce: true, period: 100000,
		want: Resources{CPUShares: ptr[uint64](204), CPUQuota: ptr[int64](50000), CPUPeriod: ptr[uint64](100000), Memory: ptr(192 * mi), HugePages: map[int64]int64{}},
	}, {
		name: "Burstable with a container missing each limit gets neither",
		pod:  pod(ctr("a", "cpu=100m,memory=64Mi", "cpu=200m"), ctr("b", "cpu=300m", "memory=64Mi")),
		qos:  corev1.PodQOSBurstable, enforce: true, period: 100000,
		want: Resources{CPUShares: ptr[uint64](409), HugePages: map[int64]int64{}},
	}, {
		name: "BestEffort gets only the minimum shares, and 0 for each host page size",
		pod:  pod(ctr("a", "", "")),
		qos:  corev1.PodQOSBestEffort, enforce: true, period: 100000, hugeHost: []int64{2 * mi, gi},
		want: Resources{CPUShares: ptr[uint64](2), HugePages: map[int64]int64{2 * mi: 0, gi: 0}},
	}, {
		name: "an init container larger than the app containers sets the pod",
		pod: withInit(pod(ctr("app", "cpu=500m,memory=256Mi", "cpu=500m,memory=256Mi")),
			ctr("init", "cpu=2,memory=1Gi", "cpu=2,memory=1Gi")),
		qos: corev1.PodQOSGuaranteed, enforce: true, period: 100000,
		want: Resources{CPUShares: ptr[uint64](2048), CPUQuota: ptr[int64](200000), CPUPeriod: ptr[uint64](100000), Memory: ptr(gi), HugePages: map[int64]int64{}},
	}, {
		name: "a native sidecar adds to the app containers and to later init containers",
		pod: withInit(pod(ctr("app", "cpu=500m,memory=256Mi", "cpu=500m,memory=256Mi")),
			restart(ctr("sidecar", "cpu=200m,memory=64Mi", "cpu=200m,memory=64Mi"), always),
			ctr("init", "cpu=600m,memory=128Mi", "cpu=600m,memory=128Mi")),
		qos: corev1.PodQOSGuaranteed, enforce: true, period: 100000,
		// cpu: max(500+200, 600+200) = 800m; memory: max(256+64, 128+64) = 320Mi.
		want: Resources{CPUShares: ptr[uint64](819), CPUQuota: ptr[int64](80000), CPUPeriod: ptr[uint64](100000), Memory: ptr(320 * mi), HugePages: map[int64]int64{}},
	}, {
		name: "pod overhead is added",
		pod:  withOverhead(pod(ctr("a", "cpu=1,memory=1Gi", "cpu=1,memory=1Gi")), "cpu=250m,memory=120Mi"),
		qos:  corev1.PodQOSGuaranteed, enforce: true, period: 100000,
		want: Resources{CPUShares: ptr[uint64](1280), CPUQuota: ptr[int64](125000), CPUPeriod: ptr[uint64](100000), Memory: ptr(gi + 120*mi), HugePages: map[int64]int64{}},
	}, {
		name: "pod-level resources stand for containers without limits",
		pod:  withPodLevel(pod(ctr("a", "", ""), ctr("b", "", "")), "cpu=1,memory=512Mi", "cpu=2,memory=1Gi"),
		qos:  corev1.PodQOSBurstable, enforce: true, period: 100000,
		want: Resources{CPUShares: ptr[uint64](1024), CPUQuota: ptr[int64](200000), CPUPeriod: ptr[uint64](100000), Memory: ptr(gi), HugePages: map[int64]int64{}},
	}, {
		name: "a pod-level memory limit alone gives no CPU quota",
		pod:  withPodLevel(pod(ctr("a", "cpu=100m", "")), "memory=256Mi", "memory=512Mi"),
		qos:  corev1.PodQOSBurstable, enforce: true, period: 100000,
		want: Resources{CPUShares: ptr[uint64](102), Memory: ptr(512 * mi), HugePages: map[int64]int64{}},
	}, {
		name: "without enforceCPULimits the quota is unlimited",
		pod:  pod(ctr("a", "cpu=1,memory=1Gi", "cpu=1,memory=1Gi")),
		qos:  corev1.PodQOSGuaranteed, enforce: false, period: 100000,
		want: Resources{CPUShares: ptr[uint64](1024), CPUQuota: ptr[int64](-1), CPUPeriod: ptr[uint64](100000), Memory: ptr(gi), HugePages: map[int64]int64{}},
	}, {
		name: "cpuCFSQuotaPeriod is used as given",
		pod:  pod(ctr("a", "cpu=1,memory=1Gi", "cpu=1,memory=1Gi")),
		qos:  corev1.PodQOSGuaranteed, enforce: true, period: 50000,
		want: Resources{CPUShares: ptr[uint64](1024), CPUQuota: ptr[int64](50000), CPUPeriod: ptr[uint64](50000), Memory: ptr(gi), HugePages: map[int64]int64{}},
	}, {
		name: "podPidsLimit",
		pod:  pod(ctr("a", "cpu=100m", "")),
		qos:  corev1.PodQOSBurstable, enforce: true, period: 100000, pids: 1024,
		want: Resources{CPUShares: ptr[uint64](102), PidsLimit: ptr[int64](1024), HugePages: map[int64]int64{}},
	}, {
		name: "a negative podPidsLimit sets nothing",
		pod:  pod(ctr("a", "cpu=100m", "")),
		qos:  corev1.PodQOSBurstable, enforce: true, period: 100000, pids: -1,
		want: Resources{CPUShares: ptr[uint64](102), HugePages: map[int64]int64{}},
	}, {
		name: "hugepages requested, and 0 for the other host size",
		pod: pod(ctr("a", "cpu=1,memory=1Gi,hugepages-2Mi=4Mi", "cpu=1,memory=1Gi,hugepages-2Mi=4Mi"),
			ctr("b", "cpu=1,memory=1Gi,hugepages-2Mi=2Mi", "cpu=1,memory=1Gi,hugepages-2Mi=2Mi")),
		qos: corev1.PodQOSGuaranteed, enforce: true, period: 100000, hugeHost: []int64{2 * mi, gi},
		want: Resources{CPUShares: ptr[uint64](2048), CPUQuota: ptr[int64](200000), CPUPeriod: ptr[uint64](100000), Memory: ptr(2 * gi),
			HugePages: map[int64]int64{2 * mi: 6 * mi, gi: 0}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := PodResources(tt.pod, tt.qos, tt.enforce, tt.period, tt.pids, tt.hugeHost)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("PodResources\n got %s\nwant %s", show(got), show(tt.want))
			}
		})
	}
}

func TestAllocatableResources(t *testing.T) {
	rl := list("cpu=3500m,memory=7Gi,pid=4096,hugepages-2Mi=128Mi,hugepages-1Gi=0,ephemeral-storage=10Gi")
	want := Resources{Memory: ptr(7 * gi), CPUShares: ptr[uint64](3584), PidsLimit: ptr[int64](4096),
		HugePages: map[int64]int64{2 * mi: 128 * mi, gi: 0}}
	if got := AllocatableResources(rl); !reflect.DeepEqual(got, want) {
		t.Errorf("AllocatableResources\n got %s\nwant %s", show(got), show(want))
	}
	if got := AllocatableResources(nil); !reflect.DeepEqual(got, Resources{}) {
		t.Errorf("AllocatableResources(nil) = %s, want nothing set", show(got))
	}
}

func ptr[T any](v T) *T { return &v }

// list parses "cpu=1,memory=1Gi" into a ResourceList; "" is none.
func list(s string) corev1.ResourceList {
	if s == "" {
		return nil
	}
	out := corev1.ResourceList{}
	for _, kv := range strings.Split(s, ",") {
		k, v, _ := strings.Cut(kv, "=")
		out[corev1.ResourceName(k)] = resource.MustParse(v)
	}
	return out
}

func ctr(name, requests, limits string) corev1.Container {
	return corev1.Container{Name: name, Resources: corev1.ResourceRequirements{Requests: list(requests), Limits: list(limits)}}
}

func restart(c corev1.Container, p corev1.ContainerRestartPolicy) corev1.Container {
	c.RestartPolicy = &p
	return c
}

func pod(cs ...corev1.Container) *corev1.Pod {
	return &corev1.Pod{Spec: corev1.PodSpec{Containers: cs}}
}

func withInit(p *corev1.Pod, cs ...corev1.Container) *corev1.Pod {
	p.Spec.InitContainers = cs
	return p
}

func withOverhead(p *corev1.Pod, overhead string) *corev1.Pod {
	p.Spec.Overhead = list(overhead)
	return p
}

func withPodLevel(p *corev1.Pod, requests, limits string) *corev1.Pod {
	p.Spec.Resources = &corev1.ResourceRequirements{Requests: list(requests), Limits: list(limits)}
	return p
}

// show prints Resources with the values behind the pointers.
func show(r Resources) string {
	val := func(p any) string {
		v := reflect.ValueOf(p)
		if v.IsNil() {
			return "nil"
		}
		return fmt.Sprint(v.Elem().Interface())
	}
	var hp []string
	for _, k := range slices.Sorted(maps.Keys(r.HugePages)) {
		hp = append(hp, fmt.Sprintf("%d:%d", k, r.HugePages[k]))
	}
	return fmt.Sprintf("{Memory:%s CPUShares:%s CPUQuota:%s CPUPeriod:%s PidsLimit:%s HugePages:%v(nil=%t)}",
		val(r.Memory), val(r.CPUShares), val(r.CPUQuota), val(r.CPUPeriod), val(r.PidsLimit), hp, r.HugePages == nil)
}
