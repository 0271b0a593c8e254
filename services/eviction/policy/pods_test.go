package policy

import (
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
)

// podOpt shapes a test pod.
type podOpt func(*corev1.Pod)

func newPod(name string, opts ...podOpt) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: k8stypes.UID("uid-" + name)},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}}},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func priority(p int32) podOpt { return func(pod *corev1.Pod) { pod.Spec.Priority = &p } }

func annotate(k, v string) podOpt {
	return func(pod *corev1.Pod) {
		if pod.Annotations == nil {
			pod.Annotations = map[string]string{}
		}
		pod.Annotations[k] = v
	}
}

// requests sets the first container's requests, e.g. requests("memory", "100Mi").
func requests(kv ...string) podOpt {
	return func(pod *corev1.Pod) {
		if pod.Spec.Containers[0].Resources.Requests == nil {
			pod.Spec.Containers[0].Resources.Requests = corev1.ResourceList{}
		}
		for i := 0; i < len(kv); i += 2 {
			pod.Spec.Containers[0].Resources.Requests[corev1.ResourceName(kv[i])] = q(kv[i+1])
		}
	}
}

// limits sets the first container's limits.
func limits(kv ...string) podOpt {
	return func(pod *corev1.Pod) {
		if pod.Spec.Containers[0].Resources.Limits == nil {
			pod.Spec.Containers[0].Resources.Limits = corev1.ResourceList{}
		}
		for i := 0; i < len(kv); i += 2 {
			pod.Spec.Containers[0].Resources.Limits[corev1.ResourceName(kv[i])] = q(kv[i+1])
		}
	}
}

func volume(v corev1.Volume) podOpt {
	return func(pod *corev1.Pod) { pod.Spec.Volumes = append(pod.Spec.Volumes, v) }
}

func emptyDir(name string, medium corev1.StorageMedium, limit string) corev1.Volume {
	ed := &corev1.EmptyDirVolumeSource{Medium: medium}
	if limit != "" {
		l := q(limit)
		ed.SizeLimit = &l
	}
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{EmptyDir: ed}}
}

func names(ps []PodStats) string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Pod.Name)
	}
	return strings.Join(out, ",")
}

func TestIsCritical(t *testing.T) {
	tests := []struct {
		name string
		pod  *corev1.Pod
		want bool
	}{
		{"plain", newPod("a"), false},
		{"nil", nil, false},
		{"static from a file", newPod("a", annotate(SourceAnnotation, "file")), true},
		{"static from http", newPod("a", annotate(SourceAnnotation, "http")), true},
		{"from the API", newPod("a", annotate(SourceAnnotation, "api")), false},
		{"mirror", newPod("a", annotate(corev1.MirrorPodAnnotationKey, "hash")), true},
		{"system critical priority", newPod("a", priority(2000000000)), true},
		{"system-node-critical priority", newPod("a", priority(2000001000)), true},
		{"just below", newPod("a", priority(1999999999)), false},
		{"negative priority", newPod("a", priority(-5)), false},
	}
	for _, tc := range tests {
		if got := IsCritical(tc.pod); got != tc.want {
			t.Errorf("%s: IsCritical = %v", tc.name, got)
		}
	}
	if !(PodStats{Pod: newPod("a"), Static: true}).critical() {
		t.Error("a PodStats marked Static is not critical")
	}
}

