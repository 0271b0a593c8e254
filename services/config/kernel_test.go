package config

import (
	"errors"
	"slices"
	"strings"
	"testing"

	v1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
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

func TestCheckHostRefusesSwapAndCgroupV1AsTheKubeletDoes(t *testing.T) {
	host := func(swaps []string, v2 bool) hostEnv {
		h := fakeHost("node-1", "10.0.0.1")
		h.swaps = func() ([]string, error) { return swaps, nil }
		h.cgroupV2 = func() (bool, error) { return v2, nil }
		return h
	}
	on, off := ptr.To(true), ptr.To(false)
	for _, tc := range []struct {
		name    string
		h       hostEnv
		c       v1beta1.KubeletConfiguration
		wantErr string
	}{
		{"defaults on a v2 host without swap", host(nil, true), v1beta1.KubeletConfiguration{}, ""},
		{"swap on", host([]string{"/swapfile"}, true), v1beta1.KubeletConfiguration{}, "failSwapOn: running with swap on is not supported (/swapfile in /proc/swaps)"},
		{"swap on, failSwapOn false", host([]string{"/swapfile"}, true), v1beta1.KubeletConfiguration{FailSwapOn: off}, ""},
		{"cgroup v1", host(nil, false), v1beta1.KubeletConfiguration{}, "failCgroupV1: this host uses cgroup v1"},
		{"cgroup v1, failCgroupV1 false", host(nil, false), v1beta1.KubeletConfiguration{FailCgroupV1: off}, ""},
		{"cgroup v1, singleProcessOOMKill false", host(nil, false), v1beta1.KubeletConfiguration{FailCgroupV1: off, SingleProcessOOMKill: off}, "singleProcessOOMKill: false needs cgroup v2"},
		{"cgroup v2, singleProcessOOMKill false", host(nil, true), v1beta1.KubeletConfiguration{FailCgroupV1: on, SingleProcessOOMKill: off}, ""},
	} {
		err := checkHost(tc.h, &tc.c)
		if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.wantErr)
		}
	}
}

func TestParseSwaps(t *testing.T) {
	if got := parseSwaps("Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n"); len(got) != 0 {
		t.Errorf("no swap: %q", got)
	}
	got := parseSwaps("Filename Type Size Used Priority\n/dev/sda2 partition 1048572 0 -2\n/swapfile file 524284 0 -3\n")
	if !slices.Equal(got, []string{"/dev/sda2", "/swapfile"}) {
		t.Errorf("two swaps: %q", got)
	}
}
