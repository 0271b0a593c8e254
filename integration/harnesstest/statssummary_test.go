package harnesstest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	podsyncv1 "github.com/unitlet/unitlet/proto/unitlet/podsync/v1"
)

// A pod with an emptyDir holding a 10 MiB file, a configMap and a secret volume, which
// writes to its log, shows in /stats/summary (read through the API server's node proxy,
// as metrics-server and kubectl get --raw read it) with its volumes' usage, its ephemeral
// storage and its container's logs; the node has its kubelet and pods system containers
// and its network.
func TestStatsSummaryVolumesLogsAndSystemContainers(t *testing.T) {
	t.Parallel()
	waitNodeReady(t, 90*time.Second)
	c := admin(t)
	cms, secrets := c.CoreV1().ConfigMaps("default"), c.CoreV1().Secrets("default")
	createObject(t, cms.Create, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "summary-cm"}, Data: map[string]string{"a": strings.Repeat("A", 8192)}}, cms.Delete, "summary-cm")
	createObject(t, secrets.Create, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "summary-secret"}, Data: map[string][]byte{"password": []byte(strings.Repeat("s", 4096))}}, secrets.Delete, "summary-secret")

	const tenMiB = 10 << 20
	p := busyboxPod("summary-vols", "dd if=/dev/zero of=/scratch/ten bs=1048576 count=10 && sync && "+
		"i=0; while [ $i -lt 2000 ]; do echo summary log line $i; i=$((i+1)); done; while true; do sleep 1; done")
	p.Spec.Volumes = []corev1.Volume{
		{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: "cm", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "summary-cm"}}}},
		{Name: "secret", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "summary-secret"}}},
	}
	p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{
		{Name: "scratch", MountPath: "/scratch"}, {Name: "cm", MountPath: "/cm"}, {Name: "secret", MountPath: "/secret"},
	}
	created := createPod(t, p)
	waitPod(t, 2*time.Minute, "default/summary-vols", "running", func(_ *podsyncv1.Pod, st corev1.PodStatus) bool { return st.Phase == corev1.PodRunning })

	// The volumes are measured every 30 s and the summary collected every 10 s.
	var summary statsv1alpha1.Summary
	var pod *statsv1alpha1.PodStats
	stack.WaitFor(t, 2*time.Minute, "summary-vols with its 10 MiB emptyDir and its logs in /stats/summary", func(ctx context.Context) (bool, string) {
		code, body := nodeProxyGet(ctx, t, "/stats/summary")
		if code != http.StatusOK {
			return false, fmt.Sprintf("%d %s", code, body)
		}
		summary = statsv1alpha1.Summary{}
		if err := json.Unmarshal([]byte(body), &summary); err != nil {
			t.Fatalf("decode /stats/summary: %v\n%s", err, body)
		}
		pod = nil
		for i := range summary.Pods {
			if summary.Pods[i].PodRef.UID == string(created.UID) {
				pod = &summary.Pods[i]
			}
		}
		if pod == nil {
			return false, "no summary-vols pod"
		}
		v := volumeStats(pod, "scratch")
		logs := containerLogs(pod)
		return v != nil && v.UsedBytes != nil && *v.UsedBytes >= tenMiB && logs != nil && logs.UsedBytes != nil && *logs.UsedBytes > 0,
			fmt.Sprintf("volumes %s, logs %s", jsonOf(pod.VolumeStats), jsonOf(logs))
	})
	t.Logf("pod summary-vols: %s", jsonOf(pod))

	for _, want := range []struct {
		name string
		min  uint64
	}{{"scratch", tenMiB}, {"cm", 8192}, {"secret", 4096}} {
		v := volumeStats(pod, want.name)
		switch {
		case v == nil:
			t.Errorf("no volume %s in %s", want.name, jsonOf(pod.VolumeStats))
		case v.UsedBytes == nil || *v.UsedBytes < want.min || v.InodesUsed == nil || *v.InodesUsed == 0:
			t.Errorf("volume %s = %s, want at least %d bytes and an inode", want.name, jsonOf(v), want.min)
		case v.PVCRef != nil:
			t.Errorf("volume %s has pvcRef %+v, want none", want.name, v.PVCRef)
		}
	}
	if e := pod.EphemeralStorage; e == nil || e.UsedBytes == nil || *e.UsedBytes < tenMiB || e.CapacityBytes == nil {
		t.Errorf("ephemeral storage = %s, want at least the 10 MiB emptyDir, with the node filesystem's capacity", jsonOf(e))
	}
	if logs := containerLogs(pod); logs.InodesUsed == nil || *logs.InodesUsed == 0 {
		t.Errorf("container logs = %s, want inodes", jsonOf(logs))
	}

	node := summary.Node
	sys := map[string]statsv1alpha1.ContainerStats{}
	for _, s := range node.SystemContainers {
		sys[s.Name] = s
	}
	t.Logf("system containers: %s", jsonOf(node.SystemContainers))
	// "runtime" is the cgroup of the process on the runtime's socket: the stack's containerd
	// runs on the host, out of the node machine's pid namespace, so the summary leaves it
	// out here (stats' unit tests find it on a real socket).
	if _, ok := sys[statsv1alpha1.SystemContainerRuntime]; ok {
		t.Errorf("system container \"runtime\" reported, but the stack's containerd is out of the machine's sight")
	}
	for _, name := range []string{statsv1alpha1.SystemContainerKubelet, statsv1alpha1.SystemContainerPods} {
		s, ok := sys[name]
		switch {
		case !ok:
			t.Errorf("no system container %q", name)
		case s.Memory == nil || s.Memory.WorkingSetBytes == nil || *s.Memory.WorkingSetBytes == 0:
			t.Errorf("system container %q memory = %s, want a working set", name, jsonOf(s.Memory))
		case s.CPU == nil || s.CPU.UsageCoreNanoSeconds == nil || *s.CPU.UsageCoreNanoSeconds == 0:
			t.Errorf("system container %q cpu = %s, want usage", name, jsonOf(s.CPU))
		case s.StartTime.IsZero():
			t.Errorf("system container %q has no start time", name)
		}
	}
	if node.Network == nil || len(node.Network.Interfaces) == 0 {
		t.Errorf("node network = %s, want an interface", jsonOf(node.Network))
	}
	if node.Fs == nil || node.Fs.InodesFree == nil || node.Runtime == nil || node.Runtime.ImageFs == nil {
		t.Errorf("node fs %s, runtime %s: want both with inodes", jsonOf(node.Fs), jsonOf(node.Runtime))
	}
}

func volumeStats(pod *statsv1alpha1.PodStats, name string) *statsv1alpha1.VolumeStats {
	for i := range pod.VolumeStats {
		if pod.VolumeStats[i].Name == name {
			return &pod.VolumeStats[i]
		}
	}
	return nil
}

func containerLogs(pod *statsv1alpha1.PodStats) *statsv1alpha1.FsStats {
	for _, c := range pod.Containers {
		if c.Name == "main" {
			return c.Logs
		}
	}
	return nil
}

func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
