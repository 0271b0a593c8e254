package criconfig

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The paths a container's /proc and /sys hide or keep read-only unless it runs
// privileged or asks for an Unmasked procMount (the runtime defaults the kubelet sends).
var (
	defaultMaskedPaths = []string{
		"/proc/asound",
		"/proc/acpi",
		"/proc/interrupts",
		"/proc/kcore",
		"/proc/keys",
		"/proc/latency_stats",
		"/proc/timer_list",
		"/proc/timer_stats",
		"/proc/sched_debug",
		"/proc/scsi",
		"/sys/firmware",
		"/sys/devices/virtual/powercap",
	}
	defaultReadonlyPaths = []string{
		"/proc/bus",
		"/proc/fs",
		"/proc/irq",
		"/proc/sys",
		"/proc/sysrq-trigger",
	}
)

// effectiveSecurityContext merges the pod's security context under the container's:
// a field the container sets wins.
func effectiveSecurityContext(pod *corev1.Pod, c *corev1.Container) corev1.SecurityContext {
	var sc corev1.SecurityContext
	if psc := pod.Spec.SecurityContext; psc != nil {
		sc.SELinuxOptions = psc.SELinuxOptions
		sc.RunAsUser = psc.RunAsUser
		sc.RunAsGroup = psc.RunAsGroup
		sc.RunAsNonRoot = psc.RunAsNonRoot
		sc.SeccompProfile = psc.SeccompProfile
		sc.AppArmorProfile = psc.AppArmorProfile
	}
	csc := c.SecurityContext
	if csc == nil {
		return sc
	}
	if csc.SELinuxOptions != nil {
		sc.SELinuxOptions = csc.SELinuxOptions
	}
	if csc.RunAsUser != nil {
		sc.RunAsUser = csc.RunAsUser
	}
	if csc.RunAsGroup != nil {
		sc.RunAsGroup = csc.RunAsGroup
	}
	if csc.RunAsNonRoot != nil {
		sc.RunAsNonRoot = csc.RunAsNonRoot
	}
	if csc.SeccompProfile != nil {
		sc.SeccompProfile = csc.SeccompProfile
	}
	if csc.AppArmorProfile != nil {
		sc.AppArmorProfile = csc.AppArmorProfile
	}
	sc.Capabilities = csc.Capabilities
	sc.Privileged = csc.Privileged
	sc.ReadOnlyRootFilesystem = csc.ReadOnlyRootFilesystem
	sc.AllowPrivilegeEscalation = csc.AllowPrivilegeEscalation
	sc.ProcMount = csc.ProcMount
	return sc
}

// containerSecurityContext maps the effective security context to the CRI one.
func containerSecurityContext(pod *corev1.Pod, c *corev1.Container, o Options) (*runtimeapi.LinuxContainerSecurityContext, error) {
	sc := effectiveSecurityContext(pod, c)
	out := &runtimeapi.LinuxContainerSecurityContext{
		NamespaceOptions: namespaceOptions(pod, o),
		Privileged:       sc.Privileged != nil && *sc.Privileged,
		ReadonlyRootfs:   sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem,
		NoNewPrivs:       sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation,
	}
	if sc.RunAsUser != nil {
		out.RunAsUser = &runtimeapi.Int64Value{Value: *sc.RunAsUser}
	}
	if sc.RunAsGroup != nil {
		out.RunAsGroup = &runtimeapi.Int64Value{Value: *sc.RunAsGroup}
	}
	if caps := sc.Capabilities; caps != nil {
		out.Capabilities = &runtimeapi.Capability{
			AddCapabilities:  make([]string, 0, len(caps.Add)),
			DropCapabilities: make([]string, 0, len(caps.Drop)),
		}
		for _, c := range caps.Add {
			out.Capabilities.AddCapabilities = append(out.Capabilities.AddCapabilities, string(c))
		}
		for _, c := range caps.Drop {
			out.Capabilities.DropCapabilities = append(out.Capabilities.DropCapabilities, string(c))
		}
	}
	if s := sc.SELinuxOptions; s != nil {
		out.SelinuxOptions = &runtimeapi.SELinuxOption{User: s.User, Role: s.Role, Type: s.Type, Level: s.Level}
	}
	if psc := pod.Spec.SecurityContext; psc != nil {
		out.SupplementalGroups = supplementalGroups(psc)
		var err error
		if out.SupplementalGroupsPolicy, err = supplementalGroupsPolicy(psc); err != nil {
			return nil, err
		}
	}
	unmasked := sc.ProcMount != nil && *sc.ProcMount == corev1.UnmaskedProcMount
	if !out.Privileged && !unmasked {
		out.MaskedPaths = append([]string(nil), defaultMaskedPaths...)
		out.ReadonlyPaths = append([]string(nil), defaultReadonlyPaths...)
	}

	seccomp, err := seccompProfile(sc.SeccompProfile, o)
	if err != nil {
		return nil, fmt.Errorf("container %s: securityContext.seccompProfile: %w", c.Name, err)
	}
	out.Seccomp = seccomp
	apparmor, legacy, err := appArmorProfile(pod, c, sc.AppArmorProfile)
	if err != nil {
		return nil, fmt.Errorf("container %s: securityContext.appArmorProfile: %w", c.Name, err)
	}
	out.Apparmor = apparmor
	//lint:ignore SA1019 containerd 1.6 reads only the string form of the profile
	out.ApparmorProfile = legacy
	return out, nil
}

