package criconfig

import (
	"context"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
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
