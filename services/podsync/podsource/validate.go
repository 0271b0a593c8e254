package podsource

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// validateStaticPod checks what podsync needs of a static pod before it may run it: the
// metadata the API server would accept, containers that can be started, and no reference
// to API objects (a static pod must run without the API server, as the kubelet's
// PreventStaticPodAPIReferences check requires).
func validateStaticPod(pod *corev1.Pod) field.ErrorList {
	errs := apivalidation.ValidateObjectMeta(&pod.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	errs = append(errs, validateSpec(&pod.Spec, field.NewPath("spec"))...)
	return errs
}

func validateSpec(spec *corev1.PodSpec, path *field.Path) field.ErrorList {
	restartPolicies := []corev1.RestartPolicy{corev1.RestartPolicyAlways, corev1.RestartPolicyOnFailure, corev1.RestartPolicyNever}
	dnsPolicies := []corev1.DNSPolicy{corev1.DNSClusterFirstWithHostNet, corev1.DNSClusterFirst, corev1.DNSDefault, corev1.DNSNone}
	var errs field.ErrorList
	if len(spec.Containers) == 0 {
		errs = append(errs, field.Required(path.Child("containers"), "a pod needs at least one container"))
	}
	if !slices.Contains(restartPolicies, spec.RestartPolicy) {
		errs = append(errs, field.NotSupported(path.Child("restartPolicy"), spec.RestartPolicy, restartPolicies))
	}
	if !slices.Contains(dnsPolicies, spec.DNSPolicy) {
		errs = append(errs, field.NotSupported(path.Child("dnsPolicy"), spec.DNSPolicy, dnsPolicies))
	}
	if g := spec.TerminationGracePeriodSeconds; g != nil {
		errs = append(errs, apivalidation.ValidateNonnegativeField(*g, path.Child("terminationGracePeriodSeconds"))...)
	}
	if len(spec.EphemeralContainers) > 0 {
		errs = append(errs, field.Forbidden(path.Child("ephemeralContainers"), "cannot be set on create"))
	}

	volumes, volErrs := validateVolumes(spec.Volumes, path.Child("volumes"))
	errs = append(errs, volErrs...)

	names := sets.New[string]()
	for i := range spec.InitContainers {
		errs = append(errs, validateContainer(&spec.InitContainers[i], true, spec.HostNetwork, names, volumes, path.Child("initContainers").Index(i))...)
	}
	for i := range spec.Containers {
		errs = append(errs, validateContainer(&spec.Containers[i], false, spec.HostNetwork, names, volumes, path.Child("containers").Index(i))...)
	}
	errs = append(errs, validateNoAPIReferences(spec, path)...)
	return errs
}

func validateVolumes(vols []corev1.Volume, path *field.Path) (sets.Set[string], field.ErrorList) {
	var errs field.ErrorList
	names := sets.New[string]()
	for i := range vols {
		p := path.Index(i).Child("name")
		name := vols[i].Name
		switch {
		case name == "":
			errs = append(errs, field.Required(p, ""))
		case names.Has(name):
			errs = append(errs, field.Duplicate(p, name))
		default:
			for _, msg := range validation.IsDNS1123Label(name) {
				errs = append(errs, field.Invalid(p, name, msg))
			}
		}
		names.Insert(name)
	}
	return names, errs
}

// validateContainer checks one container; names collects the container names seen so far,
// which must be unique across init and app containers.
func validateContainer(c *corev1.Container, isInit, hostNetwork bool, names, volumes sets.Set[string], path *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch p := path.Child("name"); {
	case c.Name == "":
		errs = append(errs, field.Required(p, ""))
	case names.Has(c.Name):
		errs = append(errs, field.Duplicate(p, c.Name))
	default:
		for _, msg := range validation.IsDNS1123Label(c.Name) {
			errs = append(errs, field.Invalid(p, c.Name, msg))
		}
	}
	names.Insert(c.Name)

	switch p := path.Child("image"); {
	case c.Image == "":
		errs = append(errs, field.Required(p, ""))
	case strings.TrimSpace(c.Image) != c.Image:
		errs = append(errs, field.Invalid(p, c.Image, "must not have leading or trailing whitespace"))
	}

	if c.RestartPolicy != nil {
		p := path.Child("restartPolicy")
		switch {
		case !isInit:
			errs = append(errs, field.Forbidden(p, "may only be set for init containers"))
		case *c.RestartPolicy != corev1.ContainerRestartPolicyAlways:
			errs = append(errs, field.NotSupported(p, *c.RestartPolicy, []corev1.ContainerRestartPolicy{corev1.ContainerRestartPolicyAlways}))
		}
	}

	protocols := []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP}
	portNames := sets.New[string]()
	for i, port := range c.Ports {
		p := path.Child("ports").Index(i)
		for _, msg := range validation.IsValidPortNum(int(port.ContainerPort)) {
			errs = append(errs, field.Invalid(p.Child("containerPort"), port.ContainerPort, msg))
		}
		if port.HostPort != 0 {
			for _, msg := range validation.IsValidPortNum(int(port.HostPort)) {
				errs = append(errs, field.Invalid(p.Child("hostPort"), port.HostPort, msg))
			}
		}
		if hostNetwork && port.HostPort != port.ContainerPort {
			errs = append(errs, field.Invalid(p.Child("hostPort"), port.HostPort, "must match containerPort when hostNetwork is true"))
		}
		if !slices.Contains(protocols, port.Protocol) {
			errs = append(errs, field.NotSupported(p.Child("protocol"), port.Protocol, protocols))
		}
		if port.Name != "" {
			if portNames.Has(port.Name) {
				errs = append(errs, field.Duplicate(p.Child("name"), port.Name))
			}
			portNames.Insert(port.Name)
			for _, msg := range validation.IsValidPortName(port.Name) {
				errs = append(errs, field.Invalid(p.Child("name"), port.Name, msg))
			}
		}
	}

	for i, m := range c.VolumeMounts {
		p := path.Child("volumeMounts").Index(i)
		if !volumes.Has(m.Name) {
			errs = append(errs, field.NotFound(p.Child("name"), m.Name))
		}
		if m.MountPath == "" {
			errs = append(errs, field.Required(p.Child("mountPath"), ""))
		}
	}

	errs = append(errs, validateProbe(c.LivenessProbe, true, path.Child("livenessProbe"))...)
	errs = append(errs, validateProbe(c.ReadinessProbe, false, path.Child("readinessProbe"))...)
	errs = append(errs, validateProbe(c.StartupProbe, true, path.Child("startupProbe"))...)
	return errs
}