// seccompProfile: the container's or else the pod's profile; with none, RuntimeDefault
// when the node defaults to it, else Unconfined.
func seccompProfile(p *corev1.SeccompProfile, o Options) (*runtimeapi.SecurityProfile, error) {
	if p == nil {
		if o.SeccompDefault {
			return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}, nil
		}
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}, nil
	}
	switch p.Type {
	case corev1.SeccompProfileTypeRuntimeDefault:
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}, nil
	case corev1.SeccompProfileTypeLocalhost:
		if p.LocalhostProfile == nil || *p.LocalhostProfile == "" {
			return nil, errors.New("localhostProfile is required with type Localhost")
		}
		return &runtimeapi.SecurityProfile{
			ProfileType:  runtimeapi.SecurityProfile_Localhost,
			LocalhostRef: filepath.Join(o.SeccompProfileRoot, *p.LocalhostProfile),
		}, nil
	default:
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}, nil
	}
}

// appArmorProfile: the container's field, else the deprecated per-container pod
// annotation, else the pod's field; none leaves the runtime's default. It also returns
// the profile in the old string form runtimes read before the field existed.
func appArmorProfile(pod *corev1.Pod, c *corev1.Container, effective *corev1.AppArmorProfile) (*runtimeapi.SecurityProfile, string, error) {
	p := effective
	if c.SecurityContext == nil || c.SecurityContext.AppArmorProfile == nil {
		if a, ok := pod.Annotations[corev1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix+c.Name]; ok {
			switch {
			case a == corev1.DeprecatedAppArmorBetaProfileRuntimeDefault:
				p = &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeRuntimeDefault}
			case a == corev1.DeprecatedAppArmorBetaProfileNameUnconfined:
				p = &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined}
			case strings.HasPrefix(a, corev1.DeprecatedAppArmorBetaProfileNamePrefix):
				name := strings.TrimPrefix(a, corev1.DeprecatedAppArmorBetaProfileNamePrefix)
				p = &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeLocalhost, LocalhostProfile: &name}
			}
		}
	}
	if p == nil {
		return nil, "", nil
	}
	switch p.Type {
	case corev1.AppArmorProfileTypeRuntimeDefault:
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault},
			corev1.DeprecatedAppArmorBetaProfileRuntimeDefault, nil
	case corev1.AppArmorProfileTypeUnconfined:
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined},
			corev1.DeprecatedAppArmorBetaProfileNameUnconfined, nil
	case corev1.AppArmorProfileTypeLocalhost:
		if p.LocalhostProfile == nil || *p.LocalhostProfile == "" {
			return nil, "", errors.New("localhostProfile is required with type Localhost")
		}
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: *p.LocalhostProfile},
			corev1.DeprecatedAppArmorBetaProfileNamePrefix + *p.LocalhostProfile, nil
	default:
		return nil, "", fmt.Errorf("unknown type %q", p.Type)
	}
}

// VerifyRunAsNonRoot checks runAsNonRoot against the user the container will run as:
// its (or the pod's) runAsUser, else the image's user, given as a numeric uid (nil when
// the image names its user by name only) or username. An image that says neither runs
// as root, as the kubelet takes it. The errors are the kubelet's, which end up in the
// container's CreateContainerConfigError message.
func VerifyRunAsNonRoot(pod *corev1.Pod, c *corev1.Container, imageUID *int64, imageUsername string) error {
	sc := effectiveSecurityContext(pod, c)
	if sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		return nil
	}
	where := fmt.Sprintf("(pod: %q, container: %s)", pod.Name+"_"+pod.Namespace+"("+string(pod.UID)+")", c.Name)
	if sc.RunAsUser != nil {
		if *sc.RunAsUser == 0 {
			return fmt.Errorf("container's runAsUser breaks non-root policy %s", where)
		}
		return nil
	}
	switch {
	case imageUID == nil && imageUsername != "":
		return fmt.Errorf("container has runAsNonRoot and image has non-numeric user (%s), cannot verify user is non-root %s", imageUsername, where)
	case imageUID == nil, *imageUID == 0:
		return fmt.Errorf("container has runAsNonRoot and image will run as root %s", where)
	case imageUID != nil:
		if msgs := validation.IsValidUserID(*imageUID); len(msgs) > 0 {
			return fmt.Errorf("container has runAsNonRoot and image has an invalid user id (%d). (Must be 1-(%d)): %s %s",
				*imageUID, math.MaxInt32, strings.Join(msgs, "; "), where)
		}
	}
	return nil
}
