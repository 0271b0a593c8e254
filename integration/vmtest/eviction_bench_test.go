package vmtest

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BenchmarkEvictionMemoryCrossing (make bench-eviction): a BestEffort pod writes 300 MiB into
// a memory-backed emptyDir in one write, past a hard memory.available threshold 200 MiB below
// what the node had; five runs. Per run, in the guest's clock: from the start of the write
// (the crossing happens during it, so this over-states the delay) to the eviction
// unitlet-eviction recorded, to the pod's Failed status in the API (its DisruptionTarget
// condition's time, whole seconds), and to MemoryPressure's transition on the Node (whole
// seconds). Then unitlet-eviction's RSS and CPU over the benchmark. The vm node runs with
// kernelMemcgNotification: true (a 1 s sampler on cgroup v2).
func BenchmarkEvictionMemoryCrossing(b *testing.B) {
	node := vmNode(b).Name
	c := admin(b)
	avail := min(available(b, node, "memory.available"), available(b, node, "allocatableMemory.available"))
	threshold := (avail - 200*mi) / mi
	evictionConfig(b, node, fmt.Sprintf("evictionHard: {memory.available: %dMi}\nevictionPressureTransitionPeriod: 10s\n", threshold),
		"memory.available", fmt.Sprintf("%dMi", threshold))
	pid := stack.InNode(b, node, "systemctl", "show", "-p", "MainPID", "--value", "unitlet-eviction")
	cpu0 := guestCPUSeconds(b, node, pid)
	t0 := time.Now()

	var toEvict, toAPI, toCondition []float64
	for run := range 5 {
		name := fmt.Sprintf("ev-bench-%d", run)
		// The times go to a hostPath file: an evicted pod's log may be gone with its container.
		p := vmPod(name, map[string]string{"hog": `s=$(cut -d' ' -f1 /proc/uptime); dd if=/dev/zero of=/fill/f bs=300M count=1 2>/dev/null; echo "start=$s end=$(cut -d' ' -f1 /proc/uptime)" > /times/` + name + `; exec sleep 100000`})
		dirOrCreate := corev1.HostPathDirectoryOrCreate
		p.Spec.Volumes = []corev1.Volume{
			{Name: "fill", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}},
			{Name: "times", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var/tmp/ev-bench", Type: &dirOrCreate}}},
		}
		p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "fill", MountPath: "/fill"}, {Name: "times", MountPath: "/times"}}
		if _, err := c.CoreV1().Pods("default").Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		evicted := waitEvicted(b, "default", name, 4*time.Minute)
		// busybox's date has no sub-second field: the pod writes the guest's uptime, made
		// wall-clock time here with the guest's own offset between the two.
		start := bootTime(b, node).Add(time.Duration(float64(time.Second) * uptimeAt(b, stack.InNode(b, node, "cat", "/var/tmp/ev-bench/"+name), "start=")))
		evs := evictionsOf(evictionState(b, node), name)
		if len(evs) != 1 {
			b.Fatalf("%s: evictions %v", name, evs)
		}
		toEvict = append(toEvict, evs[0].GetTime().AsTime().Sub(start).Seconds())
		for _, cond := range evicted.Status.Conditions {
			if cond.Type == corev1.DisruptionTarget {
				toAPI = append(toAPI, cond.LastTransitionTime.Sub(start).Seconds())
			}
		}
		cond := nodeCondition(b, node, corev1.NodeMemoryPressure)
		toCondition = append(toCondition, cond.LastTransitionTime.Sub(start).Seconds())
		_ = c.CoreV1().Pods("default").Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
		waitCondition(b, node, corev1.NodeMemoryPressure, corev1.ConditionFalse, 2*time.Minute)
	}
	cpu := (guestCPUSeconds(b, node, pid) - cpu0) / time.Since(t0).Seconds()
	rss := stack.InNode(b, node, "sh", "-c", "grep VmRSS /proc/"+pid+"/status")
	b.ReportMetric(median(toEvict), "crossing-to-eviction-p50-s")
	b.ReportMetric(median(toAPI), "crossing-to-pod-failed-in-api-p50-s")
	b.ReportMetric(median(toCondition), "crossing-to-MemoryPressure-in-api-p50-s")
	b.ReportMetric(cpu*100, "eviction-cpu-%")
	fmt.Printf("== eviction on a memory crossing (vm node, 5 runs)\n"+
		"crossing → eviction (s, upper bound): %v\ncrossing → pod Failed in the API (s, whole seconds): %v\ncrossing → MemoryPressure on the Node (s, whole seconds): %v\n"+
		"unitlet-eviction: %s, CPU %.2f%% of a core over %s\n",
		round(toEvict), round(toAPI), round(toCondition), strings.TrimSpace(rss), cpu*100, time.Since(t0).Round(time.Second))
}

// uptimeAt reads the seconds after key (e.g. "start=123.45") from text.
func uptimeAt(b testing.TB, text, key string) float64 {
	b.Helper()
	i := strings.Index(text, key)
	if i < 0 {
		b.Fatalf("no %s in %q", key, text)
	}
	f := strings.Fields(text[i+len(key):])
	if len(f) == 0 {
		b.Fatalf("no seconds after %s in %q", key, text)
	}
	sec, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		b.Fatalf("%s%s: %v", key, f[0], err)
	}
	return sec
}

// bootTime is the guest's wall-clock time at uptime 0.
func bootTime(b testing.TB, node string) time.Time {
	b.Helper()
	f := strings.Fields(stack.InNode(b, node, "sh", "-c", "date +%s.%N; cut -d' ' -f1 /proc/uptime"))
	if len(f) != 2 {
		b.Fatalf("date and uptime in the guest: %q", f)
	}
	wall, err1 := strconv.ParseFloat(f[0], 64)
	up, err2 := strconv.ParseFloat(f[1], 64)
	if err1 != nil || err2 != nil {
		b.Fatalf("date and uptime in the guest: %q", f)
	}
	return time.Unix(0, int64((wall-up)*1e9))
}

// guestCPUSeconds is the user+system CPU time of a process in the guest.
func guestCPUSeconds(b testing.TB, node, pid string) float64 {
	b.Helper()
	f := strings.Fields(stack.InNode(b, node, "cat", "/proc/"+pid+"/stat"))
	if len(f) < 15 {
		b.Fatalf("/proc/%s/stat: %v", pid, f)
	}
	ut, _ := strconv.ParseFloat(f[13], 64)
	st, _ := strconv.ParseFloat(f[14], 64)
	return (ut + st) / 100
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}

func round(v []float64) []string {
	out := make([]string, len(v))
	for i, x := range v {
		out[i] = strconv.FormatFloat(x, 'f', 2, 64)
	}
	return out
}
