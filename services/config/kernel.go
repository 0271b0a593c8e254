package config

import (
	"fmt"
	"sort"
	"strings"

	"k8s.io/component-helpers/node/util/sysctl"
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
