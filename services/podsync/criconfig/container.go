package criconfig

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ContainerConfig builds the CreateContainer config for one instance of the container
// (restartCount is its attempt): metadata, image, command and args with $(VAR)
// expansion, working dir, environment (see Env), the given mounts plus the
// termination-message file, log path, stdin/tty, the kubelet's labels and annotations,
// and the Linux resources and security context.
//
// Image is the spec's image; a caller that resolved it to an image ID may set
// cfg.Image.Image to that. runAsNonRoot needs the image's user: check it with
// VerifyRunAsNonRoot. When the container has a terminationMessagePath and
// Options.PodsDir is set, terminationMessageHostPath is the host file to mount there:
// <PodsDir>/<pod uid>/containers/<name>/<random id>; the caller creates it (mode 0666)
// before creating the container.
func ContainerConfig(ctx context.Context, pod *corev1.Pod, c *corev1.Container, restartCount int, mounts []Mount, pe PodEnv, objs Objects, o Options) (cfg *runtimeapi.ContainerConfig, terminationMessageHostPath string, err error) {
	if restartCount < 0 {
		return nil, "", fmt.Errorf("container %s: restart count %d: must not be negative", c.Name, restartCount)
	}
	env, _, err := Env(ctx, pod, c, pe, objs)
	if err != nil {
		return nil, "", err
	}
	vars := EnvMap(env)
	lookup := func(name string) (string, bool) {
		v, ok := vars[name]
		return v, ok
	}
	annotations, err := containerAnnotations(pod, c, restartCount)
	if err != nil {
		return nil, "", err
	}

	cfg = &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{
			Name:    c.Name,
			Attempt: uint32(restartCount),
		},
		Image:       &runtimeapi.ImageSpec{Image: c.Image, UserSpecifiedImage: c.Image},
		Command:     expandAll(c.Command, lookup),
		Args:        expandAll(c.Args, lookup),
		WorkingDir:  c.WorkingDir,
		Envs:        env,
		Labels:      containerLabels(pod, c),
		Annotations: annotations,
		LogPath:     ContainerLogPath(c.Name, restartCount),
		Stdin:       c.Stdin,
		StdinOnce:   c.StdinOnce,
		Tty:         c.TTY,
	}

	cfg.Mounts, cfg.Devices, err = criMounts(c, mounts, o.RecursiveReadOnly)
	if err != nil {
		return nil, "", err
	}
	if c.TerminationMessagePath != "" && o.PodsDir != "" {
		terminationMessageHostPath = filepath.Join(o.PodsDir, string(pod.UID), "containers", c.Name, fmt.Sprintf("%08x", rand.Uint32()))
		cfg.Mounts = append(cfg.Mounts, &runtimeapi.Mount{
			HostPath:      terminationMessageHostPath,
			ContainerPath: c.TerminationMessagePath,
		})
	}

	if ns := o.UserNamespace; ns != nil && ns.Mode == runtimeapi.NamespaceMode_POD {
		// The volumes, mapped into the pod's user namespace (idmapped mounts).
		for _, m := range cfg.Mounts {
			m.UidMappings, m.GidMappings = ns.Uids, ns.Gids
		}
	}
	sc, err := containerSecurityContext(pod, c, o)
	if err != nil {
		return nil, "", err
	}
	cfg.Linux = &runtimeapi.LinuxContainerConfig{
		Resources:       containerResources(pod, c, o),
		SecurityContext: sc,
	}
	return cfg, terminationMessageHostPath, nil
}

func expandAll(in []string, lookup func(string) (string, bool)) []string {
	if len(in) == 0 {
		return nil
	}
	out := make([]string, len(in))
	for i, s := range in {
		out[i] = Expand(s, lookup)
	}
	return out
}

