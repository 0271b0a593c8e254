package criconfig

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/unitlet/unitlet/shared/downwardapi"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Objects hands out the ConfigMaps and Secrets a pod's environment refers to. A missing
// object is reported with an error for which apierrors.IsNotFound is true.
type Objects interface {
	ConfigMap(ctx context.Context, ns, name string) (*corev1.ConfigMap, error)
	Secret(ctx context.Context, ns, name string) (*corev1.Secret, error)
}

// PodEnv is what the environment may refer to beyond the pod spec.
type PodEnv struct {
	// PodIP and PodIPs are the sandbox's IPs; PodIPs[0], when set, wins over PodIP.
	PodIP  string
	PodIPs []string
	// HostIP and HostIPs are the node's IPs; HostIPs[0], when set, wins over HostIP.
	HostIP  string
	HostIPs []string
	// Allocatable is the node's allocatable resources, which stand in for limits a
	// container does not set in resourceFieldRef values.
	Allocatable corev1.ResourceList
	// Services are the services the node knows, of every namespace, for the service-link
	// variables (see ServiceLinkEnv); none on a node without an API server.
	Services []*corev1.Service
	// PodsDir is <root-dir>/pods, where fileKeyRef's emptyDir volumes are read.
	PodsDir string
}

// Env resolves the container's environment as the kubelet does: envFrom sources first
// (keys with the prefix), then env entries in order, each overriding what came before;
// a value expands $(VAR) references to variables defined before it. Names from envFrom
// that cannot be environment variable names are left out and returned in skipped.
// Optional references to missing ConfigMaps, Secrets or keys are left out; required ones
// are errors. The service-link variables of pe.Services (see ServiceLinkEnv) come last,
// those the container defines itself left out; $(VAR) references see them too.
// The order is the order of first definition.
func Env(ctx context.Context, pod *corev1.Pod, c *corev1.Container, pe PodEnv, objs Objects) (env []*runtimeapi.KeyValue, skipped []string, err error) {
	// Pods reach podsync defaulted (by the API server or the static pod sources); unset
	// means the API default, true. (The kubelet refuses an unset field.)
	enableLinks := pod.Spec.EnableServiceLinks == nil || *pod.Spec.EnableServiceLinks
	linkNames, links := ServiceLinkEnv(pod.Namespace, enableLinks, pe.Services)
	r := envResolver{ctx: ctx, pod: pod, objs: objs, vals: map[string]string{}}

	for i, from := range c.EnvFrom {
		var data map[string]string
		switch {
		case from.ConfigMapRef != nil:
			cm, err := r.configMap(from.ConfigMapRef.Name, optional(from.ConfigMapRef.Optional))
			if err != nil {
				return nil, nil, fmt.Errorf("container %s: envFrom[%d]: %w", c.Name, i, err)
			}
			if cm == nil {
				continue
			}
			data = cm.Data
		case from.SecretRef != nil:
			s, err := r.secret(from.SecretRef.Name, optional(from.SecretRef.Optional))
			if err != nil {
				return nil, nil, fmt.Errorf("container %s: envFrom[%d]: %w", c.Name, i, err)
			}
			if s == nil {
				continue
			}
			data = make(map[string]string, len(s.Data))
			for k, v := range s.Data {
				data[k] = string(v)
			}
		default:
			continue
		}
		keys := make([]string, 0, len(data))
		for k := range data {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			name := from.Prefix + k
			if len(validation.IsRelaxedEnvVarName(name)) > 0 {
				skipped = append(skipped, name)
				continue
			}
			r.set(name, data[k])
		}
	}

	lookup := func(name string) (string, bool) {
		if v, ok := r.vals[name]; ok {
			return v, ok
		}
		v, ok := links[name]
		return v, ok
	}
	for i := range c.Env {
		ev := &c.Env[i]
		val := ev.Value
		switch {
		case val != "":
			val = Expand(val, lookup)
		case ev.ValueFrom != nil:
			v, ok, err := r.valueFrom(c, ev.ValueFrom, pe)
			if err != nil {
				return nil, nil, fmt.Errorf("container %s: env %s: %w", c.Name, ev.Name, err)
			}
			if !ok {
				continue
			}
			val = v
		}
		r.set(ev.Name, val)
	}

	env = make([]*runtimeapi.KeyValue, 0, len(r.order)+len(linkNames))
	for _, k := range r.order {
		env = append(env, &runtimeapi.KeyValue{Key: k, Value: []byte(r.vals[k])})
	}
	for _, k := range linkNames {
		if _, own := r.vals[k]; !own {
			env = append(env, &runtimeapi.KeyValue{Key: k, Value: []byte(links[k])})
		}
	}
	return env, skipped, nil
}

// EnvMap turns a resolved environment into a map, for expanding command and args.
func EnvMap(env []*runtimeapi.KeyValue) map[string]string {
	m := make(map[string]string, len(env))
	for _, kv := range env {
		m[kv.Key] = string(kv.Value)
	}
	return m
}

func optional(b *bool) bool { return b != nil && *b }

type envResolver struct {
	ctx        context.Context
	pod        *corev1.Pod
	objs       Objects
	configMaps map[string]*corev1.ConfigMap
	secrets    map[string]*corev1.Secret
	vals       map[string]string
	order      []string
}

func (r *envResolver) set(name, val string) {
	if _, ok := r.vals[name]; !ok {
		r.order = append(r.order, name)
	}
	r.vals[name] = val
}