func TestRankMemory(t *testing.T) {
	pods := []PodStats{
		// Under its request: last whatever its priority.
		{Pod: newPod("under", requests("memory", "1Gi"), priority(-10)), Memory: 500 << 20},
		// Over its request, high priority.
		{Pod: newPod("over-high", requests("memory", "100Mi"), priority(1000)), Memory: 900 << 20},
		// Over its request (none), low priority, small.
		{Pod: newPod("over-low-small"), Memory: 10 << 20},
		// Over its request, low priority, more above its request.
		{Pod: newPod("over-low-big", requests("memory", "100Mi")), Memory: 400 << 20},
		// A tie with over-low-big: namespace/name order.
		{Pod: newPod("over-low-big-twin", requests("memory", "200Mi")), Memory: 500 << 20},
		// Critical: left out.
		{Pod: newPod("critical", priority(2000000000)), Memory: 4 << 30},
		{Pod: newPod("static"), Memory: 4 << 30, Static: true},
		{Pod: newPod("mirror", annotate(corev1.MirrorPodAnnotationKey, "x")), Memory: 4 << 30},
		{Pod: nil, Memory: 1},
	}
	want := "over-low-big,over-low-big-twin,over-low-small,over-high,under"
	for _, s := range []Signal{SignalMemoryAvailable, SignalAllocatableMemoryAvailable} {
		if got := names(Rank(s, pods, FsLayout{})); got != want {
			t.Errorf("%s: %s, want %s", s, got, want)
		}
	}
	// The input is not reordered.
	if pods[0].Pod.Name != "under" {
		t.Error("Rank reordered its input")
	}

	// A pod without stats comes before every measured one, and among such pods priority
	// decides.
	pods = []PodStats{
		{Pod: newPod("measured"), Memory: 8 << 30},
		{Pod: newPod("nostats-high", priority(100)), NoStats: true},
		{Pod: newPod("nostats-low"), NoStats: true},
	}
	if got := names(Rank(SignalMemoryAvailable, pods, FsLayout{})); got != "nostats-low,nostats-high,measured" {
		t.Errorf("no stats: %s", got)
	}
}

func TestRankMemoryRequests(t *testing.T) {
	sidecar := corev1.ContainerRestartPolicyAlways
	pods := []PodStats{
		// Pod-level requests replace the containers'.
		{Pod: newPod("pod-level", requests("memory", "10Mi"), func(p *corev1.Pod) {
			p.Spec.Resources = &corev1.ResourceRequirements{Requests: corev1.ResourceList{"memory": q("1Gi")}}
		}), Memory: 500 << 20},
		// A sidecar's request adds to the containers'.
		{Pod: newPod("sidecar", requests("memory", "300Mi"), func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{Name: "proxy", RestartPolicy: &sidecar, Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{"memory": q("300Mi")}}}}
		}), Memory: 500 << 20},
		// Overhead counts when the request is not zero.
		{Pod: newPod("overhead", requests("memory", "300Mi"), func(p *corev1.Pod) {
			p.Spec.Overhead = corev1.ResourceList{"memory": q("300Mi")}
		}), Memory: 500 << 20},
		{Pod: newPod("plain", requests("memory", "300Mi")), Memory: 500 << 20},
	}
	if got := names(Rank(SignalMemoryAvailable, pods, FsLayout{})); got != "plain,overhead,sidecar,pod-level" {
		t.Errorf("got %s", got)
	}
}

