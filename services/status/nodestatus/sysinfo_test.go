package nodestatus

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

func TestKubeletVersionIsSemverNamingUnitlet(t *testing.T) {
	semver := regexp.MustCompile(`^v1\.36\.3-unitlet\+[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*$`)
	if v := KubeletVersion(); !semver.MatchString(v) {
		t.Errorf("KubeletVersion() = %q, not v1.36.3-unitlet+<build>", v)
	}
	checkMapping(t, "buildMetadata", buildMetadata, map[string]string{
		"v0.1.0-3-gabcdef0-dirty": "v0.1.0-3-gabcdef0-dirty",
		"dev":                     "dev",
		"a/b_c":                   "a-b-c",
		"":                        "unknown",
	})
}

func TestHostFilesMissing(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "var/lib/dbus"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "var/lib/dbus/machine-id"), []byte("abc\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	info := hostFiles{root: root}.read()
	if info.machineID != "abc" {
		t.Errorf("machineID = %q, want dbus's when /etc/machine-id is missing", info.machineID)
	}
	if info.systemUUID != "" || info.bootID != "" {
		t.Errorf("unreadable files gave %+v", info)
	}
	if info.osImage != "Linux" {
		t.Errorf("osImage = %q, want Linux without os-release", info.osImage)
	}
}

func TestHostFilesOnThisMachine(t *testing.T) {
	info := hostFiles{root: "/"}.read()
	want, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		t.Fatal(err)
	}
	if info.bootID == "" || info.bootID+"\n" != string(want) {
		t.Errorf("bootID = %q, want %q", info.bootID, want)
	}
	if info.kernelVersion == "" {
		t.Error("no kernel version")
	}
}