// configMap fetches a ConfigMap once per Env call; nil, nil means optional and missing.
func (r *envResolver) configMap(name string, opt bool) (*corev1.ConfigMap, error) {
	if cm, ok := r.configMaps[name]; ok {
		return cm, nil
	}
	if r.objs == nil {
		return nil, fmt.Errorf("configmap %s/%s: no source for ConfigMaps", r.pod.Namespace, name)
	}
	cm, err := r.objs.ConfigMap(r.ctx, r.pod.Namespace, name)
	if err != nil {
		if opt && apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("get configmap %s/%s: %w", r.pod.Namespace, name, err)
	}
	if r.configMaps == nil {
		r.configMaps = map[string]*corev1.ConfigMap{}
	}
	r.configMaps[name] = cm
	return cm, nil
}

// secret fetches a Secret once per Env call; nil, nil means optional and missing.
func (r *envResolver) secret(name string, opt bool) (*corev1.Secret, error) {
	if s, ok := r.secrets[name]; ok {
		return s, nil
	}
	if r.objs == nil {
		return nil, fmt.Errorf("secret %s/%s: no source for Secrets", r.pod.Namespace, name)
	}
	s, err := r.objs.Secret(r.ctx, r.pod.Namespace, name)
	if err != nil {
		if opt && apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("get secret %s/%s: %w", r.pod.Namespace, name, err)
	}
	if r.secrets == nil {
		r.secrets = map[string]*corev1.Secret{}
	}
	r.secrets[name] = s
	return s, nil
}

// valueFrom resolves one valueFrom source; ok is false when an optional source is
// missing and the variable is to be left out.
func (r *envResolver) valueFrom(c *corev1.Container, src *corev1.EnvVarSource, pe PodEnv) (val string, ok bool, err error) {
	switch {
	case src.FieldRef != nil:
		v, err := fieldRefValue(r.pod, src.FieldRef, pe)
		return v, err == nil, err
	case src.ResourceFieldRef != nil:
		v, err := resourceFieldRefValue(r.pod, c, src.ResourceFieldRef, pe.Allocatable)
		return v, err == nil, err
	case src.ConfigMapKeyRef != nil:
		ref := src.ConfigMapKeyRef
		cm, err := r.configMap(ref.Name, optional(ref.Optional))
		if err != nil || cm == nil {
			return "", false, err
		}
		v, found := cm.Data[ref.Key]
		if !found {
			if optional(ref.Optional) {
				return "", false, nil
			}
			return "", false, fmt.Errorf("configmap %s/%s: no key %q", r.pod.Namespace, ref.Name, ref.Key)
		}
		return v, true, nil
	case src.SecretKeyRef != nil:
		ref := src.SecretKeyRef
		s, err := r.secret(ref.Name, optional(ref.Optional))
		if err != nil || s == nil {
			return "", false, err
		}
		v, found := s.Data[ref.Key]
		if !found {
			if optional(ref.Optional) {
				return "", false, nil
			}
			return "", false, fmt.Errorf("secret %s/%s: no key %q", r.pod.Namespace, ref.Name, ref.Key)
		}
		return string(v), true, nil
	case src.FileKeyRef != nil:
		return fileKeyValue(r.pod, src.FileKeyRef, pe.PodsDir)
	}
	// An empty source sets the variable to "".
	return "", true, nil
}

// fieldRefValue is the downward API value of a fieldRef.
func fieldRefValue(pod *corev1.Pod, ref *corev1.ObjectFieldSelector, pe PodEnv) (string, error) {
	if ref.APIVersion != "" && ref.APIVersion != "v1" {
		return "", fmt.Errorf("fieldRef %s: unsupported apiVersion %q", ref.FieldPath, ref.APIVersion)
	}
	path := ref.FieldPath
	podIPs := pe.PodIPs
	podIP := pe.PodIP
	if len(podIPs) > 0 {
		podIP = podIPs[0]
	} else if podIP != "" {
		podIPs = []string{podIP}
	}
	hostIPs := pe.HostIPs
	if len(hostIPs) == 0 && pe.HostIP != "" {
		hostIPs = []string{pe.HostIP}
	}

	if v, ok, err := downwardapi.MetadataValue(pod, path); ok {
		if err != nil {
			return "", fmt.Errorf("fieldRef: %w", err)
		}
		return v, nil
	}
	switch path {
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.hostIP":
		if len(hostIPs) == 0 {
			return "", fmt.Errorf("fieldRef %s: node IP not known", path)
		}
		return hostIPs[0], nil
	case "status.hostIPs":
		if len(hostIPs) == 0 {
			return "", fmt.Errorf("fieldRef %s: node IP not known", path)
		}
		return strings.Join(hostIPs, ","), nil
	case "status.podIP":
		return podIP, nil
	case "status.podIPs":
		return strings.Join(podIPs, ","), nil
	}
	return "", fmt.Errorf("fieldRef %s: unsupported field path", path)
}

// resourceFieldRefValue is a container's request or limit for a resourceFieldRef; a ref
// naming no container is about c.
func resourceFieldRefValue(pod *corev1.Pod, c *corev1.Container, ref *corev1.ResourceFieldSelector, allocatable corev1.ResourceList) (string, error) {
	target := c
	if ref.ContainerName != "" && ref.ContainerName != c.Name {
		target = downwardapi.FindContainer(pod, ref.ContainerName)
		if target == nil {
			return "", fmt.Errorf("resourceFieldRef %s: no container %q in the pod", ref.Resource, ref.ContainerName)
		}
	}
	return downwardapi.ResourceValue(pod, target, ref, allocatable)
}
