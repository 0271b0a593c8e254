package nodeinfo

import "testing"

func TestPodsCgroupPath(t *testing.T) {
	for _, tc := range []struct{ root, driver, want string }{
		{"", "cgroupfs", "/kubepods"},
		{"/", "cgroupfs", "/kubepods"},
		{"/unitlet", "cgroupfs", "/unitlet/kubepods"},
		{"/a/b/", "cgroupfs", "/a/b/kubepods"},
		{"/", "systemd", "/kubepods.slice"},
		{"unitlet.slice", "systemd", "/unitlet.slice/unitlet-kubepods.slice"},
		{"a-b.slice", "systemd", "/a.slice/a-b.slice/a-b-kubepods.slice"},
		{"/a.slice/a-b.slice", "systemd", "/a.slice/a-b.slice/a-b-kubepods.slice"},
		{"-.slice", "systemd", "/kubepods.slice"},
	} {
		got, err := PodsCgroupPath(tc.root, tc.driver)
		if err != nil || got != tc.want {
			t.Errorf("PodsCgroupPath(%q, %s) = %q, %v; want %q", tc.root, tc.driver, got, err, tc.want)
		}
	}
	for _, tc := range []struct{ root, driver string }{
		{"/a/../b", "cgroupfs"}, {"unitlet", "systemd"}, {"a--b.slice", "systemd"}, {"/", "none"},
	} {
		if got, err := PodsCgroupPath(tc.root, tc.driver); err == nil {
			t.Errorf("PodsCgroupPath(%q, %s) = %q, want an error", tc.root, tc.driver, got)
		}
	}
}
