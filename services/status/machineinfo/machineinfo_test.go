package machineinfo

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// readTree reads the machine of a fake tree of files (paths under proc/, sys/, etc/).
func readTree(t *testing.T, files map[string]string) (*MachineInfo, error) {
	t.Helper()
	root := t.TempDir()
	for name, body := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return Reader{Proc: filepath.Join(root, "proc"), Sys: filepath.Join(root, "sys"), Etc: filepath.Join(root, "etc")}.Read()
}

func TestRead(t *testing.T) {
	m, err := readTree(t, map[string]string{
		"proc/meminfo":                   "MemTotal:       8000 kB\nSwapTotal:      1000 kB\n",
		"proc/sys/kernel/random/boot_id": "b00t\n",
		"etc/machine-id":                 "m4ch1ne\n",
		"sys/class/dmi/id/product_uuid":  "UUID-1\n",
		"sys/devices/system/cpu/online":  "0-3,6\n",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := MachineInfo{NumCores: 5, MemoryCapacity: 8000 * 1024, MachineID: "m4ch1ne", SystemUUID: "UUID-1", BootID: "b00t"}
	if *m != want {
		t.Errorf("Read: %+v, want %+v", *m, want)
	}
}

// A container has no DMI UUID: it is left empty. Unreadable memory or cpus are errors.
func TestReadMissing(t *testing.T) {
	m, err := readTree(t, map[string]string{"proc/meminfo": "MemTotal: 2048 kB\n", "sys/devices/system/cpu/online": "0-1\n"})
	if err != nil || m.NumCores != 2 || m.MemoryCapacity != 2048*1024 || m.SystemUUID != "" {
		t.Errorf("Read: %+v, %v; want 2 cores, 2 MiB and no UUID", m, err)
	}
	if _, err := readTree(t, map[string]string{"sys/devices/system/cpu/online": "0-1\n"}); err == nil {
		t.Error("Read without /proc/meminfo: no error")
	}
	if _, err := readTree(t, map[string]string{"proc/meminfo": "MemTotal: 2048 kB\n", "sys/devices/system/cpu/online": "1-0\n"}); err == nil {
		t.Error("Read with a bad online cpu list: no error")
	}
}

func TestParseCPUList(t *testing.T) {
	got, err := parseCPUList("0-2,5,7-8\n")
	if err != nil || !reflect.DeepEqual(got, []int{0, 1, 2, 5, 7, 8}) {
		t.Errorf("parseCPUList: %v %v", got, err)
	}
	for _, bad := range []string{"a", "3-1", "1-x"} {
		if _, err := parseCPUList(bad); err == nil {
			t.Errorf("parseCPUList(%q) accepted", bad)
		}
	}
}
