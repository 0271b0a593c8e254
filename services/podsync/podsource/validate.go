package podsource

import (
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	podutil "k8s.io/kubernetes/pkg/api/pod"
	"k8s.io/kubernetes/pkg/apis/core"
	k8sv1 "k8s.io/kubernetes/pkg/apis/core/v1"
	"k8s.io/kubernetes/pkg/apis/core/validation"
	"k8s.io/kubernetes/pkg/capabilities"
)

// validateStaticPod checks a completed static pod as the kubelet does before it runs one:
// the API server's whole validation of a new pod (ValidatePodCreate, with the options the
// pod's own spec and metadata call for), and no reference to API objects (a static pod
// must run without the API server: the kubelet's PreventStaticPodAPIReferences check).
func validateStaticPod(pod *corev1.Pod) field.ErrorList {
	if err := allowPrivileged(); err != nil {
		return field.ErrorList{field.InternalError(nil, err)}
	}
	// The conversion may share slices and maps with its input; validation only reads.
	internal := &core.Pod{}
	if err := k8sv1.Convert_v1_Pod_To_core_Pod(pod.DeepCopy(), internal, nil); err != nil {
		return field.ErrorList{field.InternalError(nil, fmt.Errorf("convert the pod to the API's internal type: %w", err))}
	}
	opts := podutil.GetValidationOptionsFromPodSpecAndMeta(&internal.Spec, nil, &internal.ObjectMeta, nil)
	errs := validation.ValidatePodCreate(internal, opts)
	errs = append(errs, validateNoAPIReferences(&pod.Spec, field.NewPath("spec"))...)
	if len(errs) > 0 {
		return errs
	}
	// The kubelet's own list of what needs the API server, in case it names something
	// validateNoAPIReferences does not.
	_, resource, err := podutil.HasAPIObjectReference(internal)
	switch {
	case err != nil:
		return field.ErrorList{field.Invalid(field.NewPath("spec", "volumes"), nil, err.Error())}
	case resource != "":
		return field.ErrorList{field.Forbidden(field.NewPath("spec"), "static pods may not reference "+resource)}
	}
	return nil
}

// validateNoAPIReferences rejects, naming the field, what a static pod cannot use because
// it would need the API server: service accounts, secrets, config maps, claims and
// volumes backed by API objects.
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

// allowPrivileged tells the API's validation that this node runs privileged containers,
// as the kubelet does when it starts: the validation reads a process-wide setting, set
// once, that refuses them otherwise. Nothing else in podsync reads or sets it.
func allowPrivileged() error {
	capabilities.Initialize(capabilities.Capabilities{AllowPrivileged: true})
	if !capabilities.Get().AllowPrivileged {
		return errors.New("the API's validation was set up to refuse privileged containers before podsync allowed them")
	}
	return nil
}
