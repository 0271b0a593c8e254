package criconfig

import (
	"context"
	"fmt"
	"reflect"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ephemeralFields are the EphemeralContainerCommon fields (by their JSON names) an
// ephemeral container may set: the API server's allow list. Ports, resources, probes,
// lifecycle hooks, resize and restart policies are for a pod's own containers; a debug
// container must not carry them.
var ephemeralFields = map[string]bool{
	"name": true, "image": true, "command": true, "args": true, "workingDir": true,
	"envFrom": true, "env": true, "volumeMounts": true, "volumeDevices": true,
	"terminationMessagePath": true, "terminationMessagePolicy": true, "imagePullPolicy": true,
	"securityContext": true, "stdin": true, "stdinOnce": true, "tty": true,
}

// ValidateEphemeralContainer refuses the fields the API server forbids in an ephemeral
// container (any field outside its allow list, and subPath or subPathExpr in a volume
// mount), with the API server's wording, under path (spec.ephemeralContainers[i]).
// The API server already refuses them; podsync checks again rather than drop them.
func ValidateEphemeralContainer(ec *corev1.EphemeralContainer, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	const forbidden = "cannot be set for an Ephemeral Container"
	v := reflect.ValueOf(ec.EphemeralContainerCommon)
	t := v.Type()
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if !ephemeralFields[name] && !v.Field(i).IsZero() {
			errs = append(errs, field.Forbidden(path.Child(name), forbidden))
		}
	}
	for i, vm := range ec.VolumeMounts {
		if vm.SubPath != "" {
			errs = append(errs, field.Forbidden(path.Child("volumeMounts").Index(i).Child("subPath"), forbidden))
		}
		if vm.SubPathExpr != "" {
			errs = append(errs, field.Forbidden(path.Child("volumeMounts").Index(i).Child("subPathExpr"), forbidden))
		}
	}
	return errs
}

// EphemeralPath is the field path of the pod's ephemeral container named name.
func EphemeralPath(pod *corev1.Pod, name string) *field.Path {
	p := field.NewPath("spec", "ephemeralContainers")
	for i := range pod.Spec.EphemeralContainers {
		if pod.Spec.EphemeralContainers[i].Name == name {
			return p.Index(i)
		}
	}
	return p.Key(name)
}

// EphemeralContainerConfig builds the CreateContainer config of an ephemeral container
// (kubectl debug) as ContainerConfig does for the container its common fields make, after
// ValidateEphemeralContainer. targetID is the runtime ID of the instance of its
// targetContainerName (empty without one): the container then joins that container's
// process namespace (PID namespace TARGET), unless the pod already shares one, as the
// kubelet does.
func EphemeralContainerConfig(ctx context.Context, pod *corev1.Pod, ec *corev1.EphemeralContainer, restartCount int, targetID string, mounts []Mount, pe PodEnv, objs Objects, o Options) (*runtimeapi.ContainerConfig, string, error) {
	if errs := ValidateEphemeralContainer(ec, EphemeralPath(pod, ec.Name)); len(errs) > 0 {
		return nil, "", fmt.Errorf("ephemeral container %s: %w", ec.Name, errs.ToAggregate())
	}
	if ec.TargetContainerName != "" && targetID == "" {
		return nil, "", fmt.Errorf("ephemeral container %s: targetContainerName %s: no runtime ID given", ec.Name, ec.TargetContainerName)
	}
	c := corev1.Container(ec.EphemeralContainerCommon)
	cfg, termPath, err := ContainerConfig(ctx, pod, &c, restartCount, mounts, pe, objs, o)
	if err != nil {
		return nil, "", err
	}
	if ns := cfg.GetLinux().GetSecurityContext().GetNamespaceOptions(); targetID != "" && ns != nil && ns.Pid == runtimeapi.NamespaceMode_CONTAINER {
		ns.Pid, ns.TargetId = runtimeapi.NamespaceMode_TARGET, targetID
	}
	return cfg, termPath, nil
}
