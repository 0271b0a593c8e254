package criconfig

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// ExpandSubPathExprs returns c with each volumeMount's subPathExpr expanded into its
// subPath, as the kubelet does before each start of the container: $(VAR) references to
// the container's environment (its env, envFrom and service links, see Env). A reference
// to a variable that is unset or empty, an absolute result or one with a ".." element is
// an error naming the mount. c itself is not changed; without subPathExpr it is returned
// as it is.
func ExpandSubPathExprs(ctx context.Context, pod *corev1.Pod, c *corev1.Container, pe PodEnv, objs Objects) (*corev1.Container, error) {
	if !slices.ContainsFunc(c.VolumeMounts, func(vm corev1.VolumeMount) bool { return vm.SubPathExpr != "" }) {
		return c, nil
	}
	env, _, err := Env(ctx, pod, c, pe, objs)
	if err != nil {
		return nil, err
	}
	vars := EnvMap(env)
	out := c.DeepCopy()
	for i := range out.VolumeMounts {
		vm := &out.VolumeMounts[i]
		if vm.SubPathExpr == "" {
			continue
		}
		missing := map[string]bool{}
		sub := Expand(vm.SubPathExpr, func(name string) (string, bool) {
			v, ok := vars[name]
			if !ok || v == "" {
				missing[name] = true
			}
			return v, true
		})
		if len(missing) > 0 {
			names := make([]string, 0, len(missing))
			for n := range missing {
				names = append(names, n)
			}
			sort.Strings(names)
			return nil, fmt.Errorf("volumeMount %q of container %s: subPathExpr %q: missing value for %s", vm.Name, c.Name, vm.SubPathExpr, strings.Join(names, ", "))
		}
		if filepath.IsAbs(sub) {
			return nil, fmt.Errorf("volumeMount %q of container %s: subPathExpr %q expands to %q, which must not be an absolute path", vm.Name, c.Name, vm.SubPathExpr, sub)
		}
		if slices.Contains(strings.Split(filepath.ToSlash(sub), "/"), "..") {
			return nil, fmt.Errorf("volumeMount %q of container %s: subPathExpr %q expands to %q, which must not contain '..'", vm.Name, c.Name, vm.SubPathExpr, sub)
		}
		vm.SubPath, vm.SubPathExpr = sub, ""
	}
	return out, nil
}

// WithContainer is pod with its container (init or app) of c's name replaced by c.
func WithContainer(pod *corev1.Pod, c *corev1.Container) *corev1.Pod {
	out := pod.DeepCopy()
	for _, list := range [][]corev1.Container{out.Spec.InitContainers, out.Spec.Containers} {
		for i := range list {
			if list[i].Name == c.Name {
				list[i] = *c
			}
		}
	}
	return out
}
