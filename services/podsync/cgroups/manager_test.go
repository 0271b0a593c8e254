package cgroups

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
)

func TestNewRefusesAnUnknownDriver(t *testing.T) {
	if _, err := New("docker", t.TempDir()); err == nil || !strings.Contains(err.Error(), `unknown cgroupDriver "docker"`) {
		t.Errorf("New(docker) = %v", err)
	}
	if _, err := New(Cgroupfs, t.TempDir()); err == nil || !strings.Contains(err.Error(), "neither a cgroup v2 mount") {
		t.Errorf("New on an empty directory = %v", err)
	}
}

func TestNotEmptyError(t *testing.T) {
	for _, tt := range []struct {
		err  *NotEmptyError
		want string
	}{
		{&NotEmptyError{Cgroup: "/kubepods/pod1", PIDs: []int{1234, 1235}}, "cgroup /kubepods/pod1 still has processes: 1234, 1235"},
		{&NotEmptyError{Cgroup: "kubepods.slice", Children: []string{"burstable"}}, "cgroup kubepods.slice still has child cgroups: burstable"},
		{&NotEmptyError{Cgroup: "/kubepods", Err: fmt.Errorf("rmdir /sys/fs/cgroup/kubepods: %w", syscall.EBUSY)},
			"cgroup /kubepods is still in use: rmdir /sys/fs/cgroup/kubepods: device or resource busy"},
	} {
		var err error = fmt.Errorf("wrapped: %w", tt.err)
		if tt.err.Error() != tt.want || !errors.Is(err, ErrNotEmpty) {
			t.Errorf("%q (Is ErrNotEmpty: %t), want %q", tt.err.Error(), errors.Is(err, ErrNotEmpty), tt.want)
		}
	}
	if !errors.Is(&NotEmptyError{Err: syscall.EBUSY}, syscall.EBUSY) {
		t.Error("NotEmptyError does not unwrap to the kernel's error")
	}
}
