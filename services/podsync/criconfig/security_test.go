package criconfig

import (
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestContainerSecurityContext(t *testing.T) {
	o := Options{SeccompProfileRoot: "/var/lib/unitlet/seccomp"}
	tests := []struct {
		name   string
		pod    *corev1.PodSecurityContext
		c      *corev1.SecurityContext
		annot  map[string]string
		opts   *Options
		check  func(*runtimeapi.LinuxContainerSecurityContext) string
		errHas string
	}{
		{name: "defaults: unconfined seccomp, masked paths, no apparmor",
			check: func(sc *runtimeapi.LinuxContainerSecurityContext) string {
				if sc.Seccomp.GetProfileType() != runtimeapi.SecurityProfile_Unconfined || sc.Apparmor != nil || legacyAppArmor(sc) != "" {
					return "profiles"
				}
				if !reflect.DeepEqual(sc.MaskedPaths, defaultMaskedPaths) || !reflect.DeepEqual(sc.ReadonlyPaths, defaultReadonlyPaths) {
					return "masked/readonly paths"
				}
				if sc.RunAsUser != nil || sc.Privileged || sc.NoNewPrivs || sc.ReadonlyRootfs || sc.Capabilities != nil {
					return "unexpected settings"
				}
				return ""
			}},
		{name: "seccompDefault makes RuntimeDefault", opts: &Options{SeccompDefault: true},
			check: func(sc *runtimeapi.LinuxContainerSecurityContext) string {
				if sc.Seccomp.GetProfileType() != runtimeapi.SecurityProfile_RuntimeDefault {
					return "seccomp"
				}
				return ""
			}},
		{name: "container fields win over pod fields",
			pod: &corev1.PodSecurityContext{RunAsUser: ptrTo(int64(1000)), RunAsGroup: ptrTo(int64(1000)),
				FSGroup: ptrTo(int64(2000)), SupplementalGroups: []int64{3000},
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			c: &corev1.SecurityContext{RunAsUser: ptrTo(int64(2000)),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: ptrTo("prof.json")}},
			check: func(sc *runtimeapi.LinuxContainerSecurityContext) string {
				if sc.RunAsUser.GetValue() != 2000 || sc.RunAsGroup.GetValue() != 1000 {
					return "run as"
				}
				if !reflect.DeepEqual(sc.SupplementalGroups, []int64{2000, 3000}) {
					return "groups"
				}
				if sc.Seccomp.GetProfileType() != runtimeapi.SecurityProfile_Localhost || sc.Seccomp.LocalhostRef != "/var/lib/unitlet/seccomp/prof.json" {
					return "seccomp"
				}
				return ""
			}},
		{name: "pod seccomp applies when the container has none",
			pod: &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			check: func(sc *runtimeapi.LinuxContainerSecurityContext) string {
				if sc.Seccomp.GetProfileType() != runtimeapi.SecurityProfile_RuntimeDefault {
					return "seccomp"
				}
				return ""
			}},
		{name: "privileged, capabilities, read-only root, no privilege escalation",
			c: &corev1.SecurityContext{Privileged: ptrTo(true), ReadOnlyRootFilesystem: ptrTo(true), AllowPrivilegeEscalation: ptrTo(false),
				Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN"}, Drop: []corev1.Capability{"ALL"}}},
			check: func(sc *runtimeapi.LinuxContainerSecurityContext) string {
				if !sc.Privileged || !sc.ReadonlyRootfs || !sc.NoNewPrivs {
					return "flags"
				}
				if !reflect.DeepEqual(sc.Capabilities.AddCapabilities, []string{"NET_ADMIN"}) || !reflect.DeepEqual(sc.Capabilities.DropCapabilities, []string{"ALL"}) {
					return "capabilities"
				}
				if len(sc.MaskedPaths) != 0 || len(sc.ReadonlyPaths) != 0 {
					return "privileged keeps masked paths"
				}
				return ""
			}},
		{name: "allowPrivilegeEscalation true", c: &corev1.SecurityContext{AllowPrivilegeEscalation: ptrTo(true)},
			check: func(sc *runtimeapi.LinuxContainerSecurityContext) string {
				if sc.NoNewPrivs {
					return "no_new_privs"
				}
				return ""
			}},
		{name: "unmasked procMount", c: &corev1.SecurityContext{ProcMount: ptrTo(corev1.UnmaskedProcMount)},
			check: func(sc *runtimeapi.LinuxContainerSecurityContext) string {
				if len(sc.MaskedPaths) != 0 {
					return "masked"
				}
				return ""
			}},
		{name: "apparmor from annotation beats pod field",
			pod:   &corev1.PodSecurityContext{AppArmorProfile: &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined}},
			annot: map[string]string{corev1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix + "app": "localhost/my-prof"},
			check: func(sc *runtimeapi.LinuxContainerSecurityContext) string {
				if sc.Apparmor.GetProfileType() != runtimeapi.SecurityProfile_Localhost || sc.Apparmor.LocalhostRef != "my-prof" || legacyAppArmor(sc) != "localhost/my-prof" {
					return "apparmor"
				}
				return ""
			}},
		{name: "apparmor container field beats annotation",
			c:     &corev1.SecurityContext{AppArmorProfile: &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeRuntimeDefault}},
			annot: map[string]string{corev1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix + "app": "unconfined"},
			check: func(sc *runtimeapi.LinuxContainerSecurityContext) string {
				if sc.Apparmor.GetProfileType() != runtimeapi.SecurityProfile_RuntimeDefault || legacyAppArmor(sc) != "runtime/default" {
					return "apparmor"
				}
				return ""
			}},
		{name: "localhost seccomp without profile",
			c:      &corev1.SecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost}},
			errHas: "container app: securityContext.seccompProfile"},
		{name: "bad supplementalGroupsPolicy",
			pod:    &corev1.PodSecurityContext{SupplementalGroupsPolicy: ptrTo(corev1.SupplementalGroupsPolicy("Mix"))},
			errHas: "supplementalGroupsPolicy"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := testPod()
			pod.Spec.SecurityContext = tt.pod
			for k, v := range tt.annot {
				pod.Annotations[k] = v
			}
			c := &pod.Spec.Containers[0]
			c.SecurityContext = tt.c
			opts := o
			if tt.opts != nil {
				opts = *tt.opts
			}
			sc, err := containerSecurityContext(pod, c, opts)
			if tt.errHas != "" {
				if err == nil || !strings.Contains(err.Error(), tt.errHas) {
					t.Fatalf("err = %v, want %q", err, tt.errHas)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if msg := tt.check(sc); msg != "" {
				t.Errorf("%s wrong: %v", msg, sc)
			}
		})
	}
}

