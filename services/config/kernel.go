package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
	"k8s.io/component-helpers/node/util/sysctl"
	v1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
)

// kernelDefaults are the kernel tunables the kubelet wants (it sets them at start, or with
// protectKernelDefaults refuses to start when one differs), by /proc/sys name.
var kernelDefaults = map[string]int{
	sysctl.VMOvercommitMemory: sysctl.VMOvercommitMemoryAlways,
	sysctl.VMPanicOnOOM:       sysctl.VMPanicOnOOMInvokeOOMKiller,
	sysctl.KernelPanic:        sysctl.KernelPanicRebootTimeout,
	sysctl.KernelPanicOnOops:  sysctl.KernelPanicOnOopsAlways,
	sysctl.RootMaxKeys:        sysctl.RootMaxKeysSetting,
	sysctl.RootMaxBytes:       sysctl.RootMaxBytesSetting,
}

// checkKernelDefaults compares the node's kernel tunables with kernelDefaults. With
// protect (protectKernelDefaults: true) any difference is an error that lists each one
// and the sysctl settings that fix them, as the kubelet refuses to start. Without it,
// unitlet changes nothing on the kernel (the kubelet would set them): each difference is
// a warning naming the field, so that nothing is silently ignored.
func checkKernelDefaults(get func(name string) (int, error), protect bool) (warnings []string, err error) {
	names := make([]string, 0, len(kernelDefaults))
	for n := range kernelDefaults {
		names = append(names, n)
	}
	sort.Strings(names)
	var differ, fixes []string
	for _, n := range names {
		want := kernelDefaults[n]
		dotted := strings.ReplaceAll(n, "/", ".")
		got, err := get(n)
		if err != nil && protect {
			return nil, fmt.Errorf("protectKernelDefaults: read %s: %w", dotted, err)
		}
		if err != nil {
			differ = append(differ, fmt.Sprintf("%s cannot be read (%v)", dotted, err))
			continue
		}
		if got != want {
			differ = append(differ, fmt.Sprintf("%s is %d, want %d", dotted, got, want))
			fixes = append(fixes, fmt.Sprintf("%s=%d", dotted, want))
		}
	}
	if len(differ) == 0 {
		return nil, nil
	}
	if protect {
		return nil, fmt.Errorf("protectKernelDefaults: the kernel's tunables differ from the kubelet's: %s; set them (e.g. in /etc/sysctl.d/90-kubelet.conf: %s) or set protectKernelDefaults: false",
			strings.Join(differ, ", "), strings.Join(fixes, ", "))
	}
	return []string{fmt.Sprintf("protectKernelDefaults is false, and unitlet does not change kernel tunables as the kubelet would: %s (set them in /etc/sysctl.d, or set protectKernelDefaults: true to have them checked)",
		strings.Join(differ, ", "))}, nil
}

// checkHost refuses a configuration the machine cannot honour, as the kubelet's start
// does: swap on with failSwapOn, cgroup v1 with failCgroupV1 (and singleProcessOOMKill:
// false there, as cgroup v1 cannot kill a container's processes together).
func checkHost(h hostEnv, c *v1beta1.KubeletConfiguration) error {
	if ptr.Deref(c.FailSwapOn, true) {
		swaps, err := h.swaps()
		if err != nil {
			return fmt.Errorf("failSwapOn: find out whether swap is on: %w", err)
		}
		if len(swaps) > 0 {
			return fmt.Errorf("failSwapOn: running with swap on is not supported (%s in /proc/swaps): disable swap (swapoff -a, and remove it from /etc/fstab) or set failSwapOn: false", strings.Join(swaps, ", "))
		}
	}
	v2, err := h.cgroupV2()
	if err != nil {
		return fmt.Errorf("find out the cgroup version: %w", err)
	}
	if v2 {
		return nil
	}
	if ptr.Deref(c.FailCgroupV1, true) {
		return errors.New("failCgroupV1: this host uses cgroup v1, and the configuration refuses it (as the kubelet's default does); boot with cgroup v2 (systemd.unified_cgroup_hierarchy=1) or set failCgroupV1: false")
	}
	if c.SingleProcessOOMKill != nil && !*c.SingleProcessOOMKill {
		return errors.New("singleProcessOOMKill: false needs cgroup v2, and this host uses cgroup v1; remove the field")
	}
	return nil
}

// activeSwaps are the swap devices and files /proc/swaps lists; none when it is missing.
func activeSwaps() ([]string, error) {
	b, err := os.ReadFile("/proc/swaps")
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return parseSwaps(string(b)), nil
}

// parseSwaps reads /proc/swaps: a header line, then one line per active swap area.
func parseSwaps(s string) []string {
	var out []string
	for i, line := range strings.Split(strings.TrimSpace(s), "\n") {
		if f := strings.Fields(line); i > 0 && len(f) > 0 {
			out = append(out, f[0])
		}
	}
	return out
}

// unifiedCgroups reports whether /sys/fs/cgroup is the cgroup v2 hierarchy.
func unifiedCgroups() (bool, error) {
	var st unix.Statfs_t
	if err := unix.Statfs("/sys/fs/cgroup", &st); err != nil {
		return false, fmt.Errorf("statfs /sys/fs/cgroup: %w", err)
	}
	return st.Type == unix.CGROUP2_SUPER_MAGIC, nil
}
