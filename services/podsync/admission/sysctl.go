package admission

import (
	"fmt"
	"os"
	"regexp"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/version"
	utilsysctl "k8s.io/component-helpers/node/util/sysctl"
)

// ReasonSysctlForbidden is the kubelet's reason for a pod asking for a sysctl the node does
// not allow.
const ReasonSysctlForbidden = "SysctlForbidden"

// safeSysctls are the sysctls the kubelet allows every pod (pkg/kubelet/sysctl
// safe_sysctls.go), each with the first kernel that namespaces it ("" for any kernel).
var safeSysctls = []struct{ name, kernel string }{
	{"kernel.shm_rmid_forced", ""},
	{"net.ipv4.ip_local_port_range", ""},
	{"net.ipv4.tcp_syncookies", ""},
	{"net.ipv4.ping_group_range", ""},
	{"net.ipv4.ip_unprivileged_port_start", ""},
	{"net.ipv4.ip_local_reserved_ports", "3.16"},
	{"net.ipv4.tcp_keepalive_time", "4.5"},
	{"net.ipv4.tcp_fin_timeout", "4.6"},
	{"net.ipv4.tcp_keepalive_intvl", "4.5"},
	{"net.ipv4.tcp_keepalive_probes", "4.5"},
	{"net.ipv4.tcp_rmem", "4.15"},
	{"net.ipv4.tcp_wmem", "4.15"},
}

// SafeSysctls is the kubelet's safe list for a kernel release (as in
// /proc/sys/kernel/osrelease): the sysctls that need a newer kernel than it, or all of
// those when the release cannot be parsed, are left out.
func SafeSysctls(kernelRelease string) []string {
	kernel, _ := version.ParseGeneric(strings.TrimSpace(kernelRelease))
	var out []string
	for _, s := range safeSysctls {
		if s.kernel == "" || kernel != nil && kernel.AtLeast(version.MustParseGeneric(s.kernel)) {
			out = append(out, s.name)
		}
	}
	return out
}

// KernelRelease is the running kernel's release, "" when it cannot be read.
func KernelRelease() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return ""
	}
	return string(b)
}

// sysctlPattern is the kubelet's syntax of an allowedUnsafeSysctls entry: dot or slash
// separated segments, the last of which may end in "*"; at most 253 characters.
var sysctlPattern = regexp.MustCompile(`^([a-z0-9]([-_a-z0-9]*[a-z0-9])?[\./])*([a-z0-9][-_a-z0-9]*)?[a-z0-9*]$`)

const maxSysctlLength = 253

// Sysctls is the node's sysctl allowlist: exact names and name prefixes (from patterns
// ending in "*"), each with the namespace it belongs to.
type Sysctls struct {
	names    map[string]utilsysctl.Namespace
	prefixes map[string]utilsysctl.Namespace
}

// NewSysctls builds the allowlist from the safe sysctls and the KubeletConfiguration's
// allowedUnsafeSysctls. As in the kubelet, a pattern that is malformed or names a sysctl
// not known to be namespaced (so it would change the whole node) is an error.
func NewSysctls(safe, allowedUnsafe []string) (*Sysctls, error) {
	s := &Sysctls{names: map[string]utilsysctl.Namespace{}, prefixes: map[string]utilsysctl.Namespace{}}
	for i, p := range append(append([]string(nil), safe...), allowedUnsafe...) {
		field := "safe sysctl"
		if i >= len(safe) {
			field = fmt.Sprintf("allowedUnsafeSysctls[%d]", i-len(safe))
		}
		if len(p) > maxSysctlLength || !sysctlPattern.MatchString(p) {
			return nil, fmt.Errorf("%s: sysctl %q must have at most %d characters and match regex %s",
				field, p, maxSysctlLength, strings.Trim(sysctlPattern.String(), "^$"))
		}
		ns, nameOrPrefix, prefixed := utilsysctl.GetNamespace(p)
		if ns == utilsysctl.UnknownNamespace {
			return nil, fmt.Errorf("%s: the sysctls %q are not known to be namespaced", field, nameOrPrefix)
		}
		if prefixed {
			s.prefixes[nameOrPrefix] = ns
		} else {
			s.names[nameOrPrefix] = ns
		}
	}
	return s, nil
}

// check is the kubelet's sysctl admit handler: every sysctl of the pod must be allowed,
// and a network or IPC one not shared with the host's namespace of that kind.
func (s *Sysctls) check(pod *corev1.Pod) *Result {
	psc := pod.Spec.SecurityContext
	if psc == nil || len(psc.Sysctls) == 0 {
		return nil
	}
	if s == nil {
		s, _ = NewSysctls(SafeSysctls(KernelRelease()), nil)
	}
	for _, sc := range psc.Sysctls {
		if err := s.allowed(utilsysctl.NormalizeName(sc.Name), pod.Spec.HostNetwork, pod.Spec.HostIPC); err != "" {
			return &Result{Reason: ReasonSysctlForbidden, Message: "forbidden sysctl: " + err}
		}
	}
	return nil
}

// allowed is why the sysctl is not allowed, or "".
func (s *Sysctls) allowed(name string, hostNet, hostIPC bool) string {
	ns, ok := s.names[name]
	if !ok {
		for p, pns := range s.prefixes {
			if strings.HasPrefix(name, p) {
				ns, ok = pns, true
				break
			}
		}
	}
	switch {
	case !ok:
		return fmt.Sprintf("%q not allowlisted", name)
	case ns == utilsysctl.IPCNamespace && hostIPC, ns == utilsysctl.NetNamespace && hostNet:
		return fmt.Sprintf("%q not allowed with host %s enabled", name, ns)
	}
	return ""
}
