package cgroups

import (
	"reflect"
	"strings"
	"testing"
)

func TestNameForms(t *testing.T) {
	tests := []struct {
		name                       Name
		cgroupfs, slice, systemdAt string
	}{
		{nil, "/", "-.slice", "/"},
		{Name{}, "/", "-.slice", "/"},
		{Name{"kubepods"}, "/kubepods", "kubepods.slice", "/kubepods.slice"},
		{Name{"kubepods", "burstable", "pod12-34"}, "/kubepods/burstable/pod12-34", "kubepods-burstable-pod12_34.slice",
			"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod12_34.slice"},
		{Name{"my-root", "kubepods", "pod1"}, "/my-root/kubepods/pod1", "my_root-kubepods-pod1.slice",
			"/my_root.slice/my_root-kubepods.slice/my_root-kubepods-pod1.slice"},
	}
	for _, tt := range tests {
		if got := tt.name.CgroupfsPath(); got != tt.cgroupfs {
			t.Errorf("%q.CgroupfsPath() = %q, want %q", []string(tt.name), got, tt.cgroupfs)
		}
		if got := tt.name.SystemdSlice(); got != tt.slice {
			t.Errorf("%q.SystemdSlice() = %q, want %q", []string(tt.name), got, tt.slice)
		}
		if got := tt.name.SystemdPath(); got != tt.systemdAt {
			t.Errorf("%q.SystemdPath() = %q, want %q", []string(tt.name), got, tt.systemdAt)
		}
		if back, err := parseSlice(tt.slice); err != nil || len(back) != len(tt.name) || strings.Join(back, "/") != strings.Join(tt.name, "/") {
			t.Errorf("parseSlice(%q) = %q, %v; want %q back", tt.slice, []string(back), err, []string(tt.name))
		}
	}
}

func TestChildLeavesParentAlone(t *testing.T) {
	parent := make(Name, 1, 4)
	parent[0] = "kubepods"
	a := parent.Child("burstable")
	b := parent.Child("besteffort")
	if a[1] != "burstable" || b[1] != "besteffort" || len(parent) != 1 {
		t.Fatalf("Child shares storage: a=%q b=%q parent=%q", []string(a), []string(b), []string(parent))
	}
}

func TestParseCgroupRoot(t *testing.T) {
	tests := []struct {
		root    string
		d       Driver
		want    Name
		wantErr string
	}{
		{"", Cgroupfs, nil, ""},
		{"/", Cgroupfs, nil, ""},
		{"", Systemd, nil, ""},
		{"/", Systemd, nil, ""},
		{"/unitlet", Cgroupfs, Name{"unitlet"}, ""},
		{"/a/b", Cgroupfs, Name{"a", "b"}, ""},
		{"/a/b/", Cgroupfs, Name{"a", "b"}, ""},
		{"a/b", Cgroupfs, Name{"a", "b"}, ""},
		{"/a//b", Cgroupfs, nil, `cgroupRoot "/a//b": with cgroupDriver cgroupfs it must be a clean path`},
		{"/a/../b", Cgroupfs, nil, `cgroupRoot "/a/../b": with cgroupDriver cgroupfs`},
		{"unitlet.slice", Systemd, Name{"unitlet"}, ""},
		{"a-b.slice", Systemd, Name{"a", "b"}, ""},
		{"a-b_c.slice", Systemd, Name{"a", "b-c"}, ""},
		{"/a.slice/a-b.slice", Systemd, Name{"a", "b"}, ""},
		{"/unitlet.slice", Systemd, Name{"unitlet"}, ""},
		{"-.slice", Systemd, nil, ""},
		{"/unitlet", Systemd, nil, `cgroupRoot "/unitlet": with cgroupDriver systemd it must be "/" or a slice`},
		{"unitlet", Systemd, nil, `cgroupRoot "unitlet": with cgroupDriver systemd`},
		{"a--b.slice", Systemd, nil, `slice "a--b.slice" has an empty level`},
		{"a-.slice", Systemd, nil, `has an empty level`},
		{"/x.slice/a-b.slice", Systemd, nil, `a path must be the slice's own nesting "/a.slice/a-b.slice"`},
		{"/a", "docker", nil, `unknown cgroupDriver "docker"`},
	}
	for _, tt := range tests {
		got, err := ParseCgroupRoot(tt.root, tt.d)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParseCgroupRoot(%q, %s) error = %v, want one containing %q", tt.root, tt.d, err, tt.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseCgroupRoot(%q, %s) = %q, %v; want %q", tt.root, tt.d, []string(got), err, []string(tt.want))
		}
	}
}

func TestValidate(t *testing.T) {
	good := Name{"kubepods", "burstable", "pod12-34"}
	for _, d := range []Driver{Cgroupfs, Systemd} {
		if err := good.validate(d); err != nil {
			t.Errorf("%s: validate(%q) = %v", d, []string(good), err)
		}
	}
	for _, n := range []Name{{"a", ""}, {".."}, {"a/b"}, {"."}} {
		if err := n.validate(Cgroupfs); err == nil {
			t.Errorf("validate(%q) passed", []string(n))
		}
	}
	if err := (Name{"system_reserved"}).validate(Cgroupfs); err != nil {
		t.Errorf("cgroupfs refuses '_': %v", err)
	}
	if err := (Name{"system_reserved"}).validate(Systemd); err == nil {
		t.Error("systemd takes a '_' it could not tell from '-'")
	}
}
