package config

import (
	"errors"
	"strings"
	"testing"
)

func TestKernelDefaults(t *testing.T) {
	asKubelet := func(name string) (int, error) { return kernelDefaults[name], nil }
	for _, protect := range []bool{true, false} {
		if w, err := checkKernelDefaults(asKubelet, protect); err != nil || len(w) != 0 {
			t.Errorf("protect %t, tunables as the kubelet wants: warnings %q, %v", protect, w, err)
		}
	}
	// A distribution's defaults: overcommit heuristics, no panic on oops.
	distro := func(name string) (int, error) {
		switch name {
		case "vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops":
			return 0, nil
		}
		return kernelDefaults[name], nil
	}
	_, err := checkKernelDefaults(distro, true)
	if err == nil {
		t.Fatal("protectKernelDefaults: true with differing tunables: no error")
	}
	for _, want := range []string{"protectKernelDefaults", "vm.overcommit_memory is 0, want 1", "kernel.panic is 0, want 10", "kernel.panic_on_oops is 0, want 1", "vm.overcommit_memory=1"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "root_maxkeys") {
		t.Errorf("error %q names a tunable that is as wanted", err)
	}
	w, err := checkKernelDefaults(distro, false)
	if err != nil || len(w) != 1 || !strings.Contains(w[0], "protectKernelDefaults is false") || !strings.Contains(w[0], "vm.overcommit_memory is 0") {
		t.Errorf("protectKernelDefaults: false: warnings %q, %v; want one naming the field and the tunables", w, err)
	}
	unreadable := func(string) (int, error) { return 0, errors.New("permission denied") }
	if _, err := checkKernelDefaults(unreadable, true); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Errorf("unreadable tunables: %v", err)
	}
	if w, err := checkKernelDefaults(unreadable, false); err != nil || len(w) != 1 || !strings.Contains(w[0], "cannot be read") {
		t.Errorf("unreadable tunables, protectKernelDefaults false: warnings %q, %v; want a warning", w, err)
	}
}
