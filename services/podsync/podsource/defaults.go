package podsource

import (
	"reflect"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// defaultFileMode is the API server's default mode for files of downwardAPI and projected volumes.
const defaultFileMode int32 = 0o644

// applyAPIDefaults fills in what the API server's defaulting would for a v1 Pod, limited to
// the fields that change how the pod runs. Static pods never pass through the API server,
// so without this a manifest that leaves them out would run differently from the same pod
// created through the API.
func applyAPIDefaults(pod *corev1.Pod) {
	spec := &pod.Spec
	if spec.DNSPolicy == "" {
		spec.DNSPolicy = corev1.DNSClusterFirst
	}
	if spec.RestartPolicy == "" {
		spec.RestartPolicy = corev1.RestartPolicyAlways
	}
	if spec.SecurityContext == nil {
		spec.SecurityContext = &corev1.PodSecurityContext{}
	}
	if spec.TerminationGracePeriodSeconds == nil {
		spec.TerminationGracePeriodSeconds = ptr.To[int64](corev1.DefaultTerminationGracePeriodSeconds)
	}
	if spec.SchedulerName == "" {
		spec.SchedulerName = corev1.DefaultSchedulerName
	}
	if spec.EnableServiceLinks == nil {
		spec.EnableServiceLinks = ptr.To(corev1.DefaultEnableServiceLinks)
	}
	for i := range spec.InitContainers {
		defaultContainer(&spec.InitContainers[i], spec.HostNetwork)
	}
	for i := range spec.Containers {
		defaultContainer(&spec.Containers[i], spec.HostNetwork)
	}
	for i := range spec.Volumes {
		defaultVolume(&spec.Volumes[i])
	}
}

func defaultContainer(c *corev1.Container, hostNetwork bool) {
	if c.ImagePullPolicy == "" {
		if imageTag(c.Image) == "latest" {
			c.ImagePullPolicy = corev1.PullAlways
		} else {
			c.ImagePullPolicy = corev1.PullIfNotPresent
		}
	}
	if c.TerminationMessagePath == "" {
		c.TerminationMessagePath = corev1.TerminationMessagePathDefault
	}
	if c.TerminationMessagePolicy == "" {
		c.TerminationMessagePolicy = corev1.TerminationMessageReadFile
	}
	for i := range c.Ports {
		p := &c.Ports[i]
		if p.Protocol == "" {
			p.Protocol = corev1.ProtocolTCP
		}
		if hostNetwork && p.HostPort == 0 {
			p.HostPort = p.ContainerPort
		}
	}
	// Requests default to limits for every resource that has a limit and no request.
	if len(c.Resources.Limits) > 0 {
		if c.Resources.Requests == nil {
			c.Resources.Requests = corev1.ResourceList{}
		}
		for name, limit := range c.Resources.Limits {
			if _, ok := c.Resources.Requests[name]; !ok {
				c.Resources.Requests[name] = limit.DeepCopy()
			}
		}
	}
	for _, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe} {
		defaultProbe(p)
	}
	if c.Lifecycle != nil {
		defaultHandler(c.Lifecycle.PostStart)
		defaultHandler(c.Lifecycle.PreStop)
	}
	for i := range c.Env {
		if from := c.Env[i].ValueFrom; from != nil && from.FieldRef != nil && from.FieldRef.APIVersion == "" {
			from.FieldRef.APIVersion = "v1"
		}
	}
}

func defaultProbe(p *corev1.Probe) {
	if p == nil {
		return
	}
	if p.TimeoutSeconds == 0 {
		p.TimeoutSeconds = 1
	}
	if p.PeriodSeconds == 0 {
		p.PeriodSeconds = 10
	}
	if p.SuccessThreshold == 0 {
		p.SuccessThreshold = 1
	}
	if p.FailureThreshold == 0 {
		p.FailureThreshold = 3
	}
	defaultHTTPGet(p.HTTPGet)
	if p.GRPC != nil && p.GRPC.Service == nil {
		p.GRPC.Service = ptr.To("")
	}
}

func defaultHandler(h *corev1.LifecycleHandler) {
	if h != nil {
		defaultHTTPGet(h.HTTPGet)
	}
}

func defaultHTTPGet(g *corev1.HTTPGetAction) {
	if g == nil {
		return
	}
	if g.Path == "" {
		g.Path = "/"
	}
	if g.Scheme == "" {
		g.Scheme = corev1.URISchemeHTTP
	}
}

func defaultVolume(v *corev1.Volume) {
	if volumeSourceEmpty(&v.VolumeSource) {
		v.EmptyDir = &corev1.EmptyDirVolumeSource{}
	}
	if d := v.DownwardAPI; d != nil && d.DefaultMode == nil {
		d.DefaultMode = ptr.To(defaultFileMode)
	}
	if p := v.Projected; p != nil && p.DefaultMode == nil {
		p.DefaultMode = ptr.To(defaultFileMode)
	}
	if h := v.HostPath; h != nil && h.Type == nil {
		h.Type = ptr.To(corev1.HostPathUnset)
	}
}

// volumeSourceEmpty reports whether no volume source is set. VolumeSource is a struct of
// pointers, one per volume type, so this stays right as volume types are added.
func volumeSourceEmpty(src *corev1.VolumeSource) bool {
	v := reflect.ValueOf(src).Elem()
	for i := range v.NumField() {
		if f := v.Field(i); f.Kind() == reflect.Pointer && !f.IsNil() {
			return false
		}
	}
	return true
}

// imageTag returns the tag an image reference names: "latest" when it names neither a tag
// nor a digest, "" when it names only a digest.
func imageTag(image string) string {
	ref, _, hasDigest := strings.Cut(image, "@")
	last := ref[strings.LastIndex(ref, "/")+1:]
	if i := strings.LastIndex(last, ":"); i >= 0 {
		return last[i+1:]
	}
	if hasDigest {
		return ""
	}
	return "latest"
}
