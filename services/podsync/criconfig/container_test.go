package criconfig

import (
	"context"
	"fmt"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestContainerConfig(t *testing.T) {
	pod := testPod()
	pod.Spec.TerminationGracePeriodSeconds = ptrTo(int64(30))
	c := &pod.Spec.Containers[0]
	c.Command = []string{"/bin/sh", "-c"}
	c.Args = []string{"echo $(GREETING) $(UNSET) $$(GREETING)"}
	c.WorkingDir = "/work"
	c.Env = []corev1.EnvVar{{Name: "GREETING", Value: "hello"}}
	c.Stdin, c.StdinOnce, c.TTY = true, true, true
	c.Resources = corev1.ResourceRequirements{Requests: rl("cpu", "100m", "memory", "64Mi"), Limits: rl("cpu", "200m", "memory", "128Mi")}
	c.Ports = []corev1.ContainerPort{{ContainerPort: 80, Protocol: corev1.ProtocolTCP}}

	mounts := []Mount{
		{ContainerPath: "/data", HostPath: "/var/lib/unitlet/pods/u/volumes/data", Propagation: runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER},
		{ContainerPath: "/etc/app.conf", HostPath: "/vol/cfg", SubPath: "app.conf", ReadOnly: true},
	}
	o := Options{PodsDir: "/var/lib/unitlet/pods", MemoryCapacity: 8 << 30}
	cfg, tmPath, err := ContainerConfig(context.Background(), pod, c, 3, mounts, PodEnv{}, nil, o)
	if err != nil {
		t.Fatal(err)
	}

	if cfg.Metadata.Name != "app" || cfg.Metadata.Attempt != 3 {
		t.Errorf("metadata = %v", cfg.Metadata)
	}
	if cfg.Image.Image != "busybox:1.36" || cfg.Image.UserSpecifiedImage != "busybox:1.36" {
		t.Errorf("image = %v", cfg.Image)
	}
	if want := []string{"/bin/sh", "-c"}; !reflect.DeepEqual(cfg.Command, want) {
		t.Errorf("command = %q", cfg.Command)
	}
	if want := []string{"echo hello $(UNSET) $(GREETING)"}; !reflect.DeepEqual(cfg.Args, want) {
		t.Errorf("args = %q, want %q", cfg.Args, want)
	}
	if cfg.WorkingDir != "/work" || !cfg.Stdin || !cfg.StdinOnce || !cfg.Tty {
		t.Errorf("workdir/stdio = %q %v %v %v", cfg.WorkingDir, cfg.Stdin, cfg.StdinOnce, cfg.Tty)
	}
	if cfg.LogPath != "app/3.log" {
		t.Errorf("log path = %q", cfg.LogPath)
	}
	if got := envOf(cfg.Envs); !reflect.DeepEqual(got, [][2]string{{"GREETING", "hello"}}) {
		t.Errorf("env = %v", got)
	}

	wantLabels := map[string]string{LabelPodName: "web", LabelPodNamespace: "shop", LabelPodUID: string(pod.UID), LabelContainerName: "app"}
	if !reflect.DeepEqual(cfg.Labels, wantLabels) {
		t.Errorf("labels = %v", cfg.Labels)
	}
	info := ParseContainerLabels(cfg.Labels, cfg.Annotations)
	if info.Err != nil || info.RestartCount != 3 || info.Hash != Hash(c) || *info.PodTerminationGracePeriod != 30 ||
		info.TerminationMessagePath != "/dev/termination-log" || len(info.Ports) != 1 {
		t.Errorf("annotations read back as %+v", info)
	}

	// Termination message: a fresh file under the pod's container dir, mounted last.
	dir := filepath.Join("/var/lib/unitlet/pods", string(pod.UID), "containers", "app")
	if filepath.Dir(tmPath) != dir || !regexp.MustCompile(`^[0-9a-f]{8}$`).MatchString(filepath.Base(tmPath)) {
		t.Errorf("termination message host path = %q", tmPath)
	}
	wantMounts := []*runtimeapi.Mount{
		{ContainerPath: "/data", HostPath: "/var/lib/unitlet/pods/u/volumes/data", Propagation: runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER},
		{ContainerPath: "/etc/app.conf", HostPath: "/vol/cfg/app.conf", Readonly: true},
		{ContainerPath: "/dev/termination-log", HostPath: tmPath},
	}
	if len(cfg.Mounts) != len(wantMounts) {
		t.Fatalf("mounts = %v", cfg.Mounts)
	}
	for i, m := range cfg.Mounts {
		w := wantMounts[i]
		if m.ContainerPath != w.ContainerPath || m.HostPath != w.HostPath || m.Readonly != w.Readonly || m.Propagation != w.Propagation {
			t.Errorf("mount %d = %v, want %v", i, m, w)
		}
	}

	r := cfg.Linux.Resources
	if r.CpuShares != 102 || r.CpuQuota != 20000 || r.CpuPeriod != 100000 || r.MemoryLimitInBytes != 128<<20 {
		t.Errorf("resources = %v", r)
	}
	// Burstable, 64Mi of 8Gi requested: 1000 - 1000*64/8192 = 993 (integer division).
	if r.OomScoreAdj != 993 {
		t.Errorf("oom score adj = %d, want 993", r.OomScoreAdj)
	}
	if cfg.Linux.SecurityContext == nil || cfg.Linux.SecurityContext.NamespaceOptions.GetPid() != runtimeapi.NamespaceMode_CONTAINER {
		t.Errorf("security context = %v", cfg.Linux.SecurityContext)
	}

	// A second instance gets a different termination-message file.
	_, tmPath2, err := ContainerConfig(context.Background(), pod, c, 4, nil, PodEnv{}, nil, o)
	if err != nil {
		t.Fatal(err)
	}
	if tmPath2 == tmPath {
		t.Errorf("termination message path reused: %q", tmPath2)
	}
}

func TestContainerConfigErrorsAndEdges(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*corev1.Pod, *[]Mount, *Options)
		errHas string
		check  func(*runtimeapi.ContainerConfig, string) string
	}{
		{name: "no termination message path: no extra mount",
			mutate: func(p *corev1.Pod, _ *[]Mount, _ *Options) { p.Spec.Containers[0].TerminationMessagePath = "" },
			check: func(cfg *runtimeapi.ContainerConfig, tm string) string {
				if tm != "" || len(cfg.Mounts) != 0 {
					return "termination mount present"
				}
				return ""
			}},
		{name: "no pods dir: no termination mount",
			mutate: func(_ *corev1.Pod, _ *[]Mount, o *Options) { o.PodsDir = "" },
			check: func(cfg *runtimeapi.ContainerConfig, tm string) string {
				if tm != "" || len(cfg.Mounts) != 0 {
					return "termination mount present"
				}
				return ""
			}},
		{name: "subPath escaping the volume",
			mutate: func(_ *corev1.Pod, m *[]Mount, _ *Options) {
				*m = []Mount{{ContainerPath: "/x", HostPath: "/vol", SubPath: "a/../../etc"}}
			},
			errHas: `container app: mount /x: subPath "a/../../etc"`},
		{name: "absolute subPath",
			mutate: func(_ *corev1.Pod, m *[]Mount, _ *Options) {
				*m = []Mount{{ContainerPath: "/x", HostPath: "/vol", SubPath: "/etc"}}
			},
			errHas: "must be a relative path"},
		{name: "env error names container",
			mutate: func(p *corev1.Pod, _ *[]Mount, _ *Options) {
				p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "X", ValueFrom: &corev1.EnvVarSource{
					SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "s"}, Key: "k"}}}}
			},
			errHas: "container app: env X: get secret shop/s"},
		{name: "no args stays nil",
			check: func(cfg *runtimeapi.ContainerConfig, _ string) string {
				if cfg.Command != nil || cfg.Args != nil {
					return "command/args not nil"
				}
				return ""
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := testPod()
			var mounts []Mount
			o := Options{PodsDir: "/pods"}
			if tt.mutate != nil {
				tt.mutate(pod, &mounts, &o)
			}
			cfg, tm, err := ContainerConfig(context.Background(), pod, &pod.Spec.Containers[0], 0, mounts, PodEnv{}, newObjects(), o)
			if tt.errHas != "" {
				if err == nil || !strings.Contains(err.Error(), tt.errHas) {
					t.Fatalf("err = %v, want %q", err, tt.errHas)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if msg := tt.check(cfg, tm); msg != "" {
				t.Error(msg)
			}
		})
	}
}