func TestRankDisk(t *testing.T) {
	vols := []podOpt{
		volume(emptyDir("scratch", "", "")),
		volume(emptyDir("ram", corev1.StorageMediumMemory, "")),
		volume(corev1.Volume{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/x"}}}),
		volume(corev1.Volume{Name: "claim", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "c"}}}),
		volume(corev1.Volume{Name: "secret", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "s"}}}),
	}
	// Each pod uses 100 of one kind of storage; the volumes it does not count are big.
	mk := func(name string, c ContainerUsage, vol map[string]int64, opts ...podOpt) PodStats {
		c.Name = "app"
		if vol == nil {
			vol = map[string]int64{}
		}
		for _, n := range []string{"ram", "claim", "secret"} {
			vol[n] = 1 << 40
		}
		return PodStats{Pod: newPod(name, append(append([]podOpt{}, vols...), opts...)...), Containers: []ContainerUsage{c}, Volumes: vol,
			VolumeInodes: map[string]int64{"scratch": vol["scratch"] / 10}}
	}
	pods := []PodStats{
		mk("rootfs", ContainerUsage{Rootfs: 100, RootfsInodes: 10}, nil),
		mk("logs", ContainerUsage{Logs: 200, LogsInodes: 20}, nil),
		mk("emptydir", ContainerUsage{}, map[string]int64{"scratch": 300}),
		mk("hostpath", ContainerUsage{}, map[string]int64{"host": 400}),
		mk("requested", ContainerUsage{Rootfs: 1000, Logs: 1000, RootfsInodes: 500}, map[string]int64{"scratch": 1000}, requests("ephemeral-storage", "10Ki")),
	}
	tests := []struct {
		s      Signal
		layout FsLayout
		want   string
	}{
		// One filesystem: everything counts. "requested" is under its request: last.
		{SignalNodeFsAvailable, FsLayout{}, "hostpath,emptydir,logs,rootfs,requested"},
		{SignalImageFsAvailable, FsLayout{}, "hostpath,emptydir,logs,rootfs,requested"},
		{SignalContainerFsAvailable, FsLayout{}, "hostpath,emptydir,logs,rootfs,requested"},
		// Dedicated imagefs: nodefs counts logs and volumes, imagefs the writable layers.
		// The pods using none tie at zero above a zero request and keep name order, before
		// "requested", under its request by more.
		{SignalNodeFsAvailable, FsLayout{DedicatedImageFs: true}, "hostpath,emptydir,logs,rootfs,requested"},
		{SignalImageFsAvailable, FsLayout{DedicatedImageFs: true}, "rootfs,emptydir,hostpath,logs,requested"},
		{SignalContainerFsAvailable, FsLayout{DedicatedImageFs: true}, "rootfs,emptydir,hostpath,logs,requested"},
		// Split: nodefs and containerfs count everything; imagefs nothing of a pod's, so the
		// pod with the biggest request is the furthest under it, last.
		{SignalNodeFsAvailable, FsLayout{DedicatedImageFs: true, SplitContainerFs: true}, "hostpath,emptydir,logs,rootfs,requested"},
		{SignalContainerFsAvailable, FsLayout{DedicatedImageFs: true, SplitContainerFs: true}, "hostpath,emptydir,logs,rootfs,requested"},
		{SignalImageFsAvailable, FsLayout{DedicatedImageFs: true, SplitContainerFs: true}, "emptydir,hostpath,logs,rootfs,requested"},
		// Inodes: any use exceeds the (absent) inodes request; the last key takes off the
		// ephemeral-storage request, as the kubelet does, which puts "requested" last.
		// hostPath has no inode count here.
		{SignalNodeFsInodesFree, FsLayout{}, "emptydir,logs,rootfs,requested,hostpath"},
		{SignalImageFsInodesFree, FsLayout{DedicatedImageFs: true}, "rootfs,requested,emptydir,hostpath,logs"},
	}
	for _, tc := range tests {
		if got := names(Rank(tc.s, pods, tc.layout)); got != tc.want {
			t.Errorf("%s %+v: %s, want %s", tc.s, tc.layout, got, tc.want)
		}
	}

	// Priority comes between exceeding the request and the usage.
	pods = []PodStats{
		{Pod: newPod("big-important", priority(10)), Containers: []ContainerUsage{{Name: "app", Rootfs: 1 << 30}}},
		{Pod: newPod("small"), Containers: []ContainerUsage{{Name: "app", Rootfs: 1}}},
		{Pod: newPod("nostats", priority(20)), NoStats: true},
	}
	if got := names(Rank(SignalNodeFsAvailable, pods, FsLayout{})); got != "nostats,small,big-important" {
		t.Errorf("priority: %s", got)
	}
}

func TestRankPID(t *testing.T) {
	pods := []PodStats{
		{Pod: newPod("many", priority(5)), Processes: 1000},
		{Pod: newPod("few"), Processes: 3},
		{Pod: newPod("lots"), Processes: 300},
		{Pod: newPod("nostats"), NoStats: true},
		{Pod: newPod("nostats-high", priority(10)), NoStats: true},
		{Pod: newPod("critical", annotate(SourceAnnotation, "file")), Processes: 1 << 20},
	}
	if got := names(Rank(SignalPIDAvailable, pods, FsLayout{})); got != "nostats,lots,few,many,nostats-high" {
		t.Errorf("got %s", got)
	}
	if Rank("bogus", pods, FsLayout{}) != nil {
		t.Error("ranked for an unknown signal")
	}
	if got := Rank(SignalPIDAvailable, nil, FsLayout{}); len(got) != 0 {
		t.Errorf("ranked no pods as %v", got)
	}
}

