package admission

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func sysctls(kv ...string) podOpt {
	return func(p *corev1.Pod) {
		if p.Spec.SecurityContext == nil {
			p.Spec.SecurityContext = &corev1.PodSecurityContext{}
		}
		for i := 0; i+1 < len(kv); i += 2 {
			p.Spec.SecurityContext.Sysctls = append(p.Spec.SecurityContext.Sysctls, corev1.Sysctl{Name: kv[i], Value: kv[i+1]})
		}
	}
}

func hostNetwork(p *corev1.Pod) { p.Spec.HostNetwork = true }
func hostIPC(p *corev1.Pod)     { p.Spec.HostIPC = true }

func mustSysctls(t *testing.T, unsafe ...string) *Sysctls {
	t.Helper()
	s, err := NewSysctls(SafeSysctls("6.1.0"), unsafe)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestAdmitSysctls(t *testing.T) {
	safeOnly := mustSysctls(t)
	unsafe := mustSysctls(t, "net.core.somaxconn", "kernel.msg*", "net.ipv6.conf.*")
	forbidden := func(name string, opts ...podOpt) admitCase {
		return admitCase{name: name, pod: testPod("p", opts...), sysctls: safeOnly, reason: ReasonSysctlForbidden}
	}
	runAdmit(t, []admitCase{
		{name: "safe sysctls", pod: testPod("p", sysctls("net.ipv4.ip_local_port_range", "1024 65000", "kernel.shm_rmid_forced", "1")), sysctls: safeOnly, admit: true},
		{name: "a safe sysctl written with slashes", pod: testPod("p", sysctls("net/ipv4/tcp_syncookies", "1")), sysctls: safeOnly, admit: true},
		{name: "the safe list of this kernel when none is given", pod: testPod("p", sysctls("net.ipv4.ping_group_range", "0 1")), admit: true},
		{name: "unsafe, not allowed", pod: testPod("p", sysctls("net.core.somaxconn", "1024")), sysctls: safeOnly,
			reason: ReasonSysctlForbidden, message: `forbidden sysctl: "net.core.somaxconn" not allowlisted`},
		{name: "unsafe, allowed by name", pod: testPod("p", sysctls("net.core.somaxconn", "1024")), sysctls: unsafe, admit: true},
		{name: "unsafe, allowed by a pattern", pod: testPod("p", sysctls("kernel.msgmax", "65536", "net.ipv6.conf.all.forwarding", "1")), sysctls: unsafe, admit: true},
		{name: "net sysctl with hostNetwork", pod: testPod("p", hostNetwork, sysctls("net.ipv4.tcp_syncookies", "1")), sysctls: safeOnly,
			reason: ReasonSysctlForbidden, message: `forbidden sysctl: "net.ipv4.tcp_syncookies" not allowed with host Net enabled`},
		{name: "ipc sysctl with hostIPC", pod: testPod("p", hostIPC, sysctls("kernel.shm_rmid_forced", "1")), sysctls: safeOnly,
			reason: ReasonSysctlForbidden, message: `forbidden sysctl: "kernel.shm_rmid_forced" not allowed with host IPC enabled`},
		{name: "allowed ipc pattern with hostIPC", pod: testPod("p", hostIPC, sysctls("kernel.msgmnb", "1")), sysctls: unsafe,
			reason: ReasonSysctlForbidden, message: `forbidden sysctl: "kernel.msgmnb" not allowed with host IPC enabled`},
		{name: "net sysctl with hostIPC only", pod: testPod("p", hostIPC, sysctls("net.ipv4.tcp_syncookies", "1")), sysctls: safeOnly, admit: true},
		forbidden("a non-namespaced sysctl", sysctls("kernel.panic", "10")),
		forbidden("the second sysctl", sysctls("net.ipv4.tcp_syncookies", "1", "vm.swappiness", "1")),
		{name: "checked before the predicates", pod: testPod("p", sysctls("vm.swappiness", "1"), func(p *corev1.Pod) { p.Spec.NodeName = "elsewhere" }),
			sysctls: safeOnly, reason: ReasonSysctlForbidden},
		{name: "a mirror pod is not admitted again", pod: testPod("p", mirror, sysctls("vm.swappiness", "1")), sysctls: safeOnly, admit: true},
	})
}

func TestSafeSysctlsByKernel(t *testing.T) {
	for _, tc := range []struct {
		release string
		has     []string
		hasNot  []string
	}{
		{release: "6.18.44-fc-v782\n", has: []string{"net.ipv4.tcp_rmem", "net.ipv4.tcp_fin_timeout", "kernel.shm_rmid_forced"}},
		{release: "4.5.0", has: []string{"net.ipv4.tcp_keepalive_time"}, hasNot: []string{"net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_wmem"}},
		{release: "3.10.0-1160.el7", has: []string{"net.ipv4.ip_unprivileged_port_start"}, hasNot: []string{"net.ipv4.ip_local_reserved_ports"}},
		{release: "unparsable", has: []string{"net.ipv4.tcp_syncookies"}, hasNot: []string{"net.ipv4.ip_local_reserved_ports"}},
	} {
		got := SafeSysctls(tc.release)
		for _, n := range tc.has {
			if !slices.Contains(got, n) {
				t.Errorf("kernel %q: %s not in %v", tc.release, n, got)
			}
		}
		for _, n := range tc.hasNot {
			if slices.Contains(got, n) {
				t.Errorf("kernel %q: %s in %v, want it left out", tc.release, n, got)
			}
		}
	}
	if n := len(SafeSysctls("6.1")); n != 12 {
		t.Errorf("%d safe sysctls on a current kernel, want the kubelet's 12", n)
	}
}

func TestNewSysctlsRefusesBadPatterns(t *testing.T) {
	for pattern, want := range map[string]string{
		"kernel.panic":   `allowedUnsafeSysctls[0]: the sysctls "kernel.panic" are not known to be namespaced`,
		"vm.*":           `allowedUnsafeSysctls[0]: the sysctls "vm." are not known to be namespaced`,
		"Net.Core":       `allowedUnsafeSysctls[0]: sysctl "Net.Core" must have at most 253 characters and match regex`,
		"net.*.foo":      `allowedUnsafeSysctls[0]: sysctl "net.*.foo" must have at most`,
		"":               `allowedUnsafeSysctls[0]: sysctl "" must have at most`,
		"net.core.*":     "",
		"net/ipv4/conf*": "",
	} {
		_, err := NewSysctls(nil, []string{pattern})
		switch {
		case want == "" && err != nil:
			t.Errorf("%q: %v", pattern, err)
		case want != "" && (err == nil || !strings.HasPrefix(err.Error(), want)):
			t.Errorf("%q: error %v, want %q", pattern, err, want)
		}
	}
}
