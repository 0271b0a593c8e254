package machineinfo

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

// readTree reads the machine of a fake tree of files (paths under proc/, sys/, etc/).
func readTree(t *testing.T, now time.Time, files map[string]string) *MachineInfo {
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
	r := Reader{Proc: filepath.Join(root, "proc"), Sys: filepath.Join(root, "sys"), Etc: filepath.Join(root, "etc"), RootDir: root, Now: func() time.Time { return now }}
	m, err := r.Read()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// Two NUMA nodes, each with one core of two threads, on one socket.
func TestRead(t *testing.T) {
	now := time.Unix(1700000000, 0)
	m := readTree(t, now, map[string]string{
		"proc/meminfo":                                             "MemTotal:       8000 kB\nSwapTotal:      1000 kB\n",
		"proc/cpuinfo":                                             "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu MHz\t\t: 2400.500\n",
		"proc/sys/kernel/random/boot_id":                           "b00t\n",
		"proc/self/mountinfo":                                      "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n30 22 0:5 / /var/lib rw - xfs /dev/sdb1 rw\n",
		"etc/machine-id":                                           "m4ch1ne\n",
		"sys/class/dmi/id/product_uuid":                            "UUID-1\n",
		"sys/devices/system/cpu/online":                            "0-3\n",
		"sys/devices/system/node/node0/cpulist":                    "0,2\n",
		"sys/devices/system/node/node1/cpulist":                    "1,3\n",
		"sys/devices/system/node/node0/meminfo":                    "Node 0 MemTotal:       4000 kB\n",
		"sys/devices/system/node/node1/meminfo":                    "Node 1 MemTotal:       4000 kB\n",
		"sys/devices/system/cpu/cpu0/topology/core_id":             "0\n",
		"sys/devices/system/cpu/cpu2/topology/core_id":             "0\n",
		"sys/devices/system/cpu/cpu1/topology/core_id":             "1\n",
		"sys/devices/system/cpu/cpu3/topology/core_id":             "1\n",
		"sys/devices/system/cpu/cpu0/topology/physical_package_id": "0\n",
		"sys/devices/system/cpu/cpu1/topology/physical_package_id": "0\n",
		"sys/devices/system/cpu/cpu2/topology/physical_package_id": "0\n",
		"sys/devices/system/cpu/cpu3/topology/physical_package_id": "0\n",
		"sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages":    "4\n",
	})
	if m.NumCores != 4 || m.NumPhysicalCores != 2 || m.NumSockets != 1 || m.CPUVendorID != "GenuineIntel" || m.CPUFrequencyKHz != 2400500 {
		t.Errorf("cpus: %d cores, %d physical, %d sockets, vendor %q, %d kHz; want 4, 2, 1, GenuineIntel, 2400500", m.NumCores, m.NumPhysicalCores, m.NumSockets, m.CPUVendorID, m.CPUFrequencyKHz)
	}
	if m.MemoryCapacity != 8000*1024 || m.SwapCapacity != 1000*1024 {
		t.Errorf("memory %d swap %d", m.MemoryCapacity, m.SwapCapacity)
	}
	if m.MachineID != "m4ch1ne" || m.SystemUUID != "UUID-1" || m.BootID != "b00t" || !m.Timestamp.Equal(now) {
		t.Errorf("ids: %q %q %q %v", m.MachineID, m.SystemUUID, m.BootID, m.Timestamp)
	}
	want := []Node{
		{ID: 0, Memory: 4000 * 1024, HugePages: []HugePagesInfo{}, Cores: []Core{{ID: 0, Threads: []int{0, 2}}}},
		{ID: 1, Memory: 4000 * 1024, HugePages: []HugePagesInfo{}, Cores: []Core{{ID: 1, Threads: []int{1, 3}}}},
	}
	if !reflect.DeepEqual(m.Topology, want) {
		t.Errorf("topology %+v, want %+v", m.Topology, want)
	}
	if !reflect.DeepEqual(m.HugePages, []HugePagesInfo{{PageSize: 2048, NumPages: 4}}) {
		t.Errorf("huge pages %+v", m.HugePages)
	}
	if len(m.Filesystems) != 1 || m.Filesystems[0].Capacity == 0 {
		t.Errorf("filesystems %+v, want the root dir's", m.Filesystems)
	}
}

// Without NUMA in sysfs, one node holds every online cpu and the machine's memory.
func TestReadWithoutNUMA(t *testing.T) {
	m := readTree(t, time.Now(), map[string]string{
		"proc/meminfo": "MemTotal: 2048 kB\n", "proc/cpuinfo": "processor\t: 0\n", "sys/devices/system/cpu/online": "0-1\n",
	})
	if len(m.Topology) != 1 || m.Topology[0].Memory != 2048*1024 || len(m.Topology[0].Cores) != 2 || m.NumCores != 2 {
		t.Errorf("topology %+v, %d cores; want node 0 with both cpus and all memory", m.Topology, m.NumCores)
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
