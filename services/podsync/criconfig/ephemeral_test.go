package criconfig

import (
	"context"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// debugPod is testPod with the ephemeral container kubectl debug --target=app adds.
func debugPod() *corev1.Pod {
	pod := testPod()
	pod.Spec.EphemeralContainers = []corev1.EphemeralContainer{{
		EphemeralContainerCommon: corev1.EphemeralContainerCommon{
			Name: "debugger-x1", Image: "busybox:1.36", Stdin: true, TTY: true,
			TerminationMessagePath: "/dev/termination-log", TerminationMessagePolicy: corev1.TerminationMessageReadFile,
		},
		TargetContainerName: "app",
	}}
	return pod
}

func TestEphemeralContainerConfigTargetsTheProcessNamespace(t *testing.T) {
	pod := debugPod()
	ec := &pod.Spec.EphemeralContainers[0]
	cfg, _, err := EphemeralContainerConfig(context.Background(), pod, ec, 0, "app-id", nil, PodEnv{}, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ns := cfg.GetLinux().GetSecurityContext().GetNamespaceOptions()
	if ns.GetPid() != runtimeapi.NamespaceMode_TARGET || ns.GetTargetId() != "app-id" {
		t.Errorf("pid namespace %v target %q, want TARGET app-id", ns.GetPid(), ns.GetTargetId())
	}
	if ns.GetNetwork() != runtimeapi.NamespaceMode_POD || ns.GetIpc() != runtimeapi.NamespaceMode_POD {
		t.Errorf("network %v ipc %v, want the pod's", ns.GetNetwork(), ns.GetIpc())
	}
	// The kubelet's labels and hash: those of the container its common fields make.
	c := corev1.Container(ec.EphemeralContainerCommon)
	if cfg.Labels[LabelContainerName] != "debugger-x1" || cfg.Labels[LabelPodUID] != string(pod.UID) || len(cfg.Labels) != 4 {
		t.Errorf("labels %v", cfg.Labels)
	}
	if got, want := cfg.Annotations[AnnotationContainerHash], strconv.FormatUint(Hash(&c), 16); got != want {
		t.Errorf("hash annotation %s, want %s", got, want)
	}
	if cfg.Metadata.GetName() != "debugger-x1" || cfg.Metadata.GetAttempt() != 0 || !cfg.Stdin || !cfg.Tty || cfg.LogPath != "debugger-x1/0.log" {
		t.Errorf("metadata %v stdin %v tty %v log %q", cfg.Metadata, cfg.Stdin, cfg.Tty, cfg.LogPath)
	}
}

func TestEphemeralContainerConfigKeepsSharedNamespaces(t *testing.T) {
	for _, tc := range []struct {
		name   string
		set    func(*corev1.Pod)
		target string
		want   runtimeapi.NamespaceMode
	}{
		{"no target", func(p *corev1.Pod) { p.Spec.EphemeralContainers[0].TargetContainerName = "" }, "", runtimeapi.NamespaceMode_CONTAINER},
		{"shareProcessNamespace", func(p *corev1.Pod) { p.Spec.ShareProcessNamespace = ptrTo(true) }, "app-id", runtimeapi.NamespaceMode_POD},
		{"hostPID", func(p *corev1.Pod) { p.Spec.HostPID = true }, "app-id", runtimeapi.NamespaceMode_NODE},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := debugPod()
			tc.set(pod)
			cfg, _, err := EphemeralContainerConfig(context.Background(), pod, &pod.Spec.EphemeralContainers[0], 0, tc.target, nil, PodEnv{}, nil, Options{})
			if err != nil {
				t.Fatal(err)
			}
			ns := cfg.GetLinux().GetSecurityContext().GetNamespaceOptions()
			if ns.GetPid() != tc.want || ns.GetTargetId() != "" {
				t.Errorf("pid namespace %v target %q, want %v and no target", ns.GetPid(), ns.GetTargetId(), tc.want)
			}
		})
	}
}

func TestEphemeralContainerForbiddenFields(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(*corev1.EphemeralContainer)
		want string
	}{
		{"lifecycle", func(ec *corev1.EphemeralContainer) {
			ec.Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}}
		}, "spec.ephemeralContainers[0].lifecycle: Forbidden: cannot be set for an Ephemeral Container"},
		{"ports", func(ec *corev1.EphemeralContainer) { ec.Ports = []corev1.ContainerPort{{ContainerPort: 80}} }, "spec.ephemeralContainers[0].ports: Forbidden"},
		{"resources", func(ec *corev1.EphemeralContainer) { ec.Resources.Limits = rl("cpu", "1") }, "spec.ephemeralContainers[0].resources: Forbidden"},
		{"livenessProbe", func(ec *corev1.EphemeralContainer) { ec.LivenessProbe = &corev1.Probe{} }, "spec.ephemeralContainers[0].livenessProbe: Forbidden"},
		{"readinessProbe", func(ec *corev1.EphemeralContainer) { ec.ReadinessProbe = &corev1.Probe{} }, "spec.ephemeralContainers[0].readinessProbe: Forbidden"},
		{"startupProbe", func(ec *corev1.EphemeralContainer) { ec.StartupProbe = &corev1.Probe{} }, "spec.ephemeralContainers[0].startupProbe: Forbidden"},
		{"restartPolicy", func(ec *corev1.EphemeralContainer) { ec.RestartPolicy = ptrTo(corev1.ContainerRestartPolicyAlways) }, "spec.ephemeralContainers[0].restartPolicy: Forbidden"},
		{"subPath", func(ec *corev1.EphemeralContainer) {
			ec.VolumeMounts = []corev1.VolumeMount{{Name: "v", MountPath: "/v", SubPath: "x"}}
		}, "spec.ephemeralContainers[0].volumeMounts[0].subPath: Forbidden"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := debugPod()
			ec := &pod.Spec.EphemeralContainers[0]
			tc.set(ec)
			_, _, err := EphemeralContainerConfig(context.Background(), pod, ec, 0, "app-id", nil, PodEnv{}, nil, Options{})
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "ephemeral container debugger-x1") {
				t.Errorf("error %v, want one naming the container and %q", err, tc.want)
			}
		})
	}
	// What kubectl debug sets is allowed.
	pod := debugPod()
	ec := &pod.Spec.EphemeralContainers[0]
	ec.Command, ec.Env, ec.ImagePullPolicy = []string{"sh"}, []corev1.EnvVar{{Name: "A", Value: "b"}}, corev1.PullIfNotPresent
	ec.SecurityContext = &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"SYS_PTRACE"}}}
	ec.VolumeMounts = []corev1.VolumeMount{{Name: "v", MountPath: "/v"}}
	if errs := ValidateEphemeralContainer(ec, EphemeralPath(pod, ec.Name)); len(errs) > 0 {
		t.Errorf("allowed fields refused: %v", errs)
	}
}

func TestEphemeralContainerConfigNeedsTheTargetID(t *testing.T) {
	pod := debugPod()
	_, _, err := EphemeralContainerConfig(context.Background(), pod, &pod.Spec.EphemeralContainers[0], 0, "", nil, PodEnv{}, nil, Options{})
	if err == nil || !strings.Contains(err.Error(), "targetContainerName app") {
		t.Errorf("error %v, want one naming the target", err)
	}
}