func TestMessage(t *testing.T) {
	memT := Threshold{Signal: SignalMemoryAvailable, Value: Value{Quantity: ptr(q("100Mi")), Raw: "100Mi"}, Raw: "100Mi"}
	memObs := Observation{Available: *resource.NewQuantity(50<<20, resource.BinarySI), Capacity: *resource.NewQuantity(8<<30, resource.BinarySI)}
	twoContainers := func(p *corev1.Pod) {
		p.Spec.Containers = []corev1.Container{
			{Name: "x"},
			{Name: "y", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{"memory": q("1Gi"), "ephemeral-storage": q("1Mi")}}},
			{Name: "z", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{"memory": q("64Mi")}}},
		}
		p.Spec.InitContainers = []corev1.Container{{Name: "init"}}
	}
	tests := []struct {
		name   string
		s      Signal
		t      Threshold
		obs    Observation
		pod    PodStats
		msg    string
		annots map[string]string
	}{
		{
			name: "memory, one offending container",
			s:    SignalMemoryAvailable, t: memT, obs: memObs,
			pod: PodStats{Pod: newPod("p", twoContainers), Containers: []ContainerUsage{{Name: "x", Memory: 200 << 20}, {Name: "y", Memory: 300 << 20}}},
			msg: "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. Container x was using 200Mi, request is 0, has larger consumption of memory. ",
			annots: map[string]string{
				"offending_containers": "x", "offending_containers_usage": "200Mi", "starved_resource": "memory",
			},
		},
		{
			name: "memory, containers in measured order, an init container, an unknown one skipped",
			s:    SignalAllocatableMemoryAvailable, t: memT, obs: memObs,
			pod: PodStats{Pod: newPod("p", twoContainers), Containers: []ContainerUsage{
				{Name: "z", Memory: 100 << 20}, {Name: "gone", Memory: 1 << 30}, {Name: "init", Memory: 1234567}, {Name: "x", Memory: 64 << 20},
			}},
			msg: "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. " +
				"Container z was using 100Mi, request is 64Mi, has larger consumption of memory. " +
				"Container init was using 1234567, request is 0, has larger consumption of memory. " +
				"Container x was using 64Mi, request is 0, has larger consumption of memory. ",
			annots: map[string]string{
				"offending_containers": "z,init,x", "offending_containers_usage": "100Mi,1234567,64Mi", "starved_resource": "memory",
			},
		},
		{
			name: "memory, nobody over request",
			s:    SignalMemoryAvailable, t: memT, obs: memObs,
			pod: PodStats{Pod: newPod("p", twoContainers), Containers: []ContainerUsage{{Name: "y", Memory: 1 << 30}}},
			msg: "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. ",
			annots: map[string]string{
				"offending_containers": "", "offending_containers_usage": "", "starved_resource": "memory",
			},
		},
		{
			name: "memory, pod-level requests",
			s:    SignalMemoryAvailable, t: memT, obs: memObs,
			pod: PodStats{Pod: newPod("p", twoContainers, func(p *corev1.Pod) {
				p.Spec.Resources = &corev1.ResourceRequirements{Requests: corev1.ResourceList{"memory": q("2Gi")}}
			}), Memory: 1 << 30, Containers: []ContainerUsage{{Name: "x", Memory: 1 << 30}}},
			msg: "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. " +
				"Pod p was using 1Gi, request is 2Gi, has larger consumption of memory. " +
				"Container x was using 1Gi, request is 0, has larger consumption of memory. ",
			annots: map[string]string{
				"offending_pod": "p", "offending_pod_usage": "1Gi",
				"offending_containers": "x", "offending_containers_usage": "1Gi", "starved_resource": "memory",
			},
		},
		{
			name: "disk, percentage threshold, writable layer plus logs",
			s:    SignalNodeFsAvailable,
			t:    Threshold{Signal: SignalNodeFsAvailable, Value: Value{Percentage: 0.5, Raw: "50%"}, Raw: "50%"},
			obs:  Observation{Available: *resource.NewQuantity(1<<30, resource.BinarySI), Capacity: *resource.NewQuantity(10<<30, resource.BinarySI)},
			pod:  PodStats{Pod: newPod("p", twoContainers), Containers: []ContainerUsage{{Name: "y", Rootfs: 1 << 20, Logs: 1 << 20, Memory: 1 << 40}}},
			msg: "The node was low on resource: ephemeral-storage. Threshold quantity: 5Gi, available: 1Gi. " +
				"Container y was using 2Mi, request is 1Mi, has larger consumption of ephemeral-storage. ",
			annots: map[string]string{
				"offending_containers": "y", "offending_containers_usage": "2Mi", "starved_resource": "ephemeral-storage",
			},
		},
		{
			name: "inodes name no container",
			s:    SignalNodeFsInodesFree,
			t:    Threshold{Signal: SignalNodeFsInodesFree, Value: Value{Quantity: ptr(q("1k"))}},
			obs:  Observation{Available: *resource.NewQuantity(500, resource.DecimalSI), Capacity: *resource.NewQuantity(1000000, resource.DecimalSI)},
			pod:  PodStats{Pod: newPod("p"), Containers: []ContainerUsage{{Name: "app", RootfsInodes: 1 << 20, Rootfs: 1 << 30}}},
			msg:  "The node was low on resource: inodes. Threshold quantity: 1k, available: 500. ",
			annots: map[string]string{
				"offending_containers": "", "offending_containers_usage": "", "starved_resource": "inodes",
			},
		},
		{
			name: "pids",
			s:    SignalPIDAvailable,
			t:    Threshold{Signal: SignalPIDAvailable, Value: Value{Quantity: ptr(q("100"))}},
			obs:  Observation{Available: *resource.NewQuantity(20, resource.DecimalSI), Capacity: *resource.NewQuantity(4096, resource.DecimalSI)},
			pod:  PodStats{Pod: newPod("p"), Processes: 4000},
			msg:  "The node was low on resource: pids. Threshold quantity: 100, available: 20. ",
			annots: map[string]string{
				"offending_containers": "", "offending_containers_usage": "", "starved_resource": "pids",
			},
		},
		{
			name: "no stats",
			s:    SignalMemoryAvailable, t: memT, obs: memObs,
			pod:    PodStats{Pod: newPod("p"), NoStats: true, Containers: []ContainerUsage{{Name: "app", Memory: 1 << 30}}},
			msg:    "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. ",
			annots: map[string]string{},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			msg, annots := Message(tc.s, tc.t, tc.obs, tc.pod)
			if msg != tc.msg {
				t.Errorf("message\n%q\nwant\n%q", msg, tc.msg)
			}
			if !reflect.DeepEqual(annots, tc.annots) {
				t.Errorf("annotations %v, want %v", annots, tc.annots)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func TestGracePeriod(t *testing.T) {
	hard := Threshold{Signal: SignalMemoryAvailable}
	soft := Threshold{Signal: SignalMemoryAvailable, Soft: true, GracePeriod: 1}
	softNoGrace := Threshold{Signal: SignalMemoryAvailable, Soft: true}
	withTGPS := func(s int64) *corev1.Pod {
		return newPod("p", func(p *corev1.Pod) { p.Spec.TerminationGracePeriodSeconds = &s })
	}
	tests := []struct {
		name string
		t    Threshold
		max  int64
		pod  *corev1.Pod
		want int64
	}{
		{"hard", hard, 30, withTGPS(60), 1},
		{"soft with no grace period acts hard", softNoGrace, 30, withTGPS(60), 1},
		{"soft, pod's period shorter", soft, 30, withTGPS(10), 10},
		{"soft, pod's period longer", soft, 30, withTGPS(60), 30},
		{"soft, pod's period unset", soft, 30, newPod("p"), 30},
		{"soft, no maximum", soft, 0, withTGPS(60), 0},
		{"soft, pod's period zero", soft, 30, withTGPS(0), 0},
		{"soft, nil pod", soft, 30, nil, 30},
	}
	for _, tc := range tests {
		if got := GracePeriod(tc.t, Config{MaxPodGracePeriod: tc.max}, tc.pod); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestAdmit(t *testing.T) {
	memory := []corev1.NodeConditionType{corev1.NodeMemoryPressure}
	disk := []corev1.NodeConditionType{corev1.NodeDiskPressure}
	both := []corev1.NodeConditionType{corev1.NodeMemoryPressure, corev1.NodeDiskPressure}
	tolerate := func(tol corev1.Toleration) podOpt {
		return func(p *corev1.Pod) { p.Spec.Tolerations = append(p.Spec.Tolerations, tol) }
	}
	memTol := corev1.Toleration{Key: "node.kubernetes.io/memory-pressure", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}
	bestEffort := newPod("be")
	burstable := newPod("burstable", requests("memory", "100Mi"))
	cpuLimited := newPod("cpu", limits("cpu", "1"))
	ephemeralOnly := newPod("eph", requests("ephemeral-storage", "1Gi"))
	initRequest := newPod("init", func(p *corev1.Pod) {
		p.Spec.InitContainers = []corev1.Container{{Name: "i", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{"cpu": q("100m")}}}}
	})
	podLevel := newPod("podlevel", func(p *corev1.Pod) {
		p.Spec.Resources = &corev1.ResourceRequirements{Limits: corev1.ResourceList{"memory": q("1Gi")}}
	})
	statusBE := newPod("status", requests("memory", "1Gi"), func(p *corev1.Pod) { p.Status.QOSClass = corev1.PodQOSBestEffort })
	refused := func(c []corev1.NodeConditionType) string {
		switch len(c) {
		case 1:
			return "The node had condition: [" + string(c[0]) + "]. "
		default:
			return "The node had condition: [MemoryPressure DiskPressure]. "
		}
	}
	tests := []struct {
		name       string
		pod        *corev1.Pod
		conditions []corev1.NodeConditionType
		admit      bool
	}{
		{"no pressure", bestEffort, nil, true},
		{"memory pressure, BestEffort", bestEffort, memory, false},
		{"memory pressure, Burstable", burstable, memory, true},
		{"memory pressure, CPU limit only", cpuLimited, memory, true},
		{"memory pressure, ephemeral storage request is still BestEffort", ephemeralOnly, memory, false},
		{"memory pressure, an init container's request", initRequest, memory, true},
		{"memory pressure, pod-level limits", podLevel, memory, true},
		{"memory pressure, status says BestEffort", statusBE, memory, false},
		{"memory pressure, BestEffort tolerating it", newPod("tol", tolerate(memTol)), memory, true},
		{"memory pressure, BestEffort tolerating everything", newPod("tol", tolerate(corev1.Toleration{Operator: corev1.TolerationOpExists})), memory, true},
		{"memory pressure, BestEffort tolerating NoExecute only", newPod("tol", tolerate(corev1.Toleration{Key: memTol.Key, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute})), memory, false},
		{"memory pressure, BestEffort tolerating disk pressure", newPod("tol", tolerate(corev1.Toleration{Key: "node.kubernetes.io/disk-pressure", Operator: corev1.TolerationOpExists})), memory, false},
		{"disk pressure, Burstable", burstable, disk, false},
		{"disk and memory pressure, tolerating memory", newPod("tol", tolerate(memTol)), both, false},
		{"disk pressure, critical", newPod("crit", priority(2000001000)), disk, true},
		{"disk pressure, static", newPod("static", annotate(SourceAnnotation, "file")), both, true},
	}
	for _, tc := range tests {
		admit, reason, msg := Admit(tc.pod, tc.conditions)
		if admit != tc.admit {
			t.Errorf("%s: admit %v", tc.name, admit)
			continue
		}
		if admit && (reason != "" || msg != "") {
			t.Errorf("%s: admitted with %q %q", tc.name, reason, msg)
		}
		if !admit && (reason != "Evicted" || msg != refused(tc.conditions)) {
			t.Errorf("%s: refused with %q %q", tc.name, reason, msg)
		}
	}
}