// A device mount is a CRI device with the kubelet's permissions: "mrw", "r" read-only.
func TestCRIMountsDevices(t *testing.T) {
	mounts, devices, err := criMounts(&corev1.Container{Name: "c"}, []Mount{
		{ContainerPath: "/data", HostPath: "/v"},
		{ContainerPath: "/dev/xvda", HostPath: "/l/a", Device: true},
		{ContainerPath: "/dev/xvdb", HostPath: "/l/b", Device: true, ReadOnly: true},
	}, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(mounts) != 1 || len(devices) != 2 {
		t.Fatalf("mounts %v devices %v, want one mount and two devices", mounts, devices)
	}
	if devices[0].Permissions != "mrw" || devices[1].Permissions != "r" || devices[1].HostPath != "/l/b" || devices[1].ContainerPath != "/dev/xvdb" {
		t.Errorf("devices %v", devices)
	}
}

// recursiveReadOnly as the kubelet applies it: Enabled needs the runtime's support,
// IfPossible takes it when there is some, either needs readOnly and no propagation.
func TestCRIMountsRecursiveReadOnly(t *testing.T) {
	mode := func(m corev1.RecursiveReadOnlyMode) *corev1.RecursiveReadOnlyMode { return &m }
	c := &corev1.Container{Name: "c", VolumeMounts: []corev1.VolumeMount{
		{Name: "on", MountPath: "/on", ReadOnly: true, RecursiveReadOnly: mode(corev1.RecursiveReadOnlyEnabled)},
		{Name: "maybe", MountPath: "/maybe", ReadOnly: true, RecursiveReadOnly: mode(corev1.RecursiveReadOnlyIfPossible)},
		{Name: "off", MountPath: "/off", ReadOnly: true, RecursiveReadOnly: mode(corev1.RecursiveReadOnlyDisabled)},
	}}
	mounts := []Mount{{ContainerPath: "/on", HostPath: "/a", ReadOnly: true}, {ContainerPath: "/maybe", HostPath: "/b", ReadOnly: true}, {ContainerPath: "/off", HostPath: "/c", ReadOnly: true}}
	got, _, err := criMounts(c, mounts, true)
	if err != nil {
		t.Fatal(err)
	}
	if !got[0].RecursiveReadOnly || !got[1].RecursiveReadOnly || got[2].RecursiveReadOnly {
		t.Errorf("supported: %v", got)
	}
	if _, _, err := criMounts(c, mounts, false); err == nil || err.Error() != `volume "on" requested recursive read-only mode, but it is not supported by the runtime` {
		t.Errorf("Enabled without the runtime's support: %v", err)
	}
	got, _, err = criMounts(c, mounts[1:], false)
	if err != nil || got[0].RecursiveReadOnly {
		t.Errorf("IfPossible without support: %v %v, want a plain read-only mount", got, err)
	}
	prop := corev1.MountPropagationHostToContainer
	c.VolumeMounts[0].MountPropagation = &prop
	if _, _, err := criMounts(c, mounts[:1], true); err == nil || !strings.Contains(err.Error(), "not compatible with propagation") {
		t.Errorf("with propagation: %v", err)
	}
}

// NoSwap, where the kernel controls swap: memory.swap.max 0 on cgroup v2, a memory+swap
// limit equal to the memory limit on v1; nothing without a swap controller.
func TestNoSwap(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
		Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")}}}}}}
	c := &pod.Spec.Containers[0]
	if r := containerResources(pod, c, Options{SwapController: true}); r.Unified["memory.swap.max"] != "0" {
		t.Errorf("v2: unified %v, want memory.swap.max 0", r.Unified)
	}
	if r := containerResources(pod, c, Options{SwapController: true, CgroupV1: true}); r.MemorySwapLimitInBytes != 64<<20 || r.Unified != nil {
		t.Errorf("v1: memory+swap %d, unified %v; want the memory limit and no unified", r.MemorySwapLimitInBytes, r.Unified)
	}
	if r := containerResources(pod, c, Options{}); r.MemorySwapLimitInBytes != 0 || r.Unified != nil {
		t.Errorf("no swap controller: %v", r)
	}
}

// LimitedSwap, as the kubelet: a Burstable container with a memory request below its
// limit gets its request's share of the node's memory, of the node's swap; the others,
// critical pods and cgroup v1 get none.
func TestLimitedSwap(t *testing.T) {
	mem := func(req, lim string) corev1.ResourceRequirements {
		r := corev1.ResourceRequirements{Requests: corev1.ResourceList{}, Limits: corev1.ResourceList{}}
		if req != "" {
			r.Requests[corev1.ResourceMemory] = resource.MustParse(req)
		}
		if lim != "" {
			r.Limits[corev1.ResourceMemory] = resource.MustParse(lim)
		}
		return r
	}
	o := Options{SwapController: true, LimitedSwap: true, MemoryCapacity: 4 << 30, SwapCapacity: 1 << 30}
	for _, tc := range []struct {
		name     string
		r        corev1.ResourceRequirements
		priority int32
		v1       bool
		want     string
	}{
		{"burstable, request below limit", mem("512Mi", "1Gi"), 0, false, fmt.Sprint(128 << 20)},
		{"burstable, request without limit", mem("1Gi", ""), 0, false, fmt.Sprint(256 << 20)},
		{"guaranteed: request equals limit", mem("1Gi", "1Gi"), 0, false, "0"},
		{"besteffort", mem("", ""), 0, false, "0"},
		{"critical", mem("512Mi", "1Gi"), SystemCriticalPriority, false, "0"},
		{"cgroup v1", mem("512Mi", "1Gi"), 0, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{Spec: corev1.PodSpec{Priority: &tc.priority, Containers: []corev1.Container{{Name: "c", Resources: tc.r}}}}
			if !tc.r.Requests.Memory().IsZero() && tc.r.Requests.Memory().Cmp(*tc.r.Limits.Memory()) == 0 {
				tc.r.Requests[corev1.ResourceCPU], tc.r.Limits[corev1.ResourceCPU] = resource.MustParse("1"), resource.MustParse("1")
			}
			opts := o
			opts.CgroupV1 = tc.v1
			r := containerResources(pod, &pod.Spec.Containers[0], opts)
			if got := r.Unified["memory.swap.max"]; got != tc.want {
				t.Errorf("memory.swap.max %q, want %q", got, tc.want)
			}
		})
	}
}