// criMounts turns prepared mounts into CRI mounts and devices; a subPath is joined to the
// host path and must stay inside it. A device gets the kubelet's cgroup permissions: "mrw",
// or "r" when read-only. A volumeMount's recursiveReadOnly is applied as the kubelet
// applies it, rro saying whether the pod's runtime handler supports it.
func criMounts(c *corev1.Container, mounts []Mount, rro bool) ([]*runtimeapi.Mount, []*runtimeapi.Device, error) {
	container := c.Name
	out := make([]*runtimeapi.Mount, 0, len(mounts)+1)
	var devices []*runtimeapi.Device
	for i, m := range mounts {
		if m.Image != "" {
			// The runtime mounts the image itself (CRI image volumes), read-only.
			out = append(out, &runtimeapi.Mount{ContainerPath: m.ContainerPath, Image: &runtimeapi.ImageSpec{Image: m.Image}, ImageSubPath: m.SubPath, Readonly: true})
			continue
		}
		if m.ContainerPath == "" || m.HostPath == "" {
			return nil, nil, fmt.Errorf("container %s: mount %d: container and host paths are required", container, i)
		}
		if m.Device {
			perms := "mrw"
			if m.ReadOnly {
				perms = "r"
			}
			devices = append(devices, &runtimeapi.Device{ContainerPath: m.ContainerPath, HostPath: m.HostPath, Permissions: perms})
			continue
		}
		host := m.HostPath
		if m.SubPath != "" {
			sub := filepath.Clean(m.SubPath)
			if filepath.IsAbs(sub) || sub == ".." || strings.HasPrefix(sub, "../") {
				return nil, nil, fmt.Errorf("container %s: mount %s: subPath %q: must be a relative path inside the volume", container, m.ContainerPath, m.SubPath)
			}
			host = filepath.Join(host, sub)
		}
		recursive, err := recursiveReadOnly(c, m, rro)
		if err != nil {
			return nil, nil, err
		}
		out = append(out, &runtimeapi.Mount{
			ContainerPath:     m.ContainerPath,
			HostPath:          host,
			Readonly:          m.ReadOnly,
			RecursiveReadOnly: recursive,
			Propagation:       m.Propagation,
		})
	}
	return out, devices, nil
}

// recursiveReadOnly is whether mount m of c is made read-only with its submounts, by its
// volumeMount's recursiveReadOnly (found by mount path; see RecursiveReadOnly).
func recursiveReadOnly(c *corev1.Container, m Mount, supported bool) (bool, error) {
	i := slices.IndexFunc(c.VolumeMounts, func(vm corev1.VolumeMount) bool { return vm.MountPath == m.ContainerPath })
	if i < 0 {
		return false, nil
	}
	return RecursiveReadOnly(c.VolumeMounts[i], supported)
}

// RecursiveReadOnly is whether a volumeMount is made read-only with its submounts, as the
// kubelet resolves its recursiveReadOnly, supported saying whether the pod's runtime
// handler can: Enabled needs the support, IfPossible takes it where there is some, and
// either needs a read-only mount without propagation. The kubelet's messages.
func RecursiveReadOnly(vm corev1.VolumeMount, supported bool) (bool, error) {
	if vm.RecursiveReadOnly == nil || *vm.RecursiveReadOnly == corev1.RecursiveReadOnlyDisabled {
		return false, nil
	}
	if !vm.ReadOnly {
		return false, fmt.Errorf("volume %q requested recursive read-only mode, but it is not read-only", vm.Name)
	}
	var on bool
	switch *vm.RecursiveReadOnly {
	case corev1.RecursiveReadOnlyIfPossible:
		on = supported
	case corev1.RecursiveReadOnlyEnabled:
		if !supported {
			return false, fmt.Errorf("volume %q requested recursive read-only mode, but it is not supported by the runtime", vm.Name)
		}
		on = true
	default:
		return false, fmt.Errorf("unknown recursive read-only mode %q", *vm.RecursiveReadOnly)
	}
	if on && vm.MountPropagation != nil && *vm.MountPropagation != corev1.MountPropagationNone {
		return false, fmt.Errorf("volume %q requested recursive read-only mode, but it is not compatible with propagation %q", vm.Name, *vm.MountPropagation)
	}
	return on, nil
}