// validateProbe checks that a probe has exactly one action and sane numbers; liveness and
// startup probes must succeed once to count (successThreshold 1).
func validateProbe(p *corev1.Probe, successMustBeOne bool, path *field.Path) field.ErrorList {
	if p == nil {
		return nil
	}
	var errs field.ErrorList
	actions := 0
	for _, set := range []bool{p.Exec != nil, p.HTTPGet != nil, p.TCPSocket != nil, p.GRPC != nil} {
		if set {
			actions++
		}
	}
	switch {
	case actions == 0:
		errs = append(errs, field.Required(path, "must specify a handler type (exec, httpGet, tcpSocket or grpc)"))
	case actions > 1:
		errs = append(errs, field.Forbidden(path, "may not specify more than one handler type"))
	}
	for _, f := range []struct {
		name  string
		value int32
	}{
		{"initialDelaySeconds", p.InitialDelaySeconds},
		{"timeoutSeconds", p.TimeoutSeconds},
		{"periodSeconds", p.PeriodSeconds},
		{"successThreshold", p.SuccessThreshold},
		{"failureThreshold", p.FailureThreshold},
	} {
		errs = append(errs, apivalidation.ValidateNonnegativeField(int64(f.value), path.Child(f.name))...)
	}
	if successMustBeOne && p.SuccessThreshold != 1 {
		errs = append(errs, field.Invalid(path.Child("successThreshold"), p.SuccessThreshold, "must be 1"))
	}
	return errs
}

// validateNoAPIReferences rejects what a static pod cannot use because it would need the
// API server: service accounts, secrets, config maps, claims and volumes backed by API objects.
func validateNoAPIReferences(spec *corev1.PodSpec, path *field.Path) field.ErrorList {
	const why = "static pods may not reference API objects"
	var errs field.ErrorList
	if spec.ServiceAccountName != "" {
		errs = append(errs, field.Forbidden(path.Child("serviceAccountName"), why))
	}
	if len(spec.ImagePullSecrets) > 0 {
		errs = append(errs, field.Forbidden(path.Child("imagePullSecrets"), why))
	}
	if len(spec.ResourceClaims) > 0 {
		errs = append(errs, field.Forbidden(path.Child("resourceClaims"), why))
	}
	for i := range spec.Volumes {
		v := &spec.Volumes[i]
		p := path.Child("volumes").Index(i)
		switch {
		case v.Secret != nil, v.ConfigMap != nil, v.PersistentVolumeClaim != nil, v.Ephemeral != nil,
			v.CSI != nil, v.Glusterfs != nil, v.AzureFile != nil:
			errs = append(errs, field.Forbidden(p, why))
		case v.Projected != nil:
			for j, s := range v.Projected.Sources {
				if s.DownwardAPI == nil {
					errs = append(errs, field.Forbidden(p.Child("projected", "sources").Index(j), why))
				}
			}
		}
	}
	check := func(c *corev1.Container, p *field.Path) {
		for i, e := range c.Env {
			if from := e.ValueFrom; from != nil && (from.SecretKeyRef != nil || from.ConfigMapKeyRef != nil) {
				errs = append(errs, field.Forbidden(p.Child("env").Index(i).Child("valueFrom"), why))
			}
		}
		for i, e := range c.EnvFrom {
			if e.SecretRef != nil || e.ConfigMapRef != nil {
				errs = append(errs, field.Forbidden(p.Child("envFrom").Index(i), why))
			}
		}
	}
	for i := range spec.InitContainers {
		check(&spec.InitContainers[i], path.Child("initContainers").Index(i))
	}
	for i := range spec.Containers {
		check(&spec.Containers[i], path.Child("containers").Index(i))
	}
	return errs
}
