package nodeinfo

import (
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func TestReadMachineNoRootDir(t *testing.T) {
	_, err := ReadMachine(filepath.Join(t.TempDir(), "missing"))
	if err == nil || !strings.Contains(err.Error(), "statfs root dir") {
		t.Errorf("err = %v, want a statfs error naming the root dir", err)
	}
}

func writeFiles(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestReadMachineFromFiles(t *testing.T) {
	const meminfo = "MemTotal:        2048000 kB\nMemFree:  10 kB\nHugePages_Total:       3\nHugepagesize:       2048 kB\n"
	const cpuinfo = "processor\t: 0\nmodel name\t: x\n\nprocessor\t: 1\n\nprocessor\t: 2\n"
	tests := []struct {
		name      string
		files     map[string]string
		wantCPU   int64
		wantMem   int64
		wantHuge  map[string]int64
		wantError string
	}{{
		name: "sysfs lists every page size",
		files: map[string]string{
			"proc/cpuinfo": cpuinfo, "proc/meminfo": meminfo,
			"sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages":    "4\n",
			"sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages": "0\n",
		},
		wantCPU:  3000,
		wantMem:  2048000 * 1024,
		wantHuge: map[string]int64{"2Mi": 8 * mi, "1Gi": 0},
	}, {
		name:     "no sysfs: meminfo's default size",
		files:    map[string]string{"proc/cpuinfo": cpuinfo, "proc/meminfo": meminfo},
		wantCPU:  3000,
		wantMem:  2048000 * 1024,
		wantHuge: map[string]int64{"2Mi": 6 * mi},
	}, {
		name:     "cpuinfo without processors: runtime.NumCPU",
		files:    map[string]string{"proc/cpuinfo": "", "proc/meminfo": "MemTotal: 1 kB\n"},
		wantCPU:  int64(runtime.NumCPU()) * 1000,
		wantMem:  1024,
		wantHuge: map[string]int64{},
	}, {
		name:      "no MemTotal",
		files:     map[string]string{"proc/cpuinfo": cpuinfo, "proc/meminfo": "MemFree: 1 kB\n"},
		wantError: "no MemTotal",
	}, {
		name:      "garbled meminfo",
		files:     map[string]string{"proc/cpuinfo": cpuinfo, "proc/meminfo": "MemTotal: many kB\n"},
		wantError: "field MemTotal",
	}, {
		name:      "garbled pid_max",
		files:     map[string]string{"proc/cpuinfo": cpuinfo, "proc/meminfo": meminfo, "proc/sys/kernel/pid_max": "lots\n"},
		wantError: "pid_max",
	}, {
		name: "garbled nr_hugepages",
		files: map[string]string{
			"proc/cpuinfo": cpuinfo, "proc/meminfo": meminfo,
			"sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages": "x\n",
		},
		wantError: "nr_hugepages",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			files := map[string]string{"proc/sys/kernel/pid_max": "4194304\n", "proc/sys/kernel/threads-max": "63422\n"}
			maps.Copy(files, tt.files)
			writeFiles(t, root, files)
			m, err := readMachine(filepath.Join(root, "proc"), filepath.Join(root, "sys"), root)
			if tt.wantError != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantError) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantError)
				}
				return
			}
			if err != nil {
				t.Fatalf("readMachine: %v", err)
			}
			if m.CPUMilli != tt.wantCPU {
				t.Errorf("CPUMilli = %d, want %d", m.CPUMilli, tt.wantCPU)
			}
			if want := int64(63422); m.MaxPIDs != want {
				t.Errorf("MaxPIDs = %d, want %d (the lower of pid_max and threads-max)", m.MaxPIDs, want)
			}
			if m.MemoryBytes != tt.wantMem {
				t.Errorf("MemoryBytes = %d, want %d", m.MemoryBytes, tt.wantMem)
			}
			if len(m.HugePages) != len(tt.wantHuge) {
				t.Errorf("HugePages = %v, want %v", m.HugePages, tt.wantHuge)
			}
			for k, v := range tt.wantHuge {
				if got, ok := m.HugePages[k]; !ok || got != v {
					t.Errorf("HugePages[%s] = %d (present %v), want %d", k, got, ok, v)
				}
			}
			if m.EphemeralStorageBytes <= 0 {
				t.Errorf("EphemeralStorageBytes = %d, want > 0", m.EphemeralStorageBytes)
			}
		})
	}
}
