package criconfig

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
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

	cfg.Mounts, err = criMounts(c.Name, mounts)
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

// criMounts turns prepared mounts into CRI mounts; a subPath is joined to the host
// path and must stay inside it.
func criMounts(container string, mounts []Mount) ([]*runtimeapi.Mount, error) {
	out := make([]*runtimeapi.Mount, 0, len(mounts)+1)
	for i, m := range mounts {
		if m.ContainerPath == "" || m.HostPath == "" {
			return nil, fmt.Errorf("container %s: mount %d: container and host paths are required", container, i)
		}
		host := m.HostPath
		if m.SubPath != "" {
			sub := filepath.Clean(m.SubPath)
			if filepath.IsAbs(sub) || sub == ".." || strings.HasPrefix(sub, "../") {
				return nil, fmt.Errorf("container %s: mount %s: subPath %q: must be a relative path inside the volume", container, m.ContainerPath, m.SubPath)
			}
			host = filepath.Join(host, sub)
		}
		out = append(out, &runtimeapi.Mount{
			ContainerPath: m.ContainerPath,
			HostPath:      host,
			Readonly:      m.ReadOnly,
			Propagation:   m.Propagation,
		})
	}
	return out, nil
}
