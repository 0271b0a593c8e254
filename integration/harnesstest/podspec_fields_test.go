package harnesstest

import (
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// TestPodSpecFieldTable: the rows of the README's pod field table that no other test
// proves, one pod per row, each field's effect seen from inside the container (exec runs
// with the container's user, capabilities, seccomp and working directory, as the
// container's own processes do).
func TestPodSpecFieldTable(t *testing.T) {
	t.Parallel()
	waitNodeReady(t, 90*time.Second)
	hostIPC, err := os.Readlink("/proc/self/ns/ipc")
	if err != nil {
		t.Fatal(err)
	}
	appArmor := false
	if b, err := os.ReadFile("/sys/module/apparmor/parameters/enabled"); err == nil {
		_, serr := os.Stat("/sys/kernel/security/apparmor")
		appArmor = serr == nil && strings.HasPrefix(string(b), "Y")
	}
	const idle = "exec sleep 3600"
	for _, tt := range []struct {
		name   string
		script string
		mutate func(*corev1.Pod)
		check  string // run in the container with sh -c
		want   []string
	}{
		{name: "args", mutate: func(p *corev1.Pod) {
			p.Spec.Containers[0].Command = []string{"sh", "-c"}
			p.Spec.Containers[0].Args = []string{"echo args-ok > /tmp/out; " + idle}
		}, check: "cat /tmp/out", want: []string{"args-ok"}},
		{name: "workingdir", script: "pwd > /tmp/wd; " + idle, mutate: func(p *corev1.Pod) {
			p.Spec.Containers[0].WorkingDir = "/etc"
		}, check: "cat /tmp/wd; pwd", want: []string{"/etc\n/etc"}},
		{name: "env", script: idle, mutate: func(p *corev1.Pod) {
			p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "FOO", Value: "bar"}, {Name: "BAR", Value: "$(FOO)-x-$$(FOO)"}}
		}, check: `echo "$BAR"`, want: []string{"bar-x-$(FOO)"}},
		{name: "tty", script: "[ -t 1 ] && echo a-tty > /tmp/tty; " + idle, mutate: func(p *corev1.Pod) {
			p.Spec.Containers[0].TTY, p.Spec.Containers[0].Stdin = true, true
		}, check: "cat /tmp/tty", want: []string{"a-tty"}},
		{name: "users", script: idle, mutate: func(p *corev1.Pod) {
			p.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](1234), RunAsGroup: ptr.To[int64](5678), SupplementalGroups: []int64{4321}}
		}, check: "id -u; id -g; id -G", want: []string{"1234\n5678\n", "4321"}},
		{name: "container-user", script: idle, mutate: func(p *corev1.Pod) {
			p.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](1234)}
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{RunAsUser: ptr.To[int64](2222), RunAsGroup: ptr.To[int64](3333)}
		}, check: "id -u; id -g", want: []string{"2222\n3333"}},
		{name: "privileged", script: idle, mutate: func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
		}, check: `echo sys_admin=$(( 0x$(awk '/CapEff/{print $2}' /proc/self/status) >> 21 & 1 )); [ $(ls /dev | wc -l) -gt 30 ] && echo the-host-devices`,
			want: []string{"sys_admin=1", "the-host-devices"}},
		{name: "capabilities", script: idle, mutate: func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"SYS_TIME"}}}
		}, check: "grep CapEff /proc/self/status", want: []string{"CapEff:\t0000000002000000"}},
		{name: "no-new-privs", script: idle, mutate: func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false)}
		}, check: "grep NoNewPrivs /proc/self/status", want: []string{"NoNewPrivs:\t1"}},
		{name: "read-only-root", script: idle, mutate: func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{ReadOnlyRootFilesystem: ptr.To(true)}
		}, check: "touch /x 2>&1; true", want: []string{"Read-only file system"}},
		{name: "seccomp", script: idle, mutate: func(p *corev1.Pod) {
			p.Spec.SecurityContext = &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
		}, check: "grep Seccomp: /proc/self/status", want: []string{"Seccomp:\t2"}},
		{name: "seccomp-unconfined", script: idle, mutate: func(p *corev1.Pod) {
			p.Spec.SecurityContext = &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}}
		}, check: "grep Seccomp: /proc/self/status", want: []string{"Seccomp:\t0"}},
		{name: "masked-proc", script: idle, check: "wc -c < /proc/timer_list; (echo 0 > /proc/sys/vm/overcommit_memory) 2>&1; true",
			want: []string{"0\n", "Read-only file system"}},
		{name: "host-pid", script: idle, mutate: func(p *corev1.Pod) { p.Spec.HostPID = true },
			check: "ps -o comm | grep -c containerd", want: []string{""}},
		{name: "share-pid", script: idle, mutate: func(p *corev1.Pod) { p.Spec.ShareProcessNamespace = ptr.To(true) },
			check: "cat /proc/1/comm", want: []string{"pause"}},
		{name: "host-ipc", script: idle, mutate: func(p *corev1.Pod) { p.Spec.HostIPC = true },
			check: "readlink /proc/self/ns/ipc", want: []string{hostIPC}},
		{name: "dns-config", script: idle, mutate: func(p *corev1.Pod) {
			p.Spec.DNSPolicy = corev1.DNSNone
			p.Spec.DNSConfig = &corev1.PodDNSConfig{Nameservers: []string{"192.0.2.53"}, Searches: []string{"a.example"}, Options: []corev1.PodDNSConfigOption{{Name: "ndots", Value: ptr.To("3")}}}
		}, check: "cat /etc/resolv.conf", want: []string{"nameserver 192.0.2.53", "search a.example", "options ndots:3"}},
		{name: "selinux-options", script: idle, mutate: func(p *corev1.Pod) {
			p.Spec.SecurityContext = &corev1.PodSecurityContext{SELinuxOptions: &corev1.SELinuxOptions{Level: "s0:c1,c2"}}
		}, check: "echo runs", want: []string{"runs"}},
		{name: "windows-options", script: idle, mutate: func(p *corev1.Pod) {
			p.Spec.SecurityContext = &corev1.PodSecurityContext{WindowsOptions: &corev1.WindowsSecurityContextOptions{RunAsUserName: ptr.To("ContainerUser")}}
		}, check: "id -u", want: []string{"0"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			name := "field-" + tt.name
			p := busyboxPod(name, tt.script)
			if tt.mutate != nil {
				tt.mutate(p)
			}
			createPod(t, p)
			apiPodRunningReady(t, name, time.Minute)
			out := mustInPod(t, name, "sh", "-c", tt.check)
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("%s: %q, want %q in it", tt.check, out, w)
				}
			}
			if tt.name == "host-pid" && strings.TrimSpace(out) == "0" {
				t.Errorf("hostPID: no containerd among the processes the container sees")
			}
		})
	}

	// An AppArmor profile: enforced where the host has AppArmor, else the pod is refused
	// as the kubelet refuses it, never run unconfined.
	t.Run("apparmor", func(t *testing.T) {
		t.Parallel()
		p := busyboxPod("field-apparmor", idle)
		p.Spec.SecurityContext = &corev1.PodSecurityContext{AppArmorProfile: &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeRuntimeDefault}}
		createPod(t, p)
		if appArmor {
			apiPodRunningReady(t, "field-apparmor", time.Minute)
			if out := mustInPod(t, "field-apparmor", "cat", "/proc/self/attr/current"); strings.HasPrefix(out, "unconfined") {
				t.Errorf("AppArmor profile %q, want the runtime's default", out)
			}
			return
		}
		waitAPIPod(t, time.Minute, "field-apparmor", "Failed, AppArmor", func(p *corev1.Pod) bool {
			return p.Status.Phase == corev1.PodFailed && p.Status.Reason == "AppArmor" &&
				p.Status.Message == "Pod was rejected: Cannot enforce AppArmor: AppArmor is not enabled on the host"
		})
	})
}