func TestVerifyRunAsNonRoot(t *testing.T) {
	uid := func(v int64) *int64 { return &v }
	tests := []struct {
		name      string
		pod       *corev1.PodSecurityContext
		c         *corev1.SecurityContext
		imageUID  *int64
		imageUser string
		errHas    string
	}{
		{name: "not requested, root image", imageUID: uid(0)},
		{name: "requested, root image", pod: &corev1.PodSecurityContext{RunAsNonRoot: ptrTo(true)}, imageUID: uid(0),
			errHas: "container has runAsNonRoot and image will run as root"},
		{name: "requested, image without user is root", c: &corev1.SecurityContext{RunAsNonRoot: ptrTo(true)},
			errHas: "container has runAsNonRoot and image will run as root"},
		{name: "requested, non-root image", c: &corev1.SecurityContext{RunAsNonRoot: ptrTo(true)}, imageUID: uid(65534)},
		{name: "requested, named image user", c: &corev1.SecurityContext{RunAsNonRoot: ptrTo(true)}, imageUser: "nobody",
			errHas: "image has non-numeric user (nobody)"},
		{name: "runAsUser 0 breaks it", c: &corev1.SecurityContext{RunAsNonRoot: ptrTo(true), RunAsUser: ptrTo(int64(0))}, imageUID: uid(1000),
			errHas: "container's runAsUser breaks non-root policy"},
		{name: "runAsUser non-zero overrides root image", pod: &corev1.PodSecurityContext{RunAsNonRoot: ptrTo(true), RunAsUser: ptrTo(int64(1000))}, imageUID: uid(0)},
		{name: "container false overrides pod true", pod: &corev1.PodSecurityContext{RunAsNonRoot: ptrTo(true)},
			c: &corev1.SecurityContext{RunAsNonRoot: ptrTo(false)}, imageUID: uid(0)},
		{name: "invalid image uid", c: &corev1.SecurityContext{RunAsNonRoot: ptrTo(true)}, imageUID: uid(-5),
			errHas: "invalid user id (-5)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := testPod()
			pod.Spec.SecurityContext = tt.pod
			c := &pod.Spec.Containers[0]
			c.SecurityContext = tt.c
			err := VerifyRunAsNonRoot(pod, c, tt.imageUID, tt.imageUser)
			if tt.errHas == "" {
				if err != nil {
					t.Fatalf("err = %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.errHas) {
				t.Fatalf("err = %v, want %q", err, tt.errHas)
			}
			if want := `(pod: "web_shop(1f2e3d4c-0000-1111-2222-333344445555)", container: app)`; !strings.HasSuffix(err.Error(), want) {
				t.Errorf("err %q does not end with %s", err, want)
			}
		})
	}
}

// legacyAppArmor reads the deprecated string form the package still fills in.
func legacyAppArmor(sc *runtimeapi.LinuxContainerSecurityContext) string {
	//lint:ignore SA1019 the field is filled for runtimes that read only it
	return sc.ApparmorProfile
}
